"""What the cross-node migration benches share (``slurm_migration``, ``k8s_migration``):
the moves run in turn, their step times, the pause table against the local handoff, and
where the results go (JSON, the docs' section).

Limits: formatting and bookkeeping only; each bench measures its own moves
(``bench.migration.Watcher``).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.docs_section import write_section
from core.model import Execution

Rows = dict[str, list[dict[str, Any]]]
RESULTS = Path(__file__).resolve().parent / "results"


def step_times(execution: Execution) -> dict[str, float]:
    """Where a move's command spent its time, step by step (the journal's start to end)."""
    return {
        s.name: round((s.finished_at - s.started_at).total_seconds(), 3)
        for s in execution.steps
        if s.started_at is not None and s.finished_at is not None
    }


def in_home(home: Path, move: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """``move`` run with ``CLAWPOINT_HOME`` set to ``home`` (each kind of move has its own
    settings; the local handoff's wrappers read the variable)."""

    def run() -> dict[str, Any]:
        os.environ["CLAWPOINT_HOME"] = str(home)
        return move()

    return run


def alternate(reps: int, moves: dict[str, Callable[[], dict[str, Any]]]) -> Rows:
    """Each move in turn, ``reps`` times, disk synced and a second's rest before each."""
    rows: Rows = {kind: [] for kind in moves}
    for rep in range(reps):
        for kind, move in moves.items():
            os.sync()
            time.sleep(1)
            got = move()
            rows[kind].append(got)
            print(f"  rep {rep + 1} {kind:>8}: pause {got['freeze_s']:.3f} s "
                  f"(command {got['command_s']:.2f} s) {got.get('how', '')} "
                  f"{got.get('steps_s', '')}", flush=True)  # fmt: skip
    return rows


def pause_table(rows: Rows, labels: dict[str, str]) -> tuple[list[str], dict[str, float]]:
    """The markdown table of median pauses against ``rows["local"]``, and each ratio."""
    med = {k: statistics.median(r["freeze_s"] for r in v) for k, v in rows.items()}
    ratio = {k: med[k] / med["local"] if med["local"] else float("nan") for k in rows}
    runs = {k: ", ".join(f"{r['freeze_s']:.3f}" for r in v) for k, v in rows.items()}
    table = [
        "| move | median pause | / local | runs (s) | command wall (median) |",
        "|---|---|---|---|---|",
        *(
            f"| {labels[k]} | {med[k]:.3f} s | x{ratio[k]:.2f} | {runs[k]} | "
            f"{statistics.median(r['command_s'] for r in v):.2f} s |"
            for k, v in rows.items()
        ),
    ]
    return table, ratio


def step_lines(rows: Rows, labels: dict[str, str], kinds: tuple[str, ...]) -> list[str]:
    """One line per kind: the median time of each step of its plan."""
    return [
        f"The {labels[k]}'s steps (the journal's start to end, median of the runs): "
        + ", ".join(f"`{n}` {_median_step(rows[k], n):.2f} s" for n in rows[k][0]["steps_s"])
        + "."
        for k in kinds
    ]


def _median_step(runs: list[dict[str, Any]], name: str) -> float:
    return statistics.median(r["steps_s"][name] for r in runs if name in r["steps_s"])


def publish(name: str, machine: dict[str, Any], rows: Rows, md: str, *, docs: bool) -> None:
    """``results/NAME.json``, the table printed, and the docs' section ``NAME`` rewritten."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"machine": machine, **rows}
    (RESULTS / f"{name.replace('-', '_')}.json").write_text(json.dumps(payload, indent=2))
    print(md)
    if docs:
        write_section(name, md)
