"""The capacity rule: grow a pool for work that waits, release idle nodes, never flap.

``pool_change`` alone (sizes, bounds, threshold, hysteresis), then through ``plan_actions``:
the proposal's call, risk, score against the other rules, its effect; releasing idle nodes
only with ``release_idle`` and never a node another proposal moves work to; a growth that
covers a backlog leaves the low-priority work running.
"""

from __future__ import annotations

from datetime import timedelta

from core.model import Action, PoolInfo, RiskClass, WorkloadState
from core.planner.capacity_advice import pool_change, queue_for
from core.planner.planner import BASE, PlannerConfig, PlannerInput, plan_actions
from core.signals.model import InterruptionAction, InterruptionNotice, Provider
from core.signals.queue import QueueDepth, coerce
from tests.planner.test_planner import NOW, node, wl


def pool(**kw: object) -> PoolInfo:
    base: dict[str, object] = {
        "id": "slurm:elastic", "backend": "slurm", "name": "elastic", "partition": "elastic",
        "price_per_hour": 2.0, "min_size": 0, "max_size": 4, "size": 1, "nodes": ["n4"],
        "idle": [], "released": ["n5", "n6", "n7"],
    }  # fmt: skip
    return PoolInfo.model_validate({**base, **kw})


def queue(
    pending: int, age: float | None, partition: str | None = "elastic", **kw: object
) -> QueueDepth:
    return coerce({"partition": partition, "pending": pending, "oldest_pending_age_s": age, **kw},
                  backend="slurm")  # fmt: skip


def test_work_waiting_past_the_threshold_grows_one_node_per_job_capped_by_released() -> None:
    two = pool_change(pool(), queue(2, 61.0), now=NOW)
    assert two is not None and two.grow and (two.size, two.nodes) == (3, 2)
    assert (two.per_hour_before, two.per_hour_after) == (2.0, 6.0)
    assert "2 job(s) have waited up to 61 s in partition elastic" in two.reason
    assert "+4.00/h (2 x 2.00)" in two.reason
    many = pool_change(pool(), queue(9, 600.0), now=NOW)
    assert many is not None and many.size == 4  # every released node, no more
    assert pool_change(pool(), queue(2, 59.0), now=NOW) is None  # not waited long enough
    assert pool_change(pool(), queue(2, 5.0), now=NOW, min_wait_s=1.0) is not None
    assert pool_change(pool(released=[]), queue(2, 600.0), now=NOW) is None  # nothing to add


def test_idle_nodes_with_nothing_waiting_are_released_down_to_min_size() -> None:
    busy_and_idle = pool(size=3, nodes=["n4", "n5", "n6"], idle=["n5", "n6"], released=["n7"])
    down = pool_change(busy_and_idle, queue(0, None), now=NOW)
    assert down is not None and not down.grow and down.size == 1
    assert "releases idle nodes only" in down.reason and "-4.00/h (2 x 2.00)" in down.reason
    floor = pool_change(busy_and_idle.model_copy(update={"min_size": 2}), queue(0, None), now=NOW)
    assert floor is not None and floor.size == 2
    at_min = busy_and_idle.model_copy(update={"min_size": 3})
    assert pool_change(at_min, queue(0, None), now=NOW) is None
    # Work waiting (even not long): never shrink; no idle node: nothing to release.
    assert pool_change(busy_and_idle, queue(1, 1.0), now=NOW) is None
    assert pool_change(pool(size=3, idle=[]), queue(0, None), now=NOW) is None


def test_a_pool_scaled_recently_is_not_shrunk_until_it_settles() -> None:
    grown = pool(size=2, nodes=["n4", "n5"], idle=["n5"], released=["n6", "n7"])
    just = NOW - timedelta(seconds=120)
    assert pool_change(grown, queue(0, None), now=NOW, scaled_at=just) is None
    later = pool_change(grown, queue(0, None), now=NOW + timedelta(seconds=600), scaled_at=just)
    assert later is not None and later.size == 1
    # A growth is never held back by a recent change: work is waiting.
    assert pool_change(grown, queue(3, 90.0), now=NOW, scaled_at=just) is not None


def test_a_pool_serves_its_own_partition_or_the_whole_backend_queue() -> None:
    queues = [queue(5, 900.0, partition="batch"), queue(0, None, partition="elastic"),
              queue(1, 70.0, partition=None)]  # fmt: skip
    found = queue_for(pool(), queues)
    assert found is not None and found.partition == "elastic"
    whole = queue_for(pool(partition=None), queues)
    assert whole is not None and whole.partition is None
    assert queue_for(pool(backend="local"), queues) is None


