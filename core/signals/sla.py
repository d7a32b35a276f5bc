"""SLA risk: will a workload finish before its deadline, and what node speed would make it?

Inputs per workload (all optional except a deadline, without which there is no SLA):

- deadline: label ``clawpoint.io/deadline`` (ISO-8601, UTC when no offset is given), or
  ``deadline`` from the backend (a ``deadline`` label or attribute of the workload);
- progress: the progress file ``<run_dir>/NAME.progress.json`` = ``{"step": n, "total": m}``
  (basis ``progress``), else elapsed time against label ``clawpoint.io/expected-duration``
  (``3600``, ``90s``, ``45m``, ``2h``, ``1h30m``; basis ``expected-duration``);
- progress rate (steps/s): from successive observations (oldest to newest; the watch loop
  persists them), else step / time since ``started_at``;
- node speed: label ``clawpoint.io/speed`` on the node (relative, default 1.0). Remaining
  time scales with 1/speed: at speed 2.0 the same steps take half as long;
- the workload's last move (``Moved``, recorded by the service when a migrate, resume,
  restore, failover or requeue succeeded): progress made before it says how fast the
  workload went on the node it left, not on this one. From the move on, the rate is
  measured from the step it started at on this node once ``MOVE_SETTLE_S`` of progress are
  seen here; until then it is the rate it made on the old node scaled by the two nodes'
  speeds, and the risk says ``estimated: true`` (what a migration's dry-run projection
  assumed, so the two agree).

Levels (``slack = deadline - ETA``, ``remaining`` = seconds of work left at current speed):
``high`` when slack < 0 (the ETA is past the deadline) or slack < 10% of remaining;
``medium`` when slack < 25% of remaining; ``low`` otherwise. ``needed_speed`` is the
speed at which slack would be back to 25% of the (shorter) remaining time, i.e. ``low``:
``speed x remaining x 1.25 / time_left``; None when the deadline has passed.

Pure functions plus ``read_progress`` (one small file read). Limits: the rate is assumed
constant over the rest of the run; a workload restarted from a checkpoint with no recorded
move (one moved outside clawpoint) gets its rate from ``started_at`` of the new run, which
overestimates it; a resumed workload (stopped before its move) has no old rate to scale, so
its remaining time is unknown until ``MOVE_SETTLE_S`` of progress are seen; the
``expected-duration`` basis ignores moves.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import ConfigDict, Field

from core.model import NodeInfo, WorkloadInfo
from core.schema_base import Model
from core.signals.model import Severity, Signal, UtcDatetime, _aware_utc

DEADLINE_LABEL = "clawpoint.io/deadline"
EXPECTED_LABEL = "clawpoint.io/expected-duration"
SPEED_LABEL = "clawpoint.io/speed"
HIGH_SLACK_FRACTION = 0.10
# Progress seen on a node after a move before its own rate replaces the estimate.
MOVE_SETTLE_S = 60.0
MEDIUM_SLACK_FRACTION = 0.25

Basis = Literal["progress", "expected-duration", "none"]

_DURATION = re.compile(
    r"^(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$"
)


class RiskLevel(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class Progress(Model):
    model_config = ConfigDict(frozen=True)

    step: int = Field(ge=0)
    total: int | None = Field(default=None, ge=1)


class Observation(Model):
    """One sighting of a workload's step counter (what the watch loop persists)."""

    model_config = ConfigDict(frozen=True)

    step: int
    at: UtcDatetime


class Moved(Model):
    """A workload's last move, as the service recorded it when the move succeeded."""

    model_config = ConfigDict(frozen=True)

    at: UtcDatetime = Field(description="when it started on the new node")
    node: str | None = Field(default=None, description="the node it moved to (bare name)")
    step: int | None = Field(default=None, description="its step when it started there")
    from_node: str | None = None
    from_speed: float = Field(default=1.0, gt=0, description="speed of the node it left")
    rate: float | None = Field(default=None, description="steps/s it made on the node it left")


class Estimate(NamedTuple):
    basis: Basis
    fraction: float | None
    rate: float | None  # steps/s on the node it runs on now
    remaining: float | None  # seconds of work left at that rate
    estimated: bool = False  # the rate is the old node's, scaled by speed (see ``Moved``)


