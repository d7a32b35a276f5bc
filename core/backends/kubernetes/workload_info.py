"""Kubernetes workloads as clawpoint sees them: ``to_workload`` maps one object of a kind
(Pods, Jobs, Deployments, StatefulSets, Kueue Workloads, Kubeflow training jobs, RayJobs,
RayClusters, KServe InferenceServices) into ``WorkloadInfo``. States follow each kind's own
status fields (see ``_STATE_OF``); GPUs are what its pod templates ask for. Wrapped
workloads are recognised by their annotations ``clawpoint.io/engine`` and
``clawpoint.io/lineage``; others report engine ``none``. Pure functions on raw JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from core.backends.kubernetes import ids
from core.backends.kubernetes.objects import (
    conditions,
    container_gpus,
    is_true,
    pod_spec_gpus,
    template_gpus,
    ts,
)
from core.backends.kubernetes.pod_size import (
    GPU_CLASS_LABEL,
    container_named,
    container_size,
    gpu_class_of,
    wrapped_name,
)
from core.model import WorkloadInfo, WorkloadState

Obj = dict[str, Any]


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
    if is_true(conds, "Complete") or is_true(conds, "SuccessCriteriaMet"):
        return WorkloadState.COMPLETED, ""
    if is_true(conds, "Failed") or is_true(conds, "FailureTarget"):
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
    if is_true(conds, "Finished"):
        finished = conds["Finished"]
        failed = str(finished.get("reason")) == "Failed"
        return (WorkloadState.FAILED if failed else WorkloadState.COMPLETED), str(
            finished.get("message") or ""
        )
    if (raw.get("spec") or {}).get("active") is False:
        return WorkloadState.STOPPED, "deactivated"
    if is_true(conds, "Admitted"):
        return WorkloadState.RUNNING, "admitted"
    why = conds.get("QuotaReserved") or conds.get("Evicted") or {}
    return WorkloadState.PENDING, str(why.get("message") or "waiting for admission")


def _latestis_true(raw: Obj) -> str | None:
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
    if is_true(conds, "Succeeded") or is_true(conds, "Complete"):
        return WorkloadState.COMPLETED, ""
    if is_true(conds, "Failed"):
        return WorkloadState.FAILED, str(conds["Failed"].get("message") or "")
    if suspended or is_true(conds, "Suspended"):
        return WorkloadState.STOPPED, "suspended"
    if _latestis_true(raw) in ("Running", "Restarting"):
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
        or is_true(conds, "RayClusterSuspended")
    ):
        return WorkloadState.STOPPED, "suspended"
    if state == "failed":
        return WorkloadState.FAILED, str(st.get("reason") or "")
    if state == "ready" or is_true(conds, "RayClusterProvisioned"):
        return WorkloadState.RUNNING, ""
    return WorkloadState.PENDING, ""


def _isvc_state(raw: Obj) -> tuple[WorkloadState, str]:
    meta, conds = raw.get("metadata") or {}, conditions(raw)
    if str((meta.get("annotations") or {}).get("serving.kserve.io/stop", "")).lower() == "true":
        return WorkloadState.STOPPED, "stopped"
    if is_true(conds, "Ready"):
        return WorkloadState.RUNNING, ""
    return WorkloadState.PENDING, str((conds.get("Ready") or {}).get("message") or "")


def _ray_spec_gpus(cluster_spec: Obj | None) -> int:
    spec = cluster_spec or {}
    total = template_gpus((spec.get("headGroupSpec") or {}).get("template"))
    for group in spec.get("workerGroupSpecs") or []:
        count = int(group.get("replicas", group.get("minReplicas", 1)) or 0) * int(
            group.get("numOfHosts", 1) or 1
        )
        total += count * template_gpus(group.get("template"))
    return total


def workload_gpus(kind: str, raw: Obj) -> int:
    spec = raw.get("spec") or {}
    if kind == "Pod":
        return pod_spec_gpus(spec)
    if kind == "Job":
        return int(spec.get("parallelism", 1) or 0) * template_gpus(spec.get("template"))
    if kind in ("Deployment", "StatefulSet"):
        return int(spec.get("replicas", 1) or 0) * template_gpus(spec.get("template"))
    if kind == "Workload":
        return sum(
            int(ps.get("count", 1) or 0) * template_gpus(ps.get("template"))
            for ps in spec.get("podSets") or []
        )
    if kind in ("PyTorchJob", "TFJob", "MPIJob"):
        key = {
            "PyTorchJob": "pytorchReplicaSpecs",
            "TFJob": "tfReplicaSpecs",
            "MPIJob": "mpiReplicaSpecs",
        }[kind]
        return sum(
            int(rs.get("replicas", 1) or 0) * template_gpus(rs.get("template"))
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


def to_workload(
    kind: ids.WorkloadKind,
    raw: Obj,
    node_labels: dict[str, dict[str, str]] | None = None,
    gpu_class_label: str = GPU_CLASS_LABEL,
) -> WorkloadInfo:
    """``raw`` as a ``WorkloadInfo``; a Pod's size is its wrapped container's (``pod_size``),
    its GPU class the one it selects or its node's (``node_labels``: node -> labels)."""
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
    cpus: float | None = None
    memory_mb: int | None = None
    gpus = workload_gpus(kind.kind, raw)
    gpu_class: str | None = None
    if kind.kind == "Pod":
        node = spec.get("nodeName") or None
        started = ts((raw.get("status") or {}).get("startTime"))
        cpus, memory_mb = container_size(container_named(spec, wrapped_name(raw)))
        if gpus:
            gpu_class = gpu_class_of(spec, (node_labels or {}).get(node or ""), gpu_class_label)
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
        gpus=gpus,
        cpus=cpus,
        memory_mb=memory_mb,
        gpu_class=gpu_class.lower() if gpu_class else None,
        started_at=started,
        message=message,
    )
