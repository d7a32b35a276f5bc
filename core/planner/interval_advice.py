"""When changing a workload's periodic checkpoint interval pays: the planner's interval rule.

Role: given what the recommended interval rests on (``IntervalCase``: the measured cost of
the workload's checkpoints, its node's hazard, the bounds and ``recommend``'s advice, as the
service computes them in ``core.service.economics``) and the interval in force,
``interval_change`` says whether to propose ``set_checkpoint_interval`` and what it saves.

The rule: compare the expected lost work plus checkpoint pause per hour at the interval in
force with the same figure at the recommended interval (spelled as a person writes it,
``every``), both from ``checkpoint_interval.expected_costs``. Propose only when the change
saves at least ``min_fraction`` (20 %) of the figure now and at least ``min_s_per_h``
(5 s per hour, about 0.14 % of the workload's time). For a constant hazard the figure is
flat near the optimum: an interval twice or half the best costs 25 % more, so 20 % means
"about a factor of two away"; a small absolute saving (an on-demand node, a cheap
checkpoint) is not worth a person's attention.

With periodic checkpoints off nothing is paused, and the work at risk grows: the figure now
is the rate of interruption times the work an interruption in the coming hour would lose
(``at_risk_s``, the time since the newest checkpoint or the start, plus half an hour). A
workload never checkpointed has no measured cost, hence no ``IntervalCase``: no proposal.

Limits: pure (no I/O); the age of the run is taken as 0, as ``get_workload``'s advice does;
a change is proposed from what was measured so far (the median of the newest checkpoints),
so a workload whose checkpoints grow gets a new proposal once the cost moved that far.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from core.durations import MAX_INTERVAL_S, MIN_INTERVAL_S, interval_text
from core.planner.checkpoint_interval import (
    CheckpointCost,
    IntervalAdvice,
    IntervalBounds,
    expected_costs,
)
from core.planner.interruption_hazard import Hazard
from core.schema_base import Model

MIN_FRACTION = 0.2
MIN_S_PER_H = 5.0


class IntervalCase(Model):
    """What one workload's interval advice rests on (computed by the service)."""

    model_config = ConfigDict(frozen=True)

    cost: CheckpointCost
    hazard: Hazard
    bounds: IntervalBounds
    advice: IntervalAdvice


class IntervalChange(Model):
    """A change of interval that pays: the argument to pass and the figures it rests on."""

    every: str = Field(description="set_checkpoint_interval's every, e.g. 20m")
    every_s: float
    in_force_s: float | None = Field(description="None: periodic checkpoints are off")
    now_s_per_h: float = Field(description="expected lost work + pause per hour, now")
    after_s_per_h: float = Field(description="the same at the new interval")

    @property
    def shorter(self) -> bool:
        """Shorter than the interval in force, or on where it was off: leaves less at risk."""
        return self.in_force_s is None or self.every_s < self.in_force_s

    @property
    def saving_s_per_h(self) -> float:
        return self.now_s_per_h - self.after_s_per_h


def spelled(seconds: float, bounds: IntervalBounds) -> float:
    """``seconds`` rounded as a person writes an interval (whole seconds under 2 minutes,
    minutes under 2 hours, then hours), within the bounds and what the action accepts."""
    if seconds < 120:
        out = float(round(seconds))
    elif seconds < 7200:
        out = 60.0 * round(seconds / 60)
    else:
        out = 3600.0 * round(seconds / 3600)
    out = bounds.clamp(out)
    return min(max(out, MIN_INTERVAL_S), MAX_INTERVAL_S)


def cost_per_h(case: IntervalCase, interval_s: float | None, *, at_risk_s: float) -> float:
    """Expected lost work plus pause per hour with the timer at ``interval_s`` (None: off,
    see the module doc)."""
    if interval_s is None:
        return case.hazard.mean_rate(0.0, 1.0) * (at_risk_s + 1800.0)
    loss, pause = expected_costs(case.cost, case.hazard, interval_s)
    return loss + pause


def interval_change(
    case: IntervalCase,
    in_force_s: float | None,
    *,
    at_risk_s: float,
    min_fraction: float = MIN_FRACTION,
    min_s_per_h: float = MIN_S_PER_H,
) -> IntervalChange | None:
    """The change to propose, or None when the interval in force is close enough."""
    every_s = spelled(case.advice.interval_s, case.bounds)
    if every_s == in_force_s:
        return None
    now = cost_per_h(case, in_force_s, at_risk_s=at_risk_s)
    after = cost_per_h(case, every_s, at_risk_s=at_risk_s)
    saving = now - after
    if saving < min_s_per_h or saving < min_fraction * now:
        return None
    return IntervalChange(
        every=interval_text(every_s), every_s=every_s, in_force_s=in_force_s,
        now_s_per_h=round(now, 2), after_s_per_h=round(after, 2),
    )  # fmt: skip