class SlaRisk(Signal):
    kind: Literal["sla_risk"] = "sla_risk"
    workload: str
    node: str | None = None
    deadline: UtcDatetime
    basis: Basis
    step: int | None = None
    total: int | None = None
    fraction_done: float | None = None
    rate_steps_per_s: float | None = None
    node_speed: float = 1.0
    remaining_s: float | None = Field(default=None, description="work left at current speed")
    eta: UtcDatetime | None = None
    time_left_s: float
    slack_s: float | None = None
    level: RiskLevel
    needed_speed: float | None = Field(
        default=None, description="node speed that brings the level back to low"
    )
    estimated: bool = Field(
        default=False,
        description="moved recently: the rate is the old node's scaled by node speed until "
        "progress on this node is seen",
    )


def parse_deadline(value: str) -> datetime | None:
    try:
        return _aware_utc(datetime.fromisoformat(value.strip().replace("Z", "+00:00")))
    except ValueError:
        return None


def parse_duration_s(value: str) -> float | None:
    """``3600`` / ``90s`` / ``45m`` / ``2h`` / ``1d`` / ``1h30m`` -> seconds; None if unreadable."""
    m = _DURATION.fullmatch(value.strip().lower())
    if not m or not any(m.groups()):
        return None
    d, h, mins, s = (float(g) if g else 0.0 for g in m.groups())
    return d * 86400 + h * 3600 + mins * 60 + s


def node_speed(node: NodeInfo | None) -> float:
    if node is None:
        return 1.0
    try:
        speed = float(node.labels.get(SPEED_LABEL, "1.0"))
    except ValueError:
        return 1.0
    return speed if speed > 0 and math.isfinite(speed) else 1.0


def workload_deadline(workload: WorkloadInfo) -> datetime | None:
    raw = workload.labels.get(DEADLINE_LABEL) or workload.labels.get("deadline")
    if raw:
        return parse_deadline(raw)
    extra = getattr(workload, "deadline", None)  # a backend's own field, if it has one
    return _aware_utc(extra) if isinstance(extra, datetime) else None


