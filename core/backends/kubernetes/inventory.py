"""Kubernetes inventory: nodes and workloads, mapped into ``NodeInfo`` / ``WorkloadInfo``.

Nodes: the Ready condition and every other condition, cordon, taints (spot interruption and
other disruption taints recognised by key, ``DISRUPTION_TAINTS``), allocatable and
allocated GPUs (``nvidia.com/gpu``, ``amd.com/gpu``; allocated = the effective requests of
the non-terminal pods on the node that are in scope), instance type, zone, region, node pool
and capacity type from the usual labels (``CAPACITY_LABELS``: Karpenter, EKS, GKE, AKS,
kops/eksctl).

Workloads: Pods, Jobs, Deployments and StatefulSets always; Kueue Workloads, Kubeflow
training jobs (PyTorchJob, TFJob, MPIJob, TrainJob), RayJobs, RayClusters and KServe
InferenceServices when discovery shows their CRDs (the served version is picked from
``ids.WORKLOAD_KINDS``, preferred first). States follow each kind's own status fields (see
``_STATE_OF``).

A 403 on any kind, an operator's included, raises (naming the permission) rather than
silently leaving that kind out. Wrapped workloads are recognised by their annotations
``clawpoint.io/engine`` and ``clawpoint.io/lineage`` (set on the workload and its pod
template, see deploy/kubernetes/example-job.yaml); others report engine ``none``.

All parsing is done on the raw JSON (pure functions below ``Inventory``), so a field the
client's models do not know never breaks a read. Limits: a snapshot; allocated GPUs count
only pods in the namespaces in scope; pods report their own ids, not their owners'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import BaseModel, Field

from core import errors
from core.backends.kubernetes import ids
from core.backends.kubernetes.connection import Connection, Op
from core.model import NodeHealth, NodeInfo, WorkloadInfo, WorkloadState

Obj = dict[str, Any]
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")

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


# ----- small parsers -----------------------------------------------------------------------


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity (``"8"``, ``"7910m"``, ``"16Gi"``, ``"1e3"``) as a Decimal."""
    if value is None:
        return None
    from kubernetes.utils import parse_quantity

    parse: Any = parse_quantity  # untyped upstream
    try:
        return Decimal(parse(value))
    except (ValueError, TypeError, InvalidOperation):
        return None


def _int_quantity(value: Any) -> int:
    q = quantity(value)
    return int(q) if q is not None else 0


