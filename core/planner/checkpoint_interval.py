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
adaptive rule picks, at the run's current age, the interval whose next cycle has the least
expected lost work plus pause per second of that cycle (``cycle_expectations``, exact for a
piecewise-constant hazard): short intervals while the run is young and interruptions
likely, long ones once it has survived. For a constant hazard it is Young/Daly.

Limits: pure (no I/O); the rule looks one cycle ahead (greedy, not a dynamic programme over
the whole run); the restart cost after an interruption is the same whatever the interval and
is left out; the hazard's only covariate is the run's age.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import ConfigDict, Field, model_validator

from core import errors
from core.model import CheckpointInfo
from core.planner.interruption_hazard import Hazard
from core.schema_base import Model
from core.timings import DumpTimings

# The timer's bounds unless the caller sets its own: not more often than every 10 s, at
# least once a day.
MIN_INTERVAL_S = 10.0
MAX_INTERVAL_S = 86_400.0
_HINT_COST = "Give the measured pause and wall time in seconds (pause > 0, wall >= pause)."


class CheckpointCost(Model):
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
        CRIU's ``frozen_s``, else its dump time; the wall: ``total_s``, else the dump and
        the publish, as stored manifests record them), None if none do."""
        pauses, walls = [], []
        for ckpt in checkpoints:
            t = DumpTimings.of(ckpt)
            pause = t.frozen_s or t.criu_dump_s
            if pause and pause > 0:
                wall = t.total_s or (t.criu_dump_s or pause) + (t.publish_s or 0.0)
                pauses.append(pause)
                walls.append(max(wall, pause))
        if not pauses:
            return None
        return cls(pause_s=statistics.median(pauses), wall_s=statistics.median(walls))


class IntervalBounds(Model):
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
                hint="Give a minimum above 0 seconds and a maximum no lower than it.",
            )
        return self

    def clamp(self, interval_s: float) -> float:
        return min(max(interval_s, self.min_s), self.max_s)


class IntervalAdvice(Model):
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


def cycle_expectations(
    cost: CheckpointCost, hazard: Hazard, age_h: float, interval_s: float
) -> tuple[float, float, float]:
    """(lost work, pause, length) expected over one cycle from ``age_h``, in seconds: the
    timer runs ``interval_s``, then a checkpoint pauses the workload and is durable
    ``wall_s`` after it started; an interruption before then loses the cycle's work."""
    a = age_h * 3600.0
    edges, rates = hazard.edges_h, hazard.rates_per_h
    surv, loss, length = 1.0, 0.0, 0.0
    for i, edge in enumerate(edges):
        start = max(edge * 3600.0 - a, 0.0)
        stop = min(edges[i + 1] * 3600.0 - a if i + 1 < len(edges) else math.inf, interval_s)
        if stop <= start:
            continue
        r, d = rates[i] / 3600.0, stop - start
        if r == 0:
            length += surv * d
            continue
        e = math.exp(-r * d)
        length += surv * (1 - e) / r  # the integral of survival over the segment
        loss += surv * (start * (1 - e) + (1 - e) / r - d * e)  # of t times the density
        surv *= e
    in_flight = 1 - math.exp(-hazard.mean_rate(a / 3600 + interval_s / 3600,
                                               (a + interval_s + cost.wall_s) / 3600)
                             * cost.wall_s / 3600)  # fmt: skip
    loss += interval_s * surv * in_flight  # interrupted while the checkpoint was in flight
    length += surv * cost.wall_s
    return loss, cost.pause_s * surv, length


def _cycle_rate(cost: CheckpointCost, hazard: Hazard, age_h: float, interval_s: float) -> float:
    loss, pause, length = cycle_expectations(cost, hazard, age_h, interval_s)
    return (loss + pause) / length


def adaptive_interval_s(
    cost: CheckpointCost,
    hazard: Hazard,
    age_h: float = 0.0,
    bounds: IntervalBounds | None = None,
    *,
    grid: int = 24,
    refine: int = 12,
) -> float:
    """The interval at ``age_h``. A constant hazard: Daly's period less the wall time. Else
    the interval whose next cycle costs least per second (lost work plus pause over its
    expected length): a log-spaced grid between the bounds, then a golden-section search
    around the best point."""
    bounds = bounds or IntervalBounds()
    if hazard.is_constant:
        return bounds.clamp(_period_for(cost, hazard.rates_per_h[0]) - cost.wall_s)
    lo, hi = math.log(bounds.min_s), math.log(bounds.max_s)
    if hi - lo < 1e-9:
        return bounds.min_s
    xs = [lo + (hi - lo) * k / (grid - 1) for k in range(grid)]
    costs = [_cycle_rate(cost, hazard, age_h, math.exp(x)) for x in xs]
    k = min(range(grid), key=costs.__getitem__)
    left, right = xs[max(k - 1, 0)], xs[min(k + 1, grid - 1)]
    phi = (math.sqrt(5) - 1) / 2
    for _ in range(refine):
        m1, m2 = right - phi * (right - left), left + phi * (right - left)
        if _cycle_rate(cost, hazard, age_h, math.exp(m1)) <= _cycle_rate(
            cost, hazard, age_h, math.exp(m2)
        ):
            right = m2
        else:
            left = m1
    best = math.exp((left + right) / 2)
    return bounds.clamp(
        best if _cycle_rate(cost, hazard, age_h, best) <= costs[k] else math.exp(xs[k])
    )


def schedule(
    cost: CheckpointCost,
    hazard: Hazard,
    bounds: IntervalBounds | None = None,
    *,
    ages_h: Sequence[float] | None = None,
) -> list[tuple[float, float]]:
    """(age in hours, interval in seconds) at a log-spaced set of ages: what a timer that
    re-reads its interval after each checkpoint follows until the hazard estimate changes."""
    if ages_h is None:
        top = max(hazard.edges_h[-1] * 2, 1.0)
        ages_h = [0.0] + [x for x in (60 * 1.25**k / 3600 for k in range(80)) if x < top]
    return [(age, adaptive_interval_s(cost, hazard, age, bounds)) for age in ages_h]


def expected_costs(
    cost: CheckpointCost, hazard: Hazard, interval_s: float, *, age_h: float = 0.0
) -> tuple[float, float]:
    """(expected lost work, checkpoint pause) in seconds per hour with the timer at
    ``interval_s``, ``age_h`` hours into the run: what ``recommend`` reports for its own
    interval, and what any other interval (the one in force) is compared with."""
    _check_age(age_h)
    if hazard.is_constant:
        return _costs(cost, interval_s + cost.wall_s, hazard.rates_per_h[0])
    lost, paused, length = cycle_expectations(cost, hazard, age_h, interval_s)
    return 3600 * lost / length, 3600 * paused / length


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
    interval = adaptive_interval_s(cost, hazard, age_h, bounds)
    loss, overhead = expected_costs(cost, hazard, interval, age_h=age_h)
    if hazard.is_constant:
        rate = hazard.rates_per_h[0]
        method = "young-daly"
    else:
        rate = hazard.mean_rate(age_h, age_h + (interval + cost.wall_s) / 3600)
        method = "adaptive"
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
