"""The capacity rules every backend's ``scale_pool`` follows (``core.backends.capacity``),
and the local backend's pools as its configuration makes them.

- A shrink releases the nodes that lose least: idle first, then least unsaved work, then
  the dearest. A size outside the pool's bounds, or equal to its size, is refused.
- Risk: no move and an added cost within the person's cap is safe; anything else is a
  person's call.
- ``[local.pools.NAME]`` must name a pool some node is labelled with, and its ``min_size``
  must fit; a released node leaves the node list (and placement) until provisioned.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core import errors
from core.backends import capacity
from core.config import load_settings
from core.model import Action, NodeInfo, PoolInfo, Principal, PrincipalKind, RiskClass
from core.service.facade import bootstrap

PERSON = Principal(id="tester", kind=PrincipalKind.PERSON)
NODES = """
[local]
nodes = [
  { name = "a", price_per_hour = 3.0, labels = { pool = "od" } },
  { name = "b", price_per_hour = 1.0, spot = true, labels = { pool = "spot" } },
  { name = "c", price_per_hour = 2.0, spot = true, labels = { pool = "spot" } },
  { name = "d", price_per_hour = 1.5, spot = true, labels = { pool = "spot" } },
]
"""


def _node(name: str, price: float, *workloads: str) -> NodeInfo:
    return NodeInfo(id=f"x:{name}", backend="x", name=name, price_per_hour=price,
                    workloads=list(workloads))  # fmt: skip


def _pool(size: int, lo: int = 0, hi: int = 4) -> PoolInfo:
    return PoolInfo(id="x:p", backend="x", name="p", min_size=lo, max_size=hi, size=size)


def test_victims_idle_first_then_least_unsaved_then_dearest() -> None:
    nodes = [
        _node("busy-old", 1.0, "x:w1"),  # 600 s unsaved
        _node("busy-fresh", 1.0, "x:w2"),  # 5 s unsaved
        _node("idle-cheap", 1.0),
        _node("idle-dear", 4.0),
        _node("two", 1.0, "x:w3", "x:w4"),
    ]
    unsaved = {"x:w1": 600.0, "x:w2": 5.0, "x:w3": 1.0, "x:w4": 1.0}
    order = [n.name for n in capacity.victims(nodes, 5, unsaved=unsaved)]
    assert order == ["idle-dear", "idle-cheap", "busy-fresh", "busy-old", "two"]
    assert [n.name for n in capacity.victims(nodes, 1, unsaved=unsaved)] == ["idle-dear"]


def test_sizes_outside_the_bounds_or_unchanged_are_refused() -> None:
    capacity.check_size(_pool(2, 1, 3), 3)
    for size in (0, 4):
        with pytest.raises(errors.InvalidInput, match="1 to 3 nodes"):
            capacity.check_size(_pool(2, 1, 3), size)
    with pytest.raises(errors.Conflict, match="already has 2"):
        capacity.check_size(_pool(2, 1, 3), 2)


def test_risk_is_safe_only_without_moves() -> None:
    assert capacity.scale_risk(moves=0) is RiskClass.SAFE
    assert capacity.scale_risk(moves=1) is RiskClass.DISRUPTIVE


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("[local.pools.gpu]\n", "no node has the label pool = 'gpu'"),
        ("[local.pools.od]\nmin_size = 2\n", "min_size 2 is more than its 1 node"),
        ("[local.pools.spot]\nmin = 1\n", "min"),
    ],
)
def test_pool_settings_are_checked(tmp_path: Path, extra: str, message: str) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text(NODES + extra)
    with pytest.raises(errors.InvalidInput, match=message):
        bootstrap(load_settings(home))


def test_release_leaves_the_node_list_and_growth_takes_the_cheapest(tmp_path: Path) -> None:
    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text(NODES + "[local.pools.spot]\nmin_size = 1\n")
    service = bootstrap(load_settings(home))
    spot = next(p for p in service.pools() if p.id == "local:spot")
    assert (spot.size, spot.min_size, spot.max_size, spot.price_per_hour) == (3, 1, 3, 1.5)

    plan = service.plan(Action.SCALE_POOL, "local:spot", {"size": 1})
    assert plan.risk is RiskClass.SAFE  # all idle: nothing moves
    assert sorted(s.args["node"] for s in plan.steps if s.op == "release") == ["c", "d"]
    done = service.act(Action.SCALE_POOL, "local:spot", {"size": 1}, principal=PERSON)
    assert done.status == "executed", done.message
    assert {n.name for n in service.nodes("local")} == {"a", "b"}
    with pytest.raises(errors.NotFound):
        service.resolve_node("c")

    plan = service.plan(Action.SCALE_POOL, "local:spot", {"size": 2})
    assert [s.args["node"] for s in plan.steps] == ["d"]  # 1.5/h before 2.0/h
    assert plan.cost_effect.startswith("+1.50/h"), plan.cost_effect
    with pytest.raises(errors.InvalidInput, match="1 to 3 nodes, not 0"):
        service.plan(Action.SCALE_POOL, "local:spot", {"size": 0})
    # A restart keeps what was released.
    again = bootstrap(load_settings(home))
    assert {n.name for n in again.nodes("local")} == {"a", "b"}


def test_a_node_that_gained_work_after_the_plan_is_not_released(tmp_path: Path) -> None:
    """The plan saw ``c`` idle; a workload landed there before it ran. The release step
    refuses, so nothing is orphaned on a node that is gone; the workload keeps running."""
    from tests.service.conftest import counter, wait_step

    home = tmp_path / "h"
    home.mkdir()
    (home / "config.toml").write_text(NODES)
    settings = load_settings(home)
    service = bootstrap(settings)
    plan = service.plan(Action.SCALE_POOL, "local:spot", {"size": 2})
    assert [s.args["node"] for s in plan.steps if s.op == "release"] == ["c"]
    spec = counter(settings, "late", mb=1, engine="cooperative", node="c")
    service.run_workload(spec, detach=True, principal=PERSON)
    try:
        wait_step(settings, "late", 2)
        done = service.perform(plan, principal=PERSON, confirmed=True)
        assert done.status == "failed", done.message
        assert "still runs local:late" in done.message, done.message
        c = next(n for n in service.nodes("local") if n.name == "c")
        assert c.schedulable, "the node the failed shrink cordoned is back in service"
        assert service.get_workload("local:late").state.value == "running"
    finally:
        service.act(Action.KILL, "local:late", {}, principal=PERSON, confirmed=True)