def test_plan_actions_proposes_scale_pool_with_its_call_risk_effect_and_rank() -> None:
    data = PlannerInput(nodes=[node("a")], workloads=[], pools=[pool()], queues=[queue(2, 120.0)])
    (grow,) = plan_actions(data, now=NOW)
    assert (grow.action, grow.trigger, grow.tool) == (
        Action.SCALE_POOL,
        "capacity-grow",
        "scale_pool",
    )
    assert grow.arguments == {"pool": "slurm:elastic", "size": 3}
    assert grow.risk is RiskClass.SAFE and grow.effect.queue_wait_s == 120.0
    assert (grow.effect.cost_per_hour_before, grow.effect.cost_per_hour_after) == (2.0, 6.0)
    # Below the urgent rules and SLA risk, above preempting work for the queue.
    assert BASE["queue-backlog"] < grow.score < BASE["sla-risk"]
    # Above the person's cost cap: proposed as disruptive, as the service will judge it.
    capped = data.model_copy(update={"pool_cost_cap": 3.0})
    assert plan_actions(capped, now=NOW)[0].risk is RiskClass.DISRUPTIVE

    idle = pool(size=2, nodes=["n4", "n5"], idle=["n5"], released=["n6", "n7"])
    data = PlannerInput(nodes=[node("a")], workloads=[], pools=[idle], queues=[queue(0, None)])
    assert plan_actions(data, now=NOW) == []  # releasing idle nodes is the person's choice
    data = data.model_copy(update={"release_idle": True})
    (shrink,) = plan_actions(data, now=NOW)
    assert (shrink.trigger, shrink.arguments, shrink.risk) == (
        "capacity-shrink", {"pool": "slurm:elastic", "size": 1}, RiskClass.SAFE)  # fmt: skip
    assert BASE["checkpoint-interval"] < shrink.score < BASE["cost"]
    settled = data.model_copy(update={"pools_scaled_at": {"slurm:elastic": NOW}})
    assert plan_actions(settled, now=NOW) == []
    quick = PlannerConfig(pool_settle_s=0)
    assert len(plan_actions(settled, now=NOW, config=quick)) == 1


def test_a_growth_that_covers_the_backlog_leaves_low_priority_work_running() -> None:
    low = wl("low", "b", labels={"clawpoint.io/priority": "1"}).model_copy(
        update={"backend": "slurm", "id": "slurm:low", "partition": "elastic"}
    )
    backlog = queue(2, 1800.0, max_pending_priority=10, running=1)
    nodes = [node("b").model_copy(update={"id": "slurm:b", "backend": "slurm"})]
    without = plan_actions(PlannerInput(nodes=nodes, workloads=[low], queues=[backlog]), now=NOW)
    assert [(p.action, p.target) for p in without] == [(Action.PREEMPT, "slurm:low")]
    covered = plan_actions(PlannerInput(nodes=nodes, workloads=[low], queues=[backlog],
                                        pools=[pool()]), now=NOW)  # fmt: skip
    assert [(p.action, p.target) for p in covered] == [(Action.SCALE_POOL, "slurm:elastic")]
    # One released node for two jobs: the other job still frees low-priority work.
    short = plan_actions(PlannerInput(nodes=nodes, workloads=[low], queues=[backlog],
                                      pools=[pool(released=["n5"])]), now=NOW)  # fmt: skip
    assert {p.action for p in short} == {Action.SCALE_POOL, Action.PREEMPT}


def test_an_idle_node_work_moves_to_this_pass_is_not_released() -> None:
    spot = node("spot", 0.9, spot=True)
    od = node("od", 3.0)
    pools = [PoolInfo(id="local:on-demand", backend="local", name="on-demand", price_per_hour=3.0,
                      max_size=1, size=1, nodes=["od"], idle=["od"])]  # fmt: skip
    quiet = PlannerInput(nodes=[spot, od], workloads=[wl("s1", "spot")], pools=pools,
                         release_idle=True)  # fmt: skip
    assert [p.trigger for p in plan_actions(quiet, now=NOW)] == ["capacity-shrink"]
    notice = InterruptionNotice(source="aws-imds", provider=Provider.AWS,
                                action=InterruptionAction.TERMINATE,
                                deadline=NOW + timedelta(seconds=120), node="local:spot")  # fmt: skip
    moving = quiet.model_copy(update={"notices": [notice]})
    assert [(p.action, p.to_node) for p in plan_actions(moving, now=NOW)] == [
        (Action.MIGRATE, "local:od")
    ]


def test_a_pending_job_with_a_near_deadline_grows_the_pool_without_waiting() -> None:
    """An SLA's slack says so: a job due within 6 h does not wait for the 60 s threshold;
    one due later (or none) does; the proposal names the deadline and ranks by it."""
    soon = NOW + timedelta(hours=1, minutes=30)
    grown = pool_change(pool(), queue(1, 5.0), now=NOW, due=soon)
    assert grown is not None and grown.grow and grown.size == 2 and grown.due == soon
    assert "one due by 2026-05-01 13:30 UTC (in 1.5 h)" in grown.reason
    assert pool_change(pool(), queue(1, 5.0), now=NOW, due=NOW + timedelta(hours=7)) is None
    assert pool_change(pool(), queue(1, 5.0), now=NOW) is None
    # Through plan_actions: the pending workload's deadline label, in the pool's partition.
    due = wl("due", "n4", state=WorkloadState.PENDING,
             labels={"clawpoint.io/deadline": soon.isoformat()}).model_copy(
        update={"backend": "slurm", "id": "slurm:due", "partition": "elastic", "node": None}
    )  # fmt: skip
    other = due.model_copy(update={"id": "slurm:other", "partition": "batch"})
    data = PlannerInput(nodes=[], workloads=[due], pools=[pool()], queues=[queue(1, 5.0)])
    [p] = plan_actions(data, now=NOW)
    assert (p.action, p.trigger, p.params) == (Action.SCALE_POOL, "capacity-grow", {"size": 2})
    assert p.score > BASE["capacity-grow"] + 30  # due in 1.5 h: 99 / 2.5 points, capped at 49
    elsewhere = data.model_copy(update={"workloads": [other]})
    assert plan_actions(elsewhere, now=NOW) == []  # another partition's deadline
