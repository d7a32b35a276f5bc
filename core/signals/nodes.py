"""Pure mappings from what orchestrators say about a node to signals.

- ``notices_from_taints``: Kubernetes taints set by interruption handlers (Karpenter, AWS
  Node Termination Handler, GKE, cluster-autoscaler, a cordon) become ``InterruptionNotice``s.
- ``node_health``: a backend's ``NodeInfo`` becomes a ``NodeHealthSignal``, judged from its
  structured conditions (``NodeCondition``: ready, schedulable, draining, gpu, ...), which
  each backend builds from its own terms (Slurm state flags, Kubernetes conditions through
  ``kubernetes_conditions``); the free-text ``state`` is never parsed.

Known interruption taints (key, what sets it, what it means):

====================================================  ================  ===================
``karpenter.sh/disruption`` (``=disrupting``)          Karpenter         node will be deleted
``aws-node-termination-handler/spot-itn``             AWS NTH           spot interruption (2 min)
``aws-node-termination-handler/rebalance-recommendation``  AWS NTH      elevated spot risk
``aws-node-termination-handler/asg-lifecycle-termination`` AWS NTH      ASG scale-in
``aws-node-termination-handler/scheduled-maintenance``  AWS NTH          EC2 scheduled event
``cloud.google.com/impending-node-termination``       GKE               spot/preemptible VM ends
``ToBeDeletedByClusterAutoscaler``                    cluster-autoscaler  scale-down
``node.kubernetes.io/unschedulable``                  kubectl cordon    draining / cordoned
====================================================  ================  ===================

Taints carry no deadline, so notices from them have ``deadline=None``. No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from pydantic import ConfigDict

from core.model import NodeCondition, NodeConditionType, NodeHealth, NodeInfo
from core.schema_base import Model
from core.signals.model import (
    InterruptionAction,
    InterruptionNotice,
    NodeHealthSignal,
    Provider,
    Severity,
    utcnow,
)


class Taint(Model):
    model_config = ConfigDict(frozen=True)

    key: str
    value: str | None = None
    effect: str = "NoSchedule"

    @classmethod
    def parse(cls, text: str) -> Taint:
        """``key[=value][:Effect]``, the form ``kubectl taint`` uses."""
        body, _, effect = text.partition(":")
        key, _, value = body.partition("=")
        return cls(key=key, value=value or None, effect=effect or "NoSchedule")

    @classmethod
    def of(cls, raw: Taint | Mapping[str, Any] | str | Any) -> Taint:
        """From a string, a dict (API JSON) or an object with key/value/effect (V1Taint)."""
        if isinstance(raw, Taint):
            return raw
        if isinstance(raw, str):
            return cls.parse(raw)
        if isinstance(raw, Mapping):
            return cls(key=raw["key"], value=raw.get("value"), effect=raw.get("effect") or "")
        return cls(key=raw.key, value=getattr(raw, "value", None), effect=raw.effect or "")


class _TaintRule(NamedTuple):
    origin: str
    action: InterruptionAction
    severity: Severity
    value: str | None  # None = any value
    meaning: str


INTERRUPTION_TAINTS: dict[str, _TaintRule] = {
    "karpenter.sh/disruption": _TaintRule(
        "karpenter",
        InterruptionAction.TERMINATE,
        Severity.CRITICAL,
        "disrupting",
        "Karpenter is draining this node to delete it",
    ),
    "aws-node-termination-handler/spot-itn": _TaintRule(
        "aws-node-termination-handler",
        InterruptionAction.TERMINATE,
        Severity.CRITICAL,
        None,
        "AWS spot interruption notice: the instance ends in about two minutes",
    ),
    "aws-node-termination-handler/rebalance-recommendation": _TaintRule(
        "aws-node-termination-handler",
        InterruptionAction.REBALANCE,
        Severity.WARNING,
        None,
        "AWS rebalance recommendation: elevated interruption risk",
    ),
    "aws-node-termination-handler/asg-lifecycle-termination": _TaintRule(
        "aws-node-termination-handler",
        InterruptionAction.TERMINATE,
        Severity.CRITICAL,
        None,
        "the auto scaling group is terminating this instance",
    ),
    "aws-node-termination-handler/scheduled-maintenance": _TaintRule(
        "aws-node-termination-handler",
        InterruptionAction.DRAIN,
        Severity.WARNING,
        None,
        "an EC2 scheduled maintenance event is pending for this instance",
    ),
    "cloud.google.com/impending-node-termination": _TaintRule(
        "gke",
        InterruptionAction.PREEMPT,
        Severity.CRITICAL,
        None,
        "GKE: this spot/preemptible VM is being terminated",
    ),
    "ToBeDeletedByClusterAutoscaler": _TaintRule(
        "cluster-autoscaler",
        InterruptionAction.TERMINATE,
        Severity.CRITICAL,
        None,
        "the cluster autoscaler is scaling this node down",
    ),
    "node.kubernetes.io/unschedulable": _TaintRule(
        "kubernetes",
        InterruptionAction.DRAIN,
        Severity.WARNING,
        None,
        "the node is cordoned (unschedulable), usually ahead of a drain",
    ),
}


def notices_from_taints(
    node: str,
    taints: Iterable[Taint | Mapping[str, Any] | str | Any],
    *,
    observed_at: datetime | None = None,
) -> list[InterruptionNotice]:
    """The interruption notices a node's taints announce (unknown taints are ignored)."""
    now = observed_at or utcnow()
    out: list[InterruptionNotice] = []
    for raw in taints:
        taint = Taint.of(raw)
        rule = INTERRUPTION_TAINTS.get(taint.key)
        if rule is None or (rule.value is not None and taint.value != rule.value):
            continue
        out.append(
            InterruptionNotice(
                source=f"kubernetes-taint:{taint.key}",
                observed_at=now,
                subject=node,
                severity=rule.severity,
                message=rule.meaning,
                provider=Provider.KUBERNETES,
                action=rule.action,
                deadline=None,
                node=node,
                details={
                    "taint": taint.key,
                    "value": taint.value or "",
                    "effect": taint.effect,
                    "origin": rule.origin,
                },
            )
        )
    return out


