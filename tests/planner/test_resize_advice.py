"""The memory-pressure rule: a workload near its memory limit gets more before it is killed.

``memory_change`` alone (threshold, the size proposed, in place vs moved, no room anywhere),
then through ``plan_actions``: the proposal's call, risk, score against the other rules and
only for backends that can resize.
"""

from __future__ import annotations

from core.backends.sizing import Size
from core.model import Action, RiskClass, WorkloadInfo
from core.planner.planner import BASE, PlannerInput, plan_actions
from core.planner.resize_advice import memory_change, next_memory_mb
from tests.planner.test_planner import NOW, node, wl


def limited(name: str, on: str, limit: int, used: int | None) -> WorkloadInfo:
    return wl(name, on).model_copy(update={"memory_mb": limit, "memory_used_mb": used})


def test_the_next_size_is_half_again_its_use_in_256_mib_steps_and_always_more() -> None:
    assert next_memory_mb(1000, 1024) == 1536
    assert next_memory_mb(3900, 4096) == 5888
    assert next_memory_mb(100, 1024) == 1280  # never less than a step above the limit


def test_under_the_threshold_or_unmeasured_nothing_is_proposed() -> None:
    nodes = [node("a", memory_mb=8192)]
    assert memory_change(limited("w", "a", 1024, 900), nodes, {}) is None  # 88 %
    assert memory_change(limited("w", "a", 1024, None), nodes, {}) is None
    assert (
        memory_change(wl("w", "a").model_copy(update={"memory_used_mb": 5000}), nodes, {}) is None
    )


def test_in_place_when_its_node_has_room_else_the_cheapest_node_that_fits() -> None:
    nodes = [node("a", memory_mb=4096, price=1.0), node("b", memory_mb=16384, price=3.0),
             node("c", memory_mb=16384, price=2.0)]  # fmt: skip
    here = memory_change(limited("w", "a", 1024, 950), nodes, {})
    assert here is not None and here.in_place and here.memory == "1536Mi"
    assert "uses 950Mi of its 1Gi limit (93%)" in here.reason and "on a." in here.reason
    # a holds 3 GiB for others: 1.5 GiB no longer fits there
    moved = memory_change(limited("w", "a", 1024, 950), nodes, {"a": Size(memory_mb=3072)})
    assert moved is not None and not moved.in_place and moved.to_node == "c"
    assert (moved.price_before, moved.price_after) == (1.0, 2.0)
    assert memory_change(limited("w", "a", 8192, 8000), nodes[:1], {}) is None  # no room anywhere


def test_plan_actions_proposes_the_resize_for_backends_that_can_do_it() -> None:
    nodes = [node("a", memory_mb=4096, price=1.0), node("c", memory_mb=16384, price=2.0)]
    hot = limited("hot", "a", 3072, 3000)
    cool = limited("cool", "a", 1024, 100)
    data = PlannerInput(nodes=nodes, workloads=[hot, cool], resize_backends=["local"])
    [p] = plan_actions(data, now=NOW)
    assert (p.action, p.target, p.trigger) == (Action.RESIZE, "local:hot", "memory-pressure")
    assert p.tool == "resize_workload"
    assert p.arguments == {"workload": "local:hot", "memory": "4608Mi", "to": "c"}
    assert p.risk is RiskClass.DISRUPTIVE and p.to_node == "local:c"
    assert BASE["sla-risk"] > p.score >= BASE["memory-pressure"]
    assert p.effect.work_at_risk_s == 3600.0  # started an hour ago, never checkpointed
    in_place = plan_actions(PlannerInput(nodes=[node("a", memory_mb=65536)], workloads=[hot],
                                         resize_backends=["local"]), now=NOW)  # fmt: skip
    assert in_place[0].risk is RiskClass.SAFE and "to" not in in_place[0].arguments
    assert plan_actions(PlannerInput(nodes=nodes, workloads=[hot]), now=NOW) == []
