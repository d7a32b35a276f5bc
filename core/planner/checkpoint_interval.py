"""Checkpoint economics: the periodic-checkpoint interval that minimises what is lost.

Role: given what a workload's checkpoint costs (``CheckpointCost``: the pause the workload
sees and the checkpoint's wall time until it is durable, as the store's ``timings`` record
them, see ``core.timings``) and the interruption hazard (``core.planner.interruption_hazard``),
``recommend`` returns the interval the wrapper's timer (``checkpoint_every``) should use now,
with the expected lost work and checkpoint overhead per hour and one short ``why``.

The model: the timer waits ``interval`` after a checkpoint completes, then checkpoints
again; a checkpoint pauses the workload ``pause_s`` and is durable ``wall_s`` after it
started. Overhead per hour is ``pause / period`` and lost work per interruption about half a
period plus the wall time (the work of a checkpoint in flight is not yet safe), with
``period = interval + wall``. For a constant rate the best period is Young's
``sqrt(2 C M)`` (C = pause, M = 1 / rate), with Daly's higher-order terms (``daly_period``).
Where the rate changes with the run's age (reclaims that cluster, failures in bursts), the
adaptive rule applies Daly's period to the mean rate over the next period itself (a fixed
point): short intervals while the run is young and interruptions likely, long ones once it
has survived. For a constant hazard the two are the same.

Limits: pure (no I/O); first-order in the rate (a hazard that changes a lot within one
period is averaged over it); the restart cost after an interruption is the same whatever the
interval and is left out; the hazard's only covariate is the run's age.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from core import errors
from core.model import CheckpointInfo
from core.planner.interruption_hazard import Hazard
from core.timings import DumpTimings

# The timer's bounds unless the caller sets its own: not more often than every 10 s, at
# least once a day.
MIN_INTERVAL_S = 10.0
MAX_INTERVAL_S = 86_400.0
_HINT_COST = "Give the measured pause and wall time in seconds (pause > 0, wall >= pause)."


class CheckpointCost(BaseModel):
    """What one checkpoint costs: ``pause_s`` the workload is frozen, ``wall_s`` from its
    start until it is durable (published)."""

    model_config = ConfigDict(frozen=True)

    pause_s: float
    wall_s: float

    @model_validator(mode="after")
    def _check(self) -> CheckpointCost:
        p, w = self.pause_s, self.wall_s
        if not (math.isfinite(p) and math.isfinite(w) and p > 0 and w >= p):
            raise errors.InvalidInput(
                f"checkpoint cost pause {p!r} s, wall {w!r} s is not a cost", hint=_HINT_COST
            )
        return self

    @classmethod
    def from_checkpoints(cls, checkpoints: Sequence[CheckpointInfo]) -> CheckpointCost | None:
        """The median cost of the checkpoints whose timings say what they cost (the pause:
        CRIU's ``frozen_s``, else its dump time; the wall: ``total_s``), None if none do."""
        pauses, walls = [], []
        for ckpt in checkpoints:
            t = DumpTimings.of(ckpt)
            pause = t.frozen_s or t.criu_dump_s
            if pause and pause > 0:
                pauses.append(pause)
                walls.append(max(t.total_s or pause, pause))
        if not pauses:
            return None
        return cls(pause_s=statistics.median(pauses), wall_s=statistics.median(walls))


class IntervalBounds(BaseModel):
    """The interval's allowed range in seconds."""

    model_config = ConfigDict(frozen=True)

    min_s: float = MIN_INTERVAL_S
    max_s: float = MAX_INTERVAL_S

    @model_validator(mode="after")
    def _check(self) -> IntervalBounds:
        lo, hi = self.min_s, self.max_s
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
            raise errors.InvalidInput(
                f"interval bounds {lo!r}..{hi!r} s are not a range",
                hint="Give 0 < min_s <= max_s, in seconds.",
            )
        return self

    def clamp(self, interval_s: float) -> float:
        return min(max(interval_s, self.min_s), self.max_s)


class IntervalAdvice(BaseModel):
    """The interval to use now and what it is expected to cost."""

    interval_s: float = Field(description="the periodic checkpoint interval to use now")
    expected_loss_s_per_h: float = Field(description="work expected lost to interruptions")
    overhead_s_per_h: float = Field(description="time the workload is paused by checkpoints")
    method: str = Field(description="young-daly (constant hazard) or adaptive (age-dependent)")
    why: str


def young_period(pause_s: float, mtbf_s: float) -> float:
    """Young's optimal period between checkpoints: ``sqrt(2 C M)``."""
    return math.sqrt(2 * pause_s * mtbf_s)


def daly_period(pause_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum (2006) as a period (his compute time plus the checkpoint):
    ``sqrt(2CM) [1 + sqrt(C / 2M) / 3 + C / 18M]`` for ``C < 2M``, else ``M + C``."""
    c, m = pause_s, mtbf_s
    if c >= 2 * m:
        return m + c
    return math.sqrt(2 * c * m) * (1 + math.sqrt(c / (2 * m)) / 3 + c / (18 * m))


def _costs(cost: CheckpointCost, period_s: float, rate_per_h: float) -> tuple[float, float]:
    """(expected loss, overhead) in seconds per hour at this period and rate."""
    loss = rate_per_h * (period_s / 2 + cost.wall_s)
    return loss, 3600.0 * cost.pause_s / period_s


def _period_for(cost: CheckpointCost, rate_per_h: float) -> float:
    return math.inf if rate_per_h <= 0 else daly_period(cost.pause_s, 3600.0 / rate_per_h)


def _check_age(age_h: float) -> None:
    if not (math.isfinite(age_h) and age_h >= 0):
        raise errors.InvalidInput(
            f"run age {age_h!r} h must be a finite number of hours >= 0",
            hint="Give the hours since the workload last started or was restored.",
        )


def adaptive_interval_s(
    cost: CheckpointCost,
    hazard: Hazard,
    age_h: float = 0.0,
    bounds: IntervalBounds | None = None,
    *,
    iterations: int = 6,
) -> tuple[float, float]:
    """(interval in seconds, the mean rate per hour it was chosen for) at ``age_h``: Daly's
    period for the mean rate over the next period, found by fixed-point iteration."""
    bounds = bounds or IntervalBounds()
    rate = hazard.rate_at(age_h)
    interval = bounds.clamp(_period_for(cost, rate) - cost.wall_s)
    if hazard.is_constant:
        return interval, rate
    for _ in range(iterations):
        rate = hazard.mean_rate(age_h, age_h + (interval + cost.wall_s) / 3600.0)
        new = bounds.clamp(_period_for(cost, rate) - cost.wall_s)
        if abs(new - interval) <= 1e-3 * interval:
            return new, rate
        interval = new
    return interval, rate


def recommend(
    cost: CheckpointCost,
    hazard: Hazard,
    *,
    age_h: float = 0.0,
    bounds: IntervalBounds | None = None,
) -> IntervalAdvice:
    """The interval to use now, ``age_h`` hours into the current run (see module doc)."""
    _check_age(age_h)
    bounds = bounds or IntervalBounds()
    interval, rate = adaptive_interval_s(cost, hazard, age_h, bounds)
    loss, overhead = _costs(cost, interval + cost.wall_s, rate)
    method = "young-daly" if hazard.is_constant else "adaptive"
    if rate <= 0:
        why = "No interruptions expected: checkpoint as rarely as the bounds allow."
    else:
        mtbf = _human(3600.0 / rate)
        why = (
            f"{cost.pause_s:.2g} s pause against one interruption per {mtbf}"
            + ("" if hazard.is_constant else f" at run age {_human(age_h * 3600)}")
            + (" (bound applied)." if interval in (bounds.min_s, bounds.max_s) else ".")
        )
    return IntervalAdvice(
        interval_s=round(interval, 1),
        expected_loss_s_per_h=round(loss, 2),
        overhead_s_per_h=round(overhead, 2),
        method=method,
        why=why,
    )


def _human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
