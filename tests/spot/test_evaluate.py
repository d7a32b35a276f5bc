"""evaluate(): input validation, trace loading and a small end-to-end report."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import errors
from core.planner.spot import evaluate, load_traces, render_report

ARGS = {
    "compute_hours": 2.0,
    "job_fractions": [0.5, 0.9],
    "changeover_hours": [0.1],
    "starts": 3,
    "seed": 1,
    "policies": ["greedy", "uniform-progress", "omniscient", "clawpoint"],
}


def write_trace(path: Path, avail: list[int]) -> Path:
    rows = [
        f"2023-02-15 {h:02d}:{m:02d}:00,{a}"
        for (h, m), a in zip(
            ((i // 12, (i % 12) * 5) for i in range(len(avail))), avail, strict=True
        )
    ]
    path.write_text("date,availability\n" + "\n".join(rows) + "\n")
    return path


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write_trace(tmp_path / "z.csv", [int((i // 7) % 3 != 0) for i in range(200)])


def test_report_end_to_end(trace: Path) -> None:
    report = evaluate([trace], **ARGS)  # type: ignore[arg-type]
    assert len(report.runs) == 4 * 2 * 3
    assert [s.policy for s in report.overall] == report.policies
    assert len(report.policies) == 4
    assert all(r.gap >= -1e-9 and not r.missed for r in report.runs)
    text = render_report(report)
    assert "uniform-progress" in text and "gap p75" in text


def test_tick_is_csv_spacing(trace: Path) -> None:
    (t,) = load_traces([trace])
    assert t.tick_hours == pytest.approx(5 / 60)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"job_fractions": [0.0]}, "job_fractions"),
        ({"job_fractions": [1.2]}, "job_fractions"),
        ({"policies": ["magic"]}, "policies"),
        ({"starts": 0}, "starts"),
        ({"on_demand_price": -1.0}, "on_demand_price"),
        # Each of these was a traceback or a run that never ended (found by hand, 2026-12-03).
        ({"compute_hours": float("inf")}, "compute_hours"),
        ({"compute_hours": 1e308}, "compute_hours"),
        ({"changeover_hours": [float("inf")]}, "changeover_hours"),
        ({"job_fractions": [1e-300]}, "job_fractions"),
        ({"starts": 10**20}, "starts"),
        ({"workers": 0}, "workers"),
        ({"workers": 100_000}, "workers"),
        ({"spot_price": float("inf")}, "spot_price"),
        ({"on_demand_price": float("nan")}, "on_demand_price"),
    ],
)
def test_bad_inputs(trace: Path, change: dict[str, object], needle: str) -> None:
    with pytest.raises(errors.InvalidInput) as exc:
        evaluate([trace], **{**ARGS, **change})  # type: ignore[arg-type]
    assert needle in exc.value.message and exc.value.hint


def test_bad_paths_and_empty_trace(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidInput):
        evaluate([tmp_path / "nope.csv"], **ARGS)  # type: ignore[arg-type]
    empty = tmp_path / "e.csv"
    empty.write_text("date,availability\n")
    with pytest.raises(errors.InvalidInput) as exc:
        evaluate([empty], **ARGS)  # type: ignore[arg-type]
    assert exc.value.hint
    with pytest.raises(errors.InvalidInput):
        evaluate([tmp_path], **ARGS)  # type: ignore[arg-type]  # dir without CSVs
    bad = tmp_path / "b.csv"
    bad.write_text("date,availability\n2023-02-15 00:00:00,2\n2023-02-15 00:05:00,1\n")
    with pytest.raises(errors.InvalidInput):
        evaluate([bad], **ARGS)  # type: ignore[arg-type]


def test_trace_too_short_for_deadline(tmp_path: Path) -> None:
    short = write_trace(tmp_path / "s.csv", [1] * 10)
    with pytest.raises(errors.InvalidInput):
        evaluate([short], **ARGS)  # type: ignore[arg-type]


def test_unreadable_traces_are_named(tmp_path: Path) -> None:
    """Not UTF-8, not a regular file, prices that are no numbers: each a traceback before."""
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(errors.InvalidInput, match="is not UTF-8 text"):
        load_traces([binary])
    with pytest.raises(errors.InvalidInput, match="is not a regular file"):
        load_traces([Path("/dev/null")])
    (tmp_path / "d").mkdir()
    write_trace(tmp_path / "d" / "a.csv", [1, 0, 1])
    for prices in ('{"a": ["x", 1, 2]}', '{"a": [1, NaN, 2]}', '{"a": [1, {}, 2]}'):
        (tmp_path / "d" / "spot_prices.json").write_text(prices)
        with pytest.raises(errors.InvalidInput, match="not all finite numbers"):
            load_traces([tmp_path / "d"])
    (tmp_path / "d" / "spot_prices.json").write_text('{"a": [1, 2.5, 0]}')
    assert load_traces([tmp_path / "d"])[0].prices == (1.0, 2.5, 0.0)
