"""Pure mappings from what orchestrators say about a node to signals.

- ``notices_from_taints``: Kubernetes taints set by interruption handlers (Karpenter, AWS
  Node Termination Handler, GKE, cluster-autoscaler, a cordon) become ``InterruptionNotice``s.
- ``node_health``: a backend's ``NodeInfo`` (Slurm state flags such as ``IDLE+DRAIN`` or
  ``down*``; Kubernetes conditions such as ``Ready=False``) becomes a ``NodeHealthSignal``.

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

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from core.model import NodeHealth, NodeInfo
from core.signals.model import (
    InterruptionAction,
    InterruptionNotice,
    NodeHealthSignal,
    Provider,
    Severity,
    utcnow,
)


class Taint(BaseModel):
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

# Slurm appends one of these to a state name (sinfo/scontrol); see sinfo(1) "NODE STATE CODES".
_SLURM_SUFFIX = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "!": "POWER_DOWN",
    "$": "MAINT",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}
# sinfo's short state names.
_SLURM_SHORT = {
    "ALLOC": "ALLOCATED",
    "MIX": "MIXED",
    "DRNG": "DRAINING",
    "COMP": "COMPLETING",
    "RESV": "RESERVED",
    "UNK": "UNKNOWN",
    "NO_RESPOND": "NOT_RESPONDING",
    "NPC": "PERFCTRS",
}
_DOWN_FLAGS = {"DOWN", "FAIL", "NOT_RESPONDING", "INVAL"}
_DEGRADED_FLAGS = {
    "DRAIN",
    "DRAINED",
    "DRAINING",
    "FAILING",
    "MAINT",
    "REBOOT_REQUESTED",
    "REBOOT_ISSUED",
    "UNKNOWN",
}
_UNSCHEDULABLE_FLAGS = _DOWN_FLAGS | _DEGRADED_FLAGS - {"UNKNOWN"}

# Kubernetes node conditions: (condition, bad status) -> health it implies.
_CONDITIONS = {
    ("Ready", "False"): NodeHealth.DOWN,
    ("Ready", "Unknown"): NodeHealth.DOWN,
    ("NetworkUnavailable", "True"): NodeHealth.DOWN,
    ("MemoryPressure", "True"): NodeHealth.DEGRADED,
    ("DiskPressure", "True"): NodeHealth.DEGRADED,
    ("PIDPressure", "True"): NodeHealth.DEGRADED,
}
_RANK = {NodeHealth.HEALTHY: 0, NodeHealth.DEGRADED: 1, NodeHealth.DOWN: 2}
_TOKEN = re.compile(r"[+,|\s]+")


def _flags(state: str) -> tuple[list[str], dict[str, str]]:
    flags: list[str] = []
    conditions: dict[str, str] = {}
    for token in filter(None, _TOKEN.split(state)):
        if "=" in token:  # a Kubernetes condition written as Type=Status
            key, _, value = token.partition("=")
            conditions[key] = value
            continue
        name = token.upper()
        while name and name[-1] in _SLURM_SUFFIX:
            flags.append(_SLURM_SUFFIX[name[-1]])
            name = name[:-1]
        if name:
            flags.append(_SLURM_SHORT.get(name, name))
    return list(dict.fromkeys(flags)), conditions


def node_health(
    node: NodeInfo,
    *,
    conditions: Mapping[str, str] | None = None,
    observed_at: datetime | None = None,
) -> NodeHealthSignal:
    """Judge a node from its state flags, its Kubernetes conditions and the backend's verdict.

    The result is the worst of all three; ``reasons`` says which flag or condition decided.
    """
    flags, from_state = _flags(node.state)
    conds = {**from_state, **(conditions or {})}
    health = node.health
    reasons: list[str] = []
    if node.health is not NodeHealth.HEALTHY:
        reasons.append(f"backend reports {node.health.value}")
    schedulable = node.schedulable
    for flag in flags:
        implied = (
            NodeHealth.DOWN
            if flag in _DOWN_FLAGS
            else NodeHealth.DEGRADED
            if flag in _DEGRADED_FLAGS
            else None
        )
        if implied is not None:
            reasons.append(f"state flag {flag}")
            health = max(health, implied, key=_RANK.__getitem__)
        if flag in _UNSCHEDULABLE_FLAGS:
            schedulable = False
    for cond, status in conds.items():
        implied = _CONDITIONS.get((cond, status))
        if implied is not None:
            reasons.append(f"condition {cond}={status}")
            health = max(health, implied, key=_RANK.__getitem__)
            if implied is NodeHealth.DOWN:
                schedulable = False
    if not node.schedulable:
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
        flags=flags + [f"{k}={v}" for k, v in conds.items()],
        reasons=reasons,
    )