def read_progress(run_dir: Path, name: str) -> Progress | None:
    """The workload's progress file, or None when absent or unreadable."""
    try:
        data = json.loads((run_dir / f"{name}.progress.json").read_text())
        return Progress(step=int(data["step"]), total=data.get("total"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def rate_from(history: Sequence[Observation], min_span_s: float = 1.0) -> float | None:
    """Steps per second between the oldest and the newest observation (None if too close)."""
    if len(history) < 2:
        return None
    first, last = history[0], history[-1]
    span = (last.at - first.at).total_seconds()
    if span < min_span_s or last.step <= first.step:
        return None
    return (last.step - first.step) / span


def level_of(slack_s: float, remaining_s: float) -> RiskLevel:
    if slack_s < 0 or slack_s < HIGH_SLACK_FRACTION * remaining_s:
        return RiskLevel.HIGH
    if slack_s < MEDIUM_SLACK_FRACTION * remaining_s:
        return RiskLevel.MEDIUM
    return RiskLevel.LOW


def needed_speed_for(speed: float, remaining_s: float, time_left_s: float) -> float | None:
    if time_left_s <= 0:
        return None
    return speed * remaining_s * (1 + MEDIUM_SLACK_FRACTION) / time_left_s


def rate_since_move(
    moved: Moved,
    *,
    now: datetime,
    step: int,
    history: Sequence[Observation] = (),
    speed: float = 1.0,
) -> tuple[float | None, bool]:
    """(steps/s on the node it moved to, whether that is an estimate).

    Measured from the step it started at there, the sightings since and ``step`` now, once
    they span ``MOVE_SETTLE_S``; before that, the old node's rate (recorded, else from the
    sightings before the move) times ``speed / from_speed``; None when neither is known."""
    if moved.step is not None:
        since = [Observation(step=moved.step, at=moved.at)]
        since += [o for o in history if o.at > moved.at and o.step >= moved.step]
        since.append(Observation(step=step, at=now))
        measured = rate_from(since, min_span_s=MOVE_SETTLE_S)
        if measured is not None:
            return measured, False
    old = moved.rate or rate_from([o for o in history if o.at <= moved.at])
    return (old * speed / moved.from_speed if old else None), True


def estimate(
    workload: WorkloadInfo,
    *,
    now: datetime,
    progress: Progress | None = None,
    history: Sequence[Observation] = (),
    moved: Moved | None = None,
    speed: float = 1.0,
) -> Estimate:
    """Basis, fraction done, rate in steps/s and seconds of work left at the current speed
    (``moved``: its last move, applied when it is on the node it moved to; ``speed``: the
    speed of the node it runs on)."""
    expected = parse_duration_s(workload.labels.get(EXPECTED_LABEL, "") or "")
    if progress is not None and progress.total:
        fraction = min(progress.step / progress.total, 1.0)
        estimated = False
        if moved is not None and moved.node is not None and moved.node == workload.node:
            rate, estimated = rate_since_move(
                moved, now=now, step=progress.step, history=history, speed=speed
            )
        else:
            rate = rate_from(history)
            if rate is None and workload.started_at is not None and progress.step > 0:
                elapsed = (now - workload.started_at).total_seconds()
                rate = progress.step / elapsed if elapsed > 0 else None
        remaining = max(progress.total - progress.step, 0) / rate if rate else None
        return Estimate("progress", fraction, rate, remaining, estimated)
    if expected is not None and workload.started_at is not None:
        elapsed = max((now - workload.started_at).total_seconds(), 0.0)
        fraction = min(elapsed / expected, 1.0) if expected > 0 else 1.0
        return Estimate("expected-duration", fraction, None, max(expected - elapsed, 0.0))
    return Estimate("none", None, None, None)


def assess(
    workload: WorkloadInfo,
    *,
    now: datetime,
    progress: Progress | None = None,
    history: Sequence[Observation] = (),
    speed: float = 1.0,
    moved: Moved | None = None,
) -> SlaRisk | None:
    """The SLA risk of one workload; None when it has no deadline (``moved``: its last
    move, see ``estimate``)."""
    deadline = workload_deadline(workload)
    if deadline is None:
        return None
    time_left = (deadline - now).total_seconds()
    basis, fraction, rate, remaining, estimated = estimate(
        workload, now=now, progress=progress, history=history, moved=moved, speed=speed
    )
    if remaining is None:
        # No way to tell progress: only a passed deadline is certain.
        level = RiskLevel.HIGH if time_left < 0 else RiskLevel.LOW
        return SlaRisk(
            source="sla",
            observed_at=now,
            subject=workload.id,
            severity=Severity.CRITICAL if time_left < 0 else Severity.INFO,
            message=f"{workload.id}: deadline {deadline.isoformat()}, progress unknown",
            workload=workload.id,
            node=workload.node,
            deadline=deadline,
            basis=basis,
            step=progress.step if progress else None,
            total=progress.total if progress else None,
            node_speed=speed,
            time_left_s=time_left,
            level=level,
            estimated=estimated,
        )
    slack = time_left - remaining
    level = level_of(slack, remaining)
    severity = {
        RiskLevel.LOW: Severity.INFO,
        RiskLevel.MEDIUM: Severity.WARNING,
        RiskLevel.HIGH: Severity.CRITICAL,
    }[level]
    return SlaRisk(
        source="sla",
        observed_at=now,
        subject=workload.id,
        severity=severity,
        message=(
            f"{workload.id}: ETA {remaining:.0f} s vs {time_left:.0f} s to the deadline "
            f"(slack {slack:.0f} s, {level.value})"
        ),
        workload=workload.id,
        node=workload.node,
        deadline=deadline,
        basis=basis,
        step=progress.step if progress else None,
        total=progress.total if progress else None,
        fraction_done=fraction,
        rate_steps_per_s=rate,
        node_speed=speed,
        remaining_s=remaining,
        eta=now + timedelta(seconds=remaining),
        time_left_s=time_left,
        slack_s=slack,
        level=level,
        needed_speed=needed_speed_for(speed, remaining, time_left),
        estimated=estimated,
    )
