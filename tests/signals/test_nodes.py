"""Taint -> interruption notice mapping and NodeInfo -> NodeHealthSignal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.backends.slurm.inventory import to_node
from core.model import NodeCondition, NodeConditionType, NodeHealth, NodeInfo
from core.signals.model import InterruptionAction, Provider, Severity
from core.signals.nodes import Taint, kubernetes_conditions, node_health, notices_from_taints


def test_karpenter_disruption_taint() -> None:
    [notice] = notices_from_taints(
        "kubernetes:ip-10-0-1-5", ["karpenter.sh/disruption=disrupting:NoSchedule"]
    )
    assert notice.provider is Provider.KUBERNETES
    assert notice.action is InterruptionAction.TERMINATE
    assert notice.severity is Severity.CRITICAL
    assert notice.details["origin"] == "karpenter"
    assert notice.node == "kubernetes:ip-10-0-1-5" and notice.deadline is None


def test_nth_taints_from_api_dicts_and_objects() -> None:
    taints = [
        {"key": "aws-node-termination-handler/spot-itn", "value": "abc123", "effect": "NoSchedule"},
        SimpleNamespace(
            key="aws-node-termination-handler/rebalance-recommendation",
            value="x",
            effect="NoSchedule",
        ),
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},  # unrelated
    ]
    actions = [n.action for n in notices_from_taints("kubernetes:n1", taints)]
    assert actions == [
        InterruptionAction.TERMINATE,
        InterruptionAction.REBALANCE,
        InterruptionAction.DRAIN,
    ]


def test_karpenter_taint_needs_its_value() -> None:
    assert notices_from_taints("n", ["karpenter.sh/disruption=other:NoSchedule"]) == []


def test_taint_parse() -> None:
    assert Taint.parse("a/b=c:NoExecute") == Taint(key="a/b", value="c", effect="NoExecute")
    assert Taint.parse("a/b") == Taint(key="a/b", value=None, effect="NoSchedule")


def _node(**kw: object) -> NodeInfo:
    base: dict[str, object] = {"id": "slurm:gpu-1", "backend": "slurm", "name": "gpu-1"}
    base.update(kw)
    return NodeInfo.model_validate(base)


@pytest.mark.parametrize(
    ("state", "health", "schedulable", "flags"),
    [
        ("idle", NodeHealth.HEALTHY, True, []),
        ("IDLE+DRAIN", NodeHealth.DEGRADED, False, ["DRAIN"]),
        ("drng", NodeHealth.DEGRADED, False, ["DRAINING"]),
        ("down*", NodeHealth.DOWN, False, ["NOT_RESPONDING", "DOWN"]),
        ("MIXED+NOT_RESPONDING", NodeHealth.DOWN, False, ["NOT_RESPONDING"]),
        ("idle~", NodeHealth.DOWN, False, ["POWERED_DOWN"]),
        ("alloc", NodeHealth.HEALTHY, True, []),
        ("fail", NodeHealth.DOWN, False, ["FAIL"]),
        ("mix$", NodeHealth.DEGRADED, False, ["MAINTENANCE"]),
        ("unk", NodeHealth.DEGRADED, True, ["UNKNOWN"]),
    ],
)
def test_slurm_states_become_conditions(
    state: str, health: NodeHealth, schedulable: bool, flags: list[str]
) -> None:
    # The Slurm backend turns its state flags into conditions; the judge reads only those.
    node = to_node({"name": "gpu-1", "state": state.split("+"), "reason": "Kill task failed"}, [])
    assert [c.source for c in node.conditions] == flags
    assert (node.health, node.schedulable) == (health, schedulable)
    sig = node_health(node)
    assert (sig.health, sig.schedulable) == (health, schedulable)
    assert sig.flags == flags
    if health is not NodeHealth.HEALTHY:
        assert "reason: Kill task failed" in sig.reasons


def test_the_state_text_is_never_parsed() -> None:
    # Only conditions count: a state string that reads like trouble changes nothing.
    sig = node_health(_node(state="DOWN+DRAIN,Ready=False"))
    assert (sig.health, sig.schedulable, sig.flags) == (NodeHealth.HEALTHY, True, [])
    gpu = NodeCondition(type=NodeConditionType.GPU, ok=False, reason="xid 79", source="xid")
    bad = node_health(_node(state="up", conditions=[gpu]))
    assert (bad.health, bad.schedulable) == (NodeHealth.DEGRADED, True)
    assert bad.reasons == ["condition xid (xid 79)"]


def test_kubernetes_conditions() -> None:
    node = _node(id="kubernetes:n1", backend="kubernetes", name="n1", state="Ready")
    sig = node_health(node, conditions={"Ready": "True", "MemoryPressure": "True"})
    assert sig.health is NodeHealth.DEGRADED and sig.schedulable
    assert sig.reasons == ["condition MemoryPressure=True"]
    assert sig.severity is Severity.WARNING
    down = node_health(node, conditions={"Ready": "Unknown"})
    assert down.health is NodeHealth.DOWN and down.severity is Severity.CRITICAL
    assert not down.schedulable
    # The same conditions carried on the node itself, as a backend reports them.
    carried = node.model_copy(
        update={"conditions": kubernetes_conditions({"Ready": "False", "DiskPressure": "True"})}
    )
    assert node_health(carried).health is NodeHealth.DOWN


def test_backend_verdict_and_cordon_are_kept() -> None:
    sig = node_health(_node(state="idle", health=NodeHealth.DEGRADED, schedulable=False))
    assert sig.health is NodeHealth.DEGRADED and not sig.schedulable
    assert "backend reports degraded" in sig.reasons
    cordoned = node_health(_node(state="idle", schedulable=False))
    assert cordoned.health is NodeHealth.HEALTHY and cordoned.severity is Severity.WARNING
