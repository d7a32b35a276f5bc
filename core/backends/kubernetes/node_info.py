"""Kubernetes nodes as clawpoint sees them: ``NodeDetail`` (everything read from a node)
and ``NodeInfo`` (the common model).

The Ready condition and every other condition, cordon (and clawpoint's reason for it),
taints (spot interruption and other disruption taints recognised by key,
``DISRUPTION_TAINTS``), allocatable and allocated GPUs (``nvidia.com/gpu``, ``amd.com/gpu``;
allocated = the effective requests of the non-terminal pods on the node that are in scope),
the GPU model (``pod_size.GPU_CLASS_LABEL`` or ``k8s.gpu_class_label``), instance type, zone, region, node pool and capacity type from the usual labels
(``CAPACITY_LABELS``: Karpenter, EKS, GKE, AKS, kops/eksctl). Pure functions on raw JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field

from core.backends.kubernetes import ids
from core.backends.kubernetes.objects import (
    GPU_RESOURCES,
    conditions,
    int_quantity,
    pod_spec_gpus,
    quantity,
)
from core.backends.kubernetes.pod_size import GPU_CLASS_LABEL
from core.model import NodeHealth, NodeInfo
from core.schema_base import Model

Obj = dict[str, Any]

# label -> {label value (lower case) -> capacity type}; the first label present wins.
CAPACITY_LABELS: tuple[tuple[str, dict[str, str]], ...] = (
    (
        "karpenter.sh/capacity-type",
        {"spot": "spot", "on-demand": "on-demand", "reserved": "reserved"},
    ),
    (
        "eks.amazonaws.com/capacityType",
        {"spot": "spot", "on_demand": "on-demand", "capacity_block": "reserved"},
    ),
    ("cloud.google.com/gke-spot", {"true": "spot"}),
    ("cloud.google.com/gke-preemptible", {"true": "spot"}),
    (
        "cloud.google.com/gke-provisioning",
        {"spot": "spot", "standard": "on-demand", "preemptible": "spot"},
    ),
    ("kubernetes.azure.com/scalesetpriority", {"spot": "spot", "regular": "on-demand"}),
    (
        "node.kubernetes.io/lifecycle",
        {"spot": "spot", "normal": "on-demand", "on-demand": "on-demand"},
    ),
    ("lifecycle", {"ec2spot": "spot", "ondemand": "on-demand"}),
)
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")
REGION_LABELS = ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")
POOL_LABELS = (
    "karpenter.sh/nodepool",
    "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
)

# Taint key -> what it announces. "interruption": the cloud reclaims the (spot) node soon.
DISRUPTION_TAINTS: dict[str, str] = {
    "aws-node-termination-handler/spot-itn": "interruption",
    "cloud.google.com/impending-node-termination": "interruption",
    "aws-node-termination-handler/rebalance-recommendation": "rebalance",
    "aws-node-termination-handler/scheduled-maintenance": "maintenance",
    "aws-node-termination-handler/asg-lifecycle-termination": "termination",
    "karpenter.sh/disrupted": "disruption",
    "karpenter.sh/disruption": "disruption",
    "ToBeDeletedByClusterAutoscaler": "scale-down",
    "node.kubernetes.io/out-of-service": "out-of-service",
    "node.cloudprovider.kubernetes.io/shutdown": "shutdown",
}
_PRESSURE = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


def first_label(labels: dict[str, str], keys: Iterable[str]) -> str | None:
    return next((labels[k] for k in keys if labels.get(k)), None)


def capacity_type(labels: dict[str, str]) -> str | None:
    """spot / on-demand / reserved from the first capacity label present, else None."""
    for key, values in CAPACITY_LABELS:
        if key in labels:
            found = values.get(str(labels[key]).lower())
            if found:
                return found
    return None


class Taint(Model):
    key: str
    value: str = ""
    effect: str = ""

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


# Where clawpoint's cordon writes its reason (``builders.REASON_ANNOTATION``): shown in the
# node's reason, so an undrain can tell a cordon is still clawpoint's (core.service.drains).
CORDON_REASON_ANNOTATION = "clawpoint.io/cordon-reason"


class NodeDetail(Model):
    """What Kubernetes says about one node (``to_node_info`` maps it to the core model)."""

    name: str
    ready: bool | None  # None: the Ready condition is Unknown or missing
    conditions: dict[str, str] = Field(default_factory=dict)  # type -> True/False/Unknown
    condition_messages: dict[str, str] = Field(default_factory=dict)
    unschedulable: bool = False
    cordon_reason: str = ""  # CORDON_REASON_ANNOTATION, when clawpoint cordoned it
    taints: list[Taint] = Field(default_factory=list)
    disruption: str | None = None  # DISRUPTION_TAINTS value of the first such taint
    disruption_taint: str | None = None
    cpus: int | None = None
    memory_mb: int | None = None
    gpus_allocatable: int = 0
    gpus_capacity: int = 0
    gpus_allocated: int = 0
    gpu_class: str | None = None  # the GPU model label (``pod_size.GPU_CLASS_LABEL``)
    instance_type: str | None = None
    zone: str | None = None
    region: str | None = None
    pool: str | None = None
    capacity_type: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    pods: list[str] = Field(default_factory=list)


def node_detail(
    raw: Obj, pods_on_node: list[Obj], gpu_class_label: str = GPU_CLASS_LABEL
) -> NodeDetail:
    meta, spec, st = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    conds = conditions(raw)
    ready_s = str((conds.get("Ready") or {}).get("status", "Unknown"))
    taints = [
        Taint(
            key=str(t.get("key", "")),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in spec.get("taints") or []
        if isinstance(t, dict)
    ]
    disruptive = next((t for t in taints if t.key in DISRUPTION_TAINTS), None)
    alloc, cap = st.get("allocatable") or {}, st.get("capacity") or {}
    cpu = quantity(alloc.get("cpu"))
    mem = quantity(alloc.get("memory"))
    return NodeDetail(
        name=str(meta.get("name", "")),
        ready=True if ready_s == "True" else False if ready_s == "False" else None,
        conditions={k: str(c.get("status")) for k, c in conds.items()},
        condition_messages={
            k: str(c.get("message") or "") for k, c in conds.items() if c.get("message")
        },
        unschedulable=bool(spec.get("unschedulable")),
        cordon_reason=str((meta.get("annotations") or {}).get(CORDON_REASON_ANNOTATION) or ""),
        taints=taints,
        disruption=DISRUPTION_TAINTS[disruptive.key] if disruptive else None,
        disruption_taint=str(disruptive) if disruptive else None,
        cpus=int(cpu) if cpu is not None else None,
        memory_mb=int(mem / (1024 * 1024)) if mem is not None else None,
        gpus_allocatable=sum(int_quantity(alloc.get(r)) for r in GPU_RESOURCES),
        gpus_capacity=sum(int_quantity(cap.get(r)) for r in GPU_RESOURCES),
        gpus_allocated=sum(pod_spec_gpus(p.get("spec")) for p in pods_on_node),
        gpu_class=labels.get(gpu_class_label) or None,
        instance_type=first_label(labels, INSTANCE_TYPE_LABELS),
        zone=first_label(labels, ZONE_LABELS),
        region=first_label(labels, REGION_LABELS),
        pool=first_label(labels, POOL_LABELS),
        capacity_type=capacity_type(labels),
        labels=labels,
        pods=[
            ids.format_workload_id("Pod", p["metadata"]["namespace"], p["metadata"]["name"])
            for p in pods_on_node
        ],
    )


def to_node_info(d: NodeDetail) -> NodeInfo:
    pressure = [c for c in _PRESSURE if d.conditions.get(c) == "True"]
    if d.ready is not True:
        health = NodeHealth.DOWN
    elif pressure or d.disruption or d.unschedulable:
        health = NodeHealth.DEGRADED
    else:
        health = NodeHealth.HEALTHY
    state = ["ready" if d.ready else "notready" if d.ready is False else "unknown"]
    state += [p.lower() for p in pressure]
    if d.unschedulable:
        state.append("cordoned")
    if d.disruption:
        state.append(d.disruption)
    reasons = []
    if d.ready is not True:
        reasons.append(d.condition_messages.get("Ready") or "the node is not Ready")
    reasons += [d.condition_messages.get(p) or p for p in pressure]
    if d.disruption_taint:
        reasons.append(f"tainted {d.disruption_taint}")
    if d.unschedulable:
        reasons.append(f"cordoned: {d.cordon_reason}" if d.cordon_reason else "cordoned")
    labels = dict(d.labels)
    extra = {
        "instance_type": d.instance_type,
        "zone": d.zone,
        "region": d.region,
        "capacity_type": d.capacity_type,
        "disruption": d.disruption,
        "gpus_allocated": str(d.gpus_allocated),
        "gpus_free": str(max(0, d.gpus_allocatable - d.gpus_allocated)),
        "taints": ",".join(str(t) for t in d.taints) or None,
    }
    labels.update({k: v for k, v in extra.items() if v is not None})
    return NodeInfo(
        id=ids.format_node_id(d.name),
        backend=ids.BACKEND,
        name=d.name,
        spot=d.capacity_type == "spot",
        labels=labels,
        health=health,
        schedulable=d.ready is True and not d.unschedulable and d.disruption is None,
        state="+".join(state),
        reason="; ".join(reasons),
        cpus=d.cpus,
        memory_mb=d.memory_mb,
        gpus=d.gpus_allocatable,
        gpu_class=d.gpu_class,
        partitions=[d.pool] if d.pool else [],
        workloads=list(d.pods),
    )
