"""The planner's interval rule over plain models: propose ``set_checkpoint_interval`` only when
the interval in force costs 20 % and 5 s per hour more (lost work + pause) than the one that
pays; shorter (or on) is safe, longer disruptive; nothing without a measured cost."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from core.model import Action, RiskClass, WorkloadState
from core.planner.checkpoint_interval import (
    CheckpointCost,
    IntervalBounds,
    expected_costs,
    recommend,
)
from core.planner.interruption_hazard import Hazard
from core.planner.interval_advice import IntervalCase, cost_per_h, interval_change, spelled
from core.planner.planner import PlannerConfig, PlannerInput, Proposal, plan_actions
from core.signals.model import InterruptionAction, InterruptionNotice, Provider
from tests.planner.test_planner import NOW, node, wl


def case(pause_s: float, wall_s: float, mtbf_h: float) -> IntervalCase:
    """What the service passes: the advice for this cost and hazard, default bounds."""
    cost, hazard = CheckpointCost(pause_s=pause_s, wall_s=wall_s), Hazard.from_mtbf(mtbf_h)
    bounds = IntervalBounds()
    advice = recommend(cost, hazard, bounds=bounds)
    return IntervalCase(cost=cost, hazard=hazard, bounds=bounds, advice=advice)


ON_DEMAND = case(0.3, 0.6, 720.0)  # the recommendation: about 21 minutes
SPOT = case(2.0, 4.0, 4.0)  # about 4 minutes


def _plan(every: float | None, advice: IntervalCase | None, *, state: WorkloadState =
          WorkloadState.RUNNING, last_h: float | None = None, **kw: Any) -> list[Proposal]:  # fmt: skip
    w = wl("w", "a", state=state).model_copy(update={"checkpoint_every": every})
    data = PlannerInput(
        nodes=[node("a"), node("b")], workloads=[w],
        intervals={w.id: advice} if advice is not None else {},
        last_checkpoint_at={w.id: NOW - timedelta(hours=last_h)} if last_h is not None else {},
        **kw,
    )  # fmt: skip
    return plan_actions(data, now=NOW)


def test_far_too_often_on_demand_proposes_the_longer_interval_as_disruptive() -> None:
    [p] = _plan(10.0, ON_DEMAND)
    assert (p.action, p.trigger, p.target) == (
        Action.SET_CHECKPOINT_INTERVAL, "checkpoint-interval", "local:w",
    )  # fmt: skip
    assert (p.tool, p.arguments) == ("set_checkpoint_interval",
                                     {"workload": "local:w", "every": "21m"})  # fmt: skip
    assert p.risk is RiskClass.DISRUPTIVE  # longer than in force: more work at risk
    # The effect, in numbers and in one sentence: the same model at both intervals.
    loss, pause = expected_costs(ON_DEMAND.cost, ON_DEMAND.hazard, 10.0)
    assert p.effect.checkpoint_s_per_h_before == pytest.approx(loss + pause, abs=0.01)
    assert p.effect.checkpoint_s_per_h_after == pytest.approx(
        sum(expected_costs(ON_DEMAND.cost, ON_DEMAND.hazard, 1260.0)), abs=0.01
    )
    before, after = p.effect.checkpoint_s_per_h_before, p.effect.checkpoint_s_per_h_after
    assert before is not None and after is not None and before > 5 * after
    assert "every 21m (every 10s now)" in p.reason and " -> " in p.reason, p.reason
    assert 50 <= p.score < 100  # below every rule that removes a risk or saves money


def test_far_too_rarely_on_spot_proposes_the_shorter_interval_as_safe() -> None:
    [p] = _plan(86400.0, SPOT)
    assert p.risk is RiskClass.SAFE and p.params == {"every": "4m"}, p
    assert "(every 1d now)" in p.reason


@pytest.mark.parametrize("every", [1260.0, 1800.0, 900.0])
def test_near_the_recommendation_nothing_is_proposed(every: float) -> None:
    # 1.5x off costs about 8 % more: not worth anyone's attention.
    assert _plan(every, ON_DEMAND) == []


def test_a_large_share_of_a_small_figure_is_not_material() -> None:
    cheap = case(0.01, 0.02, 720.0)  # about 4 minutes would pay
    now = cost_per_h(cheap, 3600.0, at_risk_s=0)
    after = cost_per_h(cheap, spelled(cheap.advice.interval_s, cheap.bounds), at_risk_s=0)
    assert now - after > 0.8 * now and now - after < 5  # 80 % of 2.5 s per hour
    assert _plan(3600.0, cheap) == []
    # The thresholds are the planner's configuration.
    config = PlannerConfig(interval_min_s_per_h=1.0)
    w = wl("w", "a").model_copy(update={"checkpoint_every": 3600.0})
    data = PlannerInput(nodes=[node("a")], workloads=[w], intervals={w.id: cheap})
    assert [p.params for p in plan_actions(data, now=NOW, config=config)] == [{"every": "4m"}]


def test_off_with_a_measured_cost_turns_them_on_once_enough_is_at_risk() -> None:
    # Periodic checkpoints off, one taken by hand an hour ago on a spot node: turning them
    # on is safe and saves most of the expected loss.
    [p] = _plan(None, SPOT, last_h=1.0)
    assert p.risk is RiskClass.SAFE and p.params == {"every": "4m"}
    assert "(off now)" in p.reason
    assert p.effect.checkpoint_s_per_h_before == pytest.approx(0.25 * (3600 + 1800), abs=0.1)
    # On demand, a checkpoint a minute ago leaves little at risk yet; ten hours, enough.
    assert _plan(None, ON_DEMAND, last_h=1 / 60) == []
    assert [p.params for p in _plan(None, ON_DEMAND, last_h=10.0)] == [{"every": "21m"}]


def test_nothing_without_a_measured_cost_or_a_running_workload() -> None:
    # Never checkpointed (or a backend that cannot re-time it): the service passes no case.
    assert _plan(None, None) == []
    assert _plan(10.0, None) == []
    for state in (WorkloadState.STOPPED, WorkloadState.FAILED, WorkloadState.CHECKPOINTING):
        assert _plan(10.0, ON_DEMAND, state=state) == []


def test_a_risk_on_the_node_wins_over_the_interval() -> None:
    notice = InterruptionNotice(source="aws-imds", provider=Provider.AWS,
                                action=InterruptionAction.TERMINATE,
                                deadline=NOW + timedelta(seconds=120), node="local:a")  # fmt: skip
    [p] = _plan(10.0, ON_DEMAND, notices=[notice])
    assert (p.action, p.trigger) == (Action.MIGRATE, "spot-interruption")


def test_spelled_intervals_are_what_a_person_writes_within_the_bounds() -> None:
    bounds = IntervalBounds(min_s=10, max_s=86400)
    assert [spelled(s, bounds) for s in (4.2, 61.4, 1247.3, 7300.0, 200000.0)] == [
        10.0, 61.0, 1260.0, 7200.0, 86400.0,
    ]  # fmt: skip
    assert interval_change(ON_DEMAND, 1260.0, at_risk_s=0) is None  # already in force