# --- node health ------------------------------------------------------------------------

# What a condition that is not ok means: the node's health, and whether new work stays off.
_EFFECT: dict[NodeConditionType, tuple[NodeHealth, bool]] = {
    NodeConditionType.READY: (NodeHealth.DOWN, False),
    NodeConditionType.NETWORK: (NodeHealth.DOWN, False),
    NodeConditionType.SCHEDULABLE: (NodeHealth.HEALTHY, False),
    NodeConditionType.DRAINING: (NodeHealth.DEGRADED, False),
    NodeConditionType.MAINTENANCE: (NodeHealth.DEGRADED, False),
    NodeConditionType.GPU: (NodeHealth.DEGRADED, True),
    NodeConditionType.MEMORY: (NodeHealth.DEGRADED, True),
    NodeConditionType.DISK: (NodeHealth.DEGRADED, True),
    NodeConditionType.PROCESSES: (NodeHealth.DEGRADED, True),
    NodeConditionType.OTHER: (NodeHealth.DEGRADED, True),
}

# Kubernetes node conditions: type -> (what it is about, the status that is fine).
_KUBERNETES = {
    "Ready": (NodeConditionType.READY, "True"),
    "NetworkUnavailable": (NodeConditionType.NETWORK, "False"),
    "MemoryPressure": (NodeConditionType.MEMORY, "False"),
    "DiskPressure": (NodeConditionType.DISK, "False"),
    "PIDPressure": (NodeConditionType.PROCESSES, "False"),
}
_RANK = {NodeHealth.HEALTHY: 0, NodeHealth.DEGRADED: 1, NodeHealth.DOWN: 2}


def kubernetes_conditions(conditions: Mapping[str, str]) -> list[NodeCondition]:
    """Kubernetes ``status.conditions`` (type -> ``True``/``False``/``Unknown``) as
    ``NodeCondition``s; types clawpoint does not know are left out."""
    out: list[NodeCondition] = []
    for name, status in conditions.items():
        known = _KUBERNETES.get(name)
        if known is not None:
            kind, fine = known
            out.append(NodeCondition(type=kind, ok=status == fine, source=f"{name}={status}"))
    return out


def judge(conditions: Iterable[NodeCondition]) -> tuple[NodeHealth, bool, list[str]]:
    """The health, whether new work may go there, and the reasons, from conditions alone."""
    health, schedulable, reasons = NodeHealth.HEALTHY, True, []
    for cond in conditions:
        if cond.ok:
            continue
        implied, takes_work = _EFFECT[cond.type]
        health = max(health, implied, key=_RANK.__getitem__)
        schedulable = schedulable and takes_work
        what = cond.source or f"{cond.type.value} not ok"
        reasons.append(f"condition {what}" + (f" ({cond.reason})" if cond.reason else ""))
    return health, schedulable, reasons


def node_health(
    node: NodeInfo,
    *,
    conditions: Mapping[str, str] | None = None,
    observed_at: datetime | None = None,
) -> NodeHealthSignal:
    """Judge a node from its conditions (``NodeInfo.conditions``, plus Kubernetes
    ``conditions`` given here) and the backend's own verdict: the worst of them, with
    ``reasons`` saying which condition decided. ``NodeInfo.state`` is never parsed."""
    conds = [*node.conditions, *kubernetes_conditions(conditions or {})]
    health, schedulable, from_conditions = judge(conds)
    reasons: list[str] = []
    if node.health is not NodeHealth.HEALTHY:
        reasons.append(f"backend reports {node.health.value}")
        health = max(health, node.health, key=_RANK.__getitem__)
    reasons += from_conditions
    if not node.schedulable:
        schedulable = False
        reasons.append("not schedulable (cordoned or drained)")
    if node.reason and reasons:
        reasons.append(f"reason: {node.reason}")
    severity = {
        NodeHealth.HEALTHY: Severity.INFO,
        NodeHealth.DEGRADED: Severity.WARNING,
        NodeHealth.DOWN: Severity.CRITICAL,
    }[health]
    if health is NodeHealth.HEALTHY and not schedulable:
        severity = Severity.WARNING
    return NodeHealthSignal(
        source=f"backend:{node.backend}",
        observed_at=observed_at or utcnow(),
        subject=node.id,
        severity=severity,
        message=f"node {node.id} is {health.value}" + ("" if schedulable else ", unschedulable"),
        node=node.id,
        backend=node.backend,
        health=health,
        schedulable=schedulable,
        flags=[c.source or c.type.value for c in conds if not c.ok],
        reasons=reasons,
    )
