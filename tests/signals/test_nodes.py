"""Taint -> interruption notice mapping and NodeInfo -> NodeHealthSignal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.model import NodeHealth, NodeInfo
from core.signals.model import InterruptionAction, Provider, Severity
from core.signals.nodes import Taint, node_health, notices_from_taints


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
    ("state", "health", "schedulable", "flag"),
    [
        ("idle", NodeHealth.HEALTHY, True, "IDLE"),
        ("IDLE+DRAIN", NodeHealth.DEGRADED, False, "DRAIN"),
        ("drng", NodeHealth.DEGRADED, False, "DRAINING"),
        ("down*", NodeHealth.DOWN, False, "NOT_RESPONDING"),
        ("MIXED+NOT_RESPONDING", NodeHealth.DOWN, False, "NOT_RESPONDING"),
        ("idle~", NodeHealth.HEALTHY, True, "POWERED_DOWN"),
        ("alloc", NodeHealth.HEALTHY, True, "ALLOCATED"),
        ("fail", NodeHealth.DOWN, False, "FAIL"),
    ],
)
def test_slurm_states(state: str, health: NodeHealth, schedulable: bool, flag: str) -> None:
    sig = node_health(_node(state=state, reason="Kill task failed"))
    assert (sig.health, sig.schedulable) == (health, schedulable)
    assert flag in sig.flags
    if health is not NodeHealth.HEALTHY:
        assert "reason: Kill task failed" in sig.reasons


def test_kubernetes_conditions() -> None:
    node = _node(id="kubernetes:n1", backend="kubernetes", name="n1", state="Ready")
    sig = node_health(node, conditions={"Ready": "True", "MemoryPressure": "True"})
    assert sig.health is NodeHealth.DEGRADED and sig.schedulable
    assert sig.reasons == ["condition MemoryPressure=True"]
    assert sig.severity is Severity.WARNING
    down = node_health(node, conditions={"Ready": "Unknown"})
    assert down.health is NodeHealth.DOWN and down.severity is Severity.CRITICAL
    # conditions written into the state string by a backend work too
    inline = node_health(node.model_copy(update={"state": "Ready=False,DiskPressure=True"}))
    assert inline.health is NodeHealth.DOWN


def test_backend_verdict_and_cordon_are_kept() -> None:
    sig = node_health(_node(state="idle", health=NodeHealth.DEGRADED, schedulable=False))
    assert sig.health is NodeHealth.DEGRADED and not sig.schedulable
    assert "backend reports degraded" in sig.reasons
    cordoned = node_health(_node(state="idle", schedulable=False))
    assert cordoned.health is NodeHealth.HEALTHY and cordoned.severity is Severity.WARNING