def ts(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def conditions(obj: Obj) -> dict[str, Obj]:
    """status.conditions by type."""
    return {
        str(c.get("type")): c
        for c in (obj.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    }


def _true(conds: dict[str, Obj], kind: str) -> bool:
    return str((conds.get(kind) or {}).get("status")) == "True"


def container_gpus(container: Obj) -> int:
    res = container.get("resources") or {}
    total = 0
    for name in GPU_RESOURCES:
        # Extended resources: requests default to limits and may not differ from them.
        total += _int_quantity(
            (res.get("limits") or {}).get(name) or (res.get("requests") or {}).get(name)
        )
    return total


def pod_spec_gpus(spec: Obj | None) -> int:
    """The effective GPU request of a pod spec: max(sum of containers, largest init container)."""
    if not spec:
        return 0
    main = sum(container_gpus(c) for c in spec.get("containers") or [])
    init = max((container_gpus(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def _template_gpus(template: Obj | None) -> int:
    return pod_spec_gpus((template or {}).get("spec"))


def _first_label(labels: dict[str, str], keys: Iterable[str]) -> str | None:
    return next((labels[k] for k in keys if labels.get(k)), None)


def capacity_type(labels: dict[str, str]) -> str | None:
    """spot / on-demand / reserved from the first capacity label present, else None."""
    for key, values in CAPACITY_LABELS:
        if key in labels:
            found = values.get(str(labels[key]).lower())
            if found:
                return found
    return None


# ----- nodes -------------------------------------------------------------------------------


class Taint(BaseModel):
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


class NodeDetail(BaseModel):
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
    instance_type: str | None = None
    zone: str | None = None
    region: str | None = None
    pool: str | None = None
    capacity_type: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    pods: list[str] = Field(default_factory=list)


def node_detail(raw: Obj, pods_on_node: list[Obj]) -> NodeDetail:
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
        gpus_allocatable=sum(_int_quantity(alloc.get(r)) for r in GPU_RESOURCES),
        gpus_capacity=sum(_int_quantity(cap.get(r)) for r in GPU_RESOURCES),
        gpus_allocated=sum(pod_spec_gpus(p.get("spec")) for p in pods_on_node),
        instance_type=_first_label(labels, INSTANCE_TYPE_LABELS),
        zone=_first_label(labels, ZONE_LABELS),
        region=_first_label(labels, REGION_LABELS),
        pool=_first_label(labels, POOL_LABELS),
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
        partitions=[d.pool] if d.pool else [],
        workloads=list(d.pods),
    )


# ----- workloads ---------------------------------------------------------------------------


def _owner(meta: Obj) -> str | None:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") and ref.get("name"):
            return f"{ref['kind']}/{meta.get('namespace', '')}/{ref['name']}"
    return None


def _pod_state(raw: Obj) -> tuple[WorkloadState, str]:
    st = raw.get("status") or {}
    phase = st.get("phase")
    conds = conditions(raw)
    message = str(st.get("message") or "")
    sched = conds.get("PodScheduled") or {}
    if str(sched.get("status")) == "False":
        message = str(sched.get("message") or sched.get("reason") or message)
    for cs in st.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and not message:
            message = str(waiting["reason"])
    if raw.get("metadata", {}).get("deletionTimestamp"):
        message = message or "terminating"
    state = {
        "Pending": WorkloadState.PENDING,
        "Running": WorkloadState.RUNNING,
        "Succeeded": WorkloadState.COMPLETED,
        "Failed": WorkloadState.FAILED,
    }.get(str(phase), WorkloadState.UNKNOWN)
    return state, message


def _job_state(raw: Obj) -> tuple[WorkloadState, str]:
    conds, st = conditions(raw), raw.get("status") or {}
    if _true(conds, "Complete") or _true(conds, "SuccessCriteriaMet"):
        return WorkloadState.COMPLETED, ""
    if _true(conds, "Failed") or _true(conds, "FailureTarget"):
        return WorkloadState.FAILED, str(
            (conds.get("Failed") or conds.get("FailureTarget") or {}).get("message", "")
        )
    if (raw.get("spec") or {}).get("suspend"):
        return WorkloadState.STOPPED, "suspended"
    if int(st.get("active") or 0) > 0:
        return WorkloadState.RUNNING, ""
    return WorkloadState.PENDING, ""


def _replicated_state(raw: Obj) -> tuple[WorkloadState, str]:
    spec, st = raw.get("spec") or {}, raw.get("status") or {}
    if int(spec.get("replicas", 1)) == 0:
        return WorkloadState.STOPPED, "scaled to zero"
    if int(st.get("readyReplicas") or 0) > 0 or int(st.get("availableReplicas") or 0) > 0:
        return (
            WorkloadState.RUNNING,
            f"{st.get('readyReplicas') or 0}/{spec.get('replicas', 1)} ready",
        )
    return WorkloadState.PENDING, "no replica ready"


def _kueue_state(raw: Obj) -> tuple[WorkloadState, str]:
    conds = conditions(raw)
    if _true(conds, "Finished"):
        finished = conds["Finished"]
        failed = str(finished.get("reason")) == "Failed"
        return (WorkloadState.FAILED if failed else WorkloadState.COMPLETED), str(
            finished.get("message") or ""
        )
    if (raw.get("spec") or {}).get("active") is False:
        return WorkloadState.STOPPED, "deactivated"
    if _true(conds, "Admitted"):
        return WorkloadState.RUNNING, "admitted"
    why = conds.get("QuotaReserved") or conds.get("Evicted") or {}
    return WorkloadState.PENDING, str(why.get("message") or "waiting for admission")


def _latest_true(raw: Obj) -> str | None:
    """The type of the last condition with status True (Kubeflow appends conditions in order)."""
    found = None
    for c in (raw.get("status") or {}).get("conditions") or []:
        if str(c.get("status")) == "True":
            found = str(c.get("type"))
    return found


def _kubeflow_state(raw: Obj) -> tuple[WorkloadState, str]:
    conds = conditions(raw)
    spec = raw.get("spec") or {}
    suspended = bool((spec.get("runPolicy") or {}).get("suspend") or spec.get("suspend"))
    if _true(conds, "Succeeded") or _true(conds, "Complete"):
        return WorkloadState.COMPLETED, ""
    if _true(conds, "Failed"):
        return WorkloadState.FAILED, str(conds["Failed"].get("message") or "")
    if suspended or _true(conds, "Suspended"):
        return WorkloadState.STOPPED, "suspended"
    if _latest_true(raw) in ("Running", "Restarting"):
        return WorkloadState.RUNNING, ""
    return WorkloadState.PENDING, ""


def _rayjob_state(raw: Obj) -> tuple[WorkloadState, str]:
    st = raw.get("status") or {}
    deploy = str(st.get("jobDeploymentStatus") or "")
    if deploy == "Complete":
        return WorkloadState.COMPLETED, str(st.get("message") or "")
    if deploy == "Failed":
        return WorkloadState.FAILED, str(st.get("message") or st.get("reason") or "")
    if deploy in ("Suspended", "Suspending") or (raw.get("spec") or {}).get("suspend"):
        return WorkloadState.STOPPED, "suspended"
    if deploy == "Running":
        return WorkloadState.RUNNING, str(st.get("jobStatus") or "")
    return WorkloadState.PENDING, deploy


def _raycluster_state(raw: Obj) -> tuple[WorkloadState, str]:
    st, conds = raw.get("status") or {}, conditions(raw)
    state = str(st.get("state") or "").lower()
    if (
        (raw.get("spec") or {}).get("suspend")
        or state == "suspended"
        or _true(conds, "RayClusterSuspended")
    ):
        return WorkloadState.STOPPED, "suspended"
    if state == "failed":
        return WorkloadState.FAILED, str(st.get("reason") or "")
    if state == "ready" or _true(conds, "RayClusterProvisioned"):
        return WorkloadState.RUNNING, ""
    return WorkloadState.PENDING, ""


def _isvc_state(raw: Obj) -> tuple[WorkloadState, str]:
    meta, conds = raw.get("metadata") or {}, conditions(raw)
    if str((meta.get("annotations") or {}).get("serving.kserve.io/stop", "")).lower() == "true":
        return WorkloadState.STOPPED, "stopped"
    if _true(conds, "Ready"):
        return WorkloadState.RUNNING, ""
    return WorkloadState.PENDING, str((conds.get("Ready") or {}).get("message") or "")


def _ray_spec_gpus(cluster_spec: Obj | None) -> int:
    spec = cluster_spec or {}
    total = _template_gpus((spec.get("headGroupSpec") or {}).get("template"))
    for group in spec.get("workerGroupSpecs") or []:
        count = int(group.get("replicas", group.get("minReplicas", 1)) or 0) * int(
            group.get("numOfHosts", 1) or 1
        )
        total += count * _template_gpus(group.get("template"))
    return total


def workload_gpus(kind: str, raw: Obj) -> int:
    spec = raw.get("spec") or {}
    if kind == "Pod":
        return pod_spec_gpus(spec)
    if kind == "Job":
        return int(spec.get("parallelism", 1) or 0) * _template_gpus(spec.get("template"))
    if kind in ("Deployment", "StatefulSet"):
        return int(spec.get("replicas", 1) or 0) * _template_gpus(spec.get("template"))
    if kind == "Workload":
        return sum(
            int(ps.get("count", 1) or 0) * _template_gpus(ps.get("template"))
            for ps in spec.get("podSets") or []
        )
    if kind in ("PyTorchJob", "TFJob", "MPIJob"):
        key = {
            "PyTorchJob": "pytorchReplicaSpecs",
            "TFJob": "tfReplicaSpecs",
            "MPIJob": "mpiReplicaSpecs",
        }[kind]
        return sum(
            int(rs.get("replicas", 1) or 0) * _template_gpus(rs.get("template"))
            for rs in (spec.get(key) or {}).values()
            if isinstance(rs, dict)
        )
    if kind == "TrainJob":
        trainer = spec.get("trainer") or {}
        per_node = container_gpus({"resources": trainer.get("resourcesPerNode") or {}})
        return int(trainer.get("numNodes", 1) or 0) * per_node
    if kind == "RayJob":
        return _ray_spec_gpus(spec.get("rayClusterSpec"))
    if kind == "RayCluster":
        return _ray_spec_gpus(spec)
    if kind == "InferenceService":
        predictor = spec.get("predictor") or {}
        model = predictor.get("model") or {}
        per_replica = container_gpus(model) + sum(
            container_gpus(c) for c in predictor.get("containers") or []
        )
        return max(int(predictor.get("minReplicas", 1) or 0), 1) * per_replica
    return 0


_STATE_OF: dict[str, Callable[[Obj], tuple[WorkloadState, str]]] = {
    "Pod": _pod_state,
    "Job": _job_state,
    "Deployment": _replicated_state,
    "StatefulSet": _replicated_state,
    "Workload": _kueue_state,
    "PyTorchJob": _kubeflow_state,
    "TFJob": _kubeflow_state,
    "MPIJob": _kubeflow_state,
    "TrainJob": _kubeflow_state,
    "RayJob": _rayjob_state,
    "RayCluster": _raycluster_state,
    "InferenceService": _isvc_state,
}


def to_workload(kind: ids.WorkloadKind, raw: Obj) -> WorkloadInfo:
    meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
    ref = ids.WorkloadRef(kind, str(meta.get("namespace", "")), str(meta.get("name", "")))
    state, message = _STATE_OF[kind.kind](raw)
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    labels["kind"] = kind.kind
    owner = _owner(meta)
    if owner:
        labels["owner"] = owner
    annotations = meta.get("annotations") or {}
    lineage = annotations.get("clawpoint.io/lineage")
    if lineage:
        labels["lineage"] = str(lineage)
    node: str | None = None
    started: datetime | None = None
    partition: str | None = None
    if kind.kind == "Pod":
        node = spec.get("nodeName") or None
        started = ts((raw.get("status") or {}).get("startTime"))
    elif kind.kind == "Job":
        started = ts((raw.get("status") or {}).get("startTime"))
    elif kind.kind == "Workload":
        queue = spec.get("queueName")
        cq = ((raw.get("status") or {}).get("admission") or {}).get("clusterQueue")
        if queue:
            labels["queue"] = str(queue)
        if cq:
            labels["cluster_queue"] = str(cq)
        if spec.get("priorityClassName"):
            labels["priority_class"] = str(spec["priorityClassName"])
        partition = str(cq or queue or "") or None
    queue_label = labels.get("kueue.x-k8s.io/queue-name")
    if queue_label and partition is None:
        partition = queue_label
    return WorkloadInfo(
        id=str(ref),
        backend=ids.BACKEND,
        name=ref.path,
        state=state,
        node=node,
        engine=str(annotations.get("clawpoint.io/engine") or "none"),
        labels=labels,
        namespace=ref.namespace,
        partition=partition,
        gpus=workload_gpus(kind.kind, raw),
        started_at=started,
        message=message,
    )


# ----- reading from the cluster ------------------------------------------------------------


class Inventory:
    """Reads nodes and workloads through a ``Connection`` (namespaces in scope respected)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._served: dict[str, str] | None = None  # kind -> served version

    # discovery
    def served_versions(self, *, refresh: bool = False) -> dict[str, str]:
        """Kind -> the version the cluster serves, for every kind in ``ids.WORKLOAD_KINDS``."""
        if self._served is not None and not refresh:
            return self._served
        served: dict[str, str] = {k.kind: k.versions[0] for k in ids.WORKLOAD_KINDS if k.builtin}
        apis = self.conn.api("ApisApi")
        groups = self.conn.call_json(Op("get", "apis"), apis.get_api_versions).get("groups") or []
        offered = {
            str(g.get("name")): [str(v.get("version")) for v in g.get("versions") or []]
            for g in groups
        }
        custom = self.conn.api("CustomObjectsApi")
        resources: dict[tuple[str, str], set[str]] = {}
        for kind in ids.WORKLOAD_KINDS:
            if kind.builtin or kind.group not in offered:
                continue
            for version in kind.versions:
                if version not in offered[kind.group]:
                    continue
                key = (kind.group, version)
                if key not in resources:
                    body = self.conn.call_json(
                        Op("get", "apis", group=kind.group),
                        custom.get_api_resources,
                        kind.group,
                        version,
                    )
                    resources[key] = {str(r.get("name")) for r in body.get("resources") or []}
                if kind.plural in resources[key]:
                    served[kind.kind] = version
                    break
        self._served = served
        return served

    # raw lists
    def _list(self, kind: ids.WorkloadKind, version: str, **selectors: str) -> list[Obj]:
        namespaces = self.conn.scoped_namespaces
        out: list[Obj] = []
        if kind.builtin:
            api_name, method = {
                "Pod": ("CoreV1Api", "pod"),
                "Job": ("BatchV1Api", "job"),
                "Deployment": ("AppsV1Api", "deployment"),
                "StatefulSet": ("AppsV1Api", "stateful_set"),
            }[kind.kind]
            api = self.conn.api(api_name)
            if namespaces is None:
                fn = getattr(api, f"list_{method}_for_all_namespaces")
                out += self.conn.list_all(Op("list", kind.plural, kind.group), fn, **selectors)
            for ns in namespaces or []:
                fn = getattr(api, f"list_namespaced_{method}")
                out += self.conn.list_all(
                    Op("list", kind.plural, kind.group, ns), fn, ns, **selectors
                )
            return out
        custom = self.conn.api("CustomObjectsApi")
        if namespaces is None:
            out += self.conn.list_all(
                Op("list", kind.plural, kind.group),
                custom.list_custom_object_for_all_namespaces,
                kind.group,
                version,
                kind.plural,
                **selectors,
            )
        for ns in namespaces or []:
            out += self.conn.list_all(
                Op("list", kind.plural, kind.group, ns),
                custom.list_namespaced_custom_object,
                kind.group,
                version,
                ns,
                kind.plural,
                **selectors,
            )
        return out

    def raw_pods(self, **selectors: str) -> list[Obj]:
        return self._list(ids.kind_named("Pod"), "v1", **selectors)

    def raw_nodes(self) -> list[Obj]:
        core = self.conn.api("CoreV1Api")
        return list(self.conn.list_all(Op("list", "nodes"), core.list_node))

    def raw(self, kind_name: str) -> list[Obj]:
        """Every object of a workload kind in scope; [] when its CRD is not served."""
        kind = ids.kind_named(kind_name)
        version = self.served_versions().get(kind.kind)
        return [] if version is None else self._list(kind, version)

    # the core model
    def node_details(self) -> list[NodeDetail]:
        nodes = self.raw_nodes()
        live = self.raw_pods(field_selector="status.phase!=Succeeded,status.phase!=Failed")
        by_node: dict[str, list[Obj]] = {}
        for p in live:
            name = (p.get("spec") or {}).get("nodeName")
            if name:
                by_node.setdefault(str(name), []).append(p)
        return [node_detail(n, by_node.get(str(n["metadata"]["name"]), [])) for n in nodes]

    def nodes(self) -> list[NodeInfo]:
        return [to_node_info(d) for d in self.node_details()]

    def workloads(self) -> list[WorkloadInfo]:
        out: list[WorkloadInfo] = []
        served = self.served_versions()
        for kind in ids.WORKLOAD_KINDS:
            version = served.get(kind.kind)
            if version is None:
                continue
            out += [to_workload(kind, raw) for raw in self._list(kind, version)]
        return out

    def get_workload(self, workload_id: str) -> WorkloadInfo:
        """One workload by id; the id is validated before any request is sent."""
        ref = ids.parse_workload_id(workload_id)
        return to_workload(ref.kind, self.read_raw(ref))

    def read_raw(self, ref: ids.WorkloadRef) -> Obj:
        """The object behind ``ref`` as the API returns it; the namespace scope and whether
        the cluster serves the kind are checked before any request is sent."""
        scope = self.conn.scoped_namespaces
        if scope is not None and ref.namespace not in scope:
            raise errors.InvalidInput(
                f"namespace {ref.namespace!r} is outside the namespaces in scope ({', '.join(scope)})",
                hint="add it to k8s.namespaces or pass a workload from a namespace in scope",
            )
        version = self.served_versions().get(ref.kind.kind)
        if version is None:
            raise errors.NotFound(
                f"this cluster does not serve {ref.kind.kind} ({ref.kind.crd} is not installed)",
                hint="install its operator, or list the workloads this cluster has",
            )
        op = Op("get", ref.kind.plural, ref.kind.group, ref.namespace, ref.name)
        if ref.kind.builtin:
            api_name, method = {
                "Pod": ("CoreV1Api", "read_namespaced_pod"),
                "Job": ("BatchV1Api", "read_namespaced_job"),
                "Deployment": ("AppsV1Api", "read_namespaced_deployment"),
                "StatefulSet": ("AppsV1Api", "read_namespaced_stateful_set"),
            }[ref.kind.kind]
            return self.conn.call_json(
                op, getattr(self.conn.api(api_name), method), ref.name, ref.namespace
            )
        custom = self.conn.api("CustomObjectsApi")
        return self.conn.call_json(
            op,
            custom.get_namespaced_custom_object,
            ref.kind.group,
            version,
            ref.namespace,
            ref.kind.plural,
            ref.name,
        )
