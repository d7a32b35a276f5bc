"""One pause estimator and typed timings (core.timings).

The local backend's plans and the service's insights estimate a move's pause with the same
function; the handoff's pause report keeps the keys its step output always had.
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from core import timings
from core.backends.local import moves, planning
from core.model import CheckpointInfo, PlanStep
from core.service import insights


def _ckpt(size: int = 2 * 10**9, **t: float) -> CheckpointInfo:
    return CheckpointInfo(
        id="train/3",
        lineage="train",
        seq=3,
        engine="criu",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        size_bytes=size,
        timings=t,
        extra={"progress": {"step": 10, "ts": 9.9}},
    )


def test_the_estimates_are_the_figures_plans_always_showed() -> None:
    assert timings.estimate_pause(_ckpt(total_s=1.2)) == 2 * 1.2 + 0.5
    assert timings.estimate_pause(_ckpt()) == 2 * 2.0 + 0.5  # from the size at 1 GB/s
    post = timings.estimate_pause(_ckpt(frozen_s=0.4, total_s=9.0), handoff_mode="post-copy")
    assert post == round(0.4 + 0.1 + 0.1, 2)
    copy = timings.estimate_pause(_ckpt(criu_dump_s=0.3), handoff_mode="stop-and-copy")
    assert copy == round(0.3 + 0.3 + 0.1, 2)
    assert timings.estimate_pause(None, resident_bytes=10**9) == 2.5
    assert timings.estimate_pause(None) is None


def test_planning_and_insights_use_the_one_estimator(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []

    def spy(last: CheckpointInfo | None, **kw: Any) -> float:
        calls.append((last, kw))
        return 7.0

    monkeypatch.setattr(timings, "estimate_pause", spy)
    ckpt = _ckpt(total_s=1.0)
    ctx = SimpleNamespace(store=SimpleNamespace(list=lambda name: [ckpt]))
    handoff = PlanStep(
        name="c",
        op="checkpoint",
        description="c",
        args={"handoff": "$s.socket", "mode": "post-copy"},
    )
    assert planning.estimate_pause(ctx, "train", move=[handoff]) == 7.0  # type: ignore[arg-type]
    pause, _ = insights._checkpoint_facts([ckpt.model_copy(update={"id": "local:train/3"})])
    assert pause == {"local:train": 7.0}
    assert [c[1] for c in calls] == [{"handoff_mode": "post-copy"}, {}]


def _report(restore: dict[str, Any], ckpt: CheckpointInfo) -> dict[str, Any]:
    out = moves.handoff_report(restore, ckpt)
    return out if isinstance(out, dict) else out.model_dump(mode="json")


def test_the_handoff_report_keeps_its_keys() -> None:
    restore = {
        "timings": {"criu_restore_s": 0.3, "restore_restore_s": 0.2, "resumed_at": 11.0},
        "handoff": {
            "mode": "post-copy",
            "staged": True,
            "sent_at": 10.0,
            "received_at": 10.5,
            "resumed_at": 11.0,
            "marks": {"locked": 10.6},
        },
        "first_progress": {"step": 12, "ts": 11.2},
    }
    assert _report(restore, _ckpt(frozen_s=0.4)) == {
        "mode": "post-copy",
        "staged": True,
        "criu_frozen_s": 0.4,
        "criu_restore_s": 0.2,
        "restore_wall_s": 0.3,
        "handoff_s": 0.5,
        "takeover_s": 0.5,
        "takeover_marks": {"locked": 10.6},
        "paused_s": 1.1,
        "workload_gap": {"steps": 2.0, "seconds": 1.3},
    }
    assert _report({}, _ckpt()) == {
        "mode": None,
        "staged": False,
        "criu_frozen_s": None,
        "criu_restore_s": None,
        "restore_wall_s": None,
    }
