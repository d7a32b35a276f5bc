"""Per-pod lineages of wrapped Kubernetes workloads: which lineage each pod writes, and which
workloads cannot be given one lineage per pod.

A wrapped workload names its base lineage in the ``clawpoint.io/lineage`` annotation (on
the workload and its pod template). Every pod runs the same ``clawpoint run --name BASE``,
and its wrapper derives the pod's own lineage from the container's environment by the rule
in ``core.lineage`` (``BASE-INDEX`` when ``CLAWPOINT_POD_INDEX`` or
``JOB_COMPLETION_INDEX`` is set, else ``BASE``). ``lineage_of`` applies that same rule to the
environment the pod's container gets, resolved from the pod object as the kubelet does
(literal values and the downward API's ``fieldRef``), so the backend and the wrapper in the
pod always agree.

Which workloads have stable per-pod identities (``check_identities``): an Indexed Job (its
completion index), a StatefulSet whose wrapped container sets ``CLAWPOINT_POD_INDEX`` from
its ordinal, and anything that runs one pod at a time. A wrapped non-Indexed Job with
``parallelism`` or ``completions`` above 1, a wrapped Deployment with more than one replica,
and a wrapped StatefulSet with more than one replica but no index variable would have pods
share one lineage (each restoring the other's state), so they are refused by name before any
plan is made. Limits: an index variable set through ``configMapKeyRef``, ``secretKeyRef`` or
``envFrom`` is not resolved (set it by value or ``fieldRef``).
"""

from __future__ import annotations

from typing import Any

from core import errors
from core.backends.kubernetes import ids
from core.lineage import INDEX_ENVS, JOB_INDEX_ENV, POD_INDEX_ENV, pod_lineage

Obj = dict[str, Any]

LINEAGE_ANNOTATION = "clawpoint.io/lineage"
CONTAINER_ANNOTATION = "clawpoint.io/container"
JOB_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
STS_INDEX_LABEL = "apps.kubernetes.io/pod-index"
REPLICAS_ANNOTATION = "clawpoint.io/preempted-replicas"
# On a pod started as a live move's standby (``standby``), naming the pod it stands by for;
# removed once it took the workload over. Listings hide a pod that carries it.
STANDBY_ANNOTATION = "clawpoint.io/standby-for"
# The standby's readiness gate (spec.readinessGates): the kubelet reports a pod Ready only
# once every gate's condition is True (pkg/kubelet/status/generate.go
# GeneratePodReadyCondition), so a Service selecting the workload's labels routes nothing to
# a standby until clawpoint sets this condition True at its takeover.
READY_GATE = "clawpoint.io/took-over"


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def base_lineage(obj: Obj) -> str | None:
    """The ``clawpoint.io/lineage`` annotation of a workload, template or pod (checked)."""
    value = (_meta(obj).get("annotations") or {}).get(LINEAGE_ANNOTATION)
    return ids.check_name(str(value), what="lineage") if value else None


def wrapped_container(pod: Obj) -> Obj:
    """The container the wrapper runs in: the one ``clawpoint.io/container`` names, else the
    first."""
    wanted = (_meta(pod).get("annotations") or {}).get(CONTAINER_ANNOTATION)
    containers = (pod.get("spec") or {}).get("containers") or []
    for c in containers:
        if wanted and c.get("name") == wanted:
            return dict(c)
    return dict(containers[0]) if containers else {}


def _field(pod: Obj, path: str) -> str:
    """A downward API ``fieldPath`` read from the pod (a missing label is ``""``, as the
    kubelet gives it; k8s.io/kubernetes pkg/fieldpath)."""
    meta = _meta(pod)
    for prefix, source in (("metadata.labels", "labels"), ("metadata.annotations", "annotations")):
        if path.startswith(f"{prefix}['") and path.endswith("']"):
            return str((meta.get(source) or {}).get(path[len(prefix) + 2 : -2], ""))
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": (pod.get("spec") or {}).get("nodeName"),
    }
    return str(simple.get(path) or "")


def container_env(pod: Obj) -> dict[str, str]:
    """The index variables the wrapped container of ``pod`` gets (literal or ``fieldRef``)."""
    env: dict[str, str] = {}
    for e in wrapped_container(pod).get("env") or []:
        name = str(e.get("name"))
        if name not in INDEX_ENVS:
            continue
        if "value" in e:
            env[name] = str(e["value"])
        elif "fieldRef" in (e.get("valueFrom") or {}):
            env[name] = _field(pod, str(e["valueFrom"]["fieldRef"].get("fieldPath", "")))
    return env


def lineage_of(pod: Obj) -> str | None:
    """The lineage this pod's wrapper writes (None: not wrapped)."""
    base = base_lineage(pod)
    if not base:
        return None
    return ids.check_name(pod_lineage(base, container_env(pod)), what="lineage")


# ----- workloads ---------------------------------------------------------------------------
def template_of(raw: Obj) -> Obj:
    return (raw.get("spec") or {}).get("template") or {}


def workload_base(raw: Obj) -> str | None:
    """The base lineage of a workload (its own annotation or its template's)."""
    return base_lineage(raw) or base_lineage(template_of(raw))


def job_shape(spec: Obj) -> tuple[int, int | None, bool]:
    """(parallelism, completions or None for a work queue, Indexed) with the API server's
    defaults (pkg/apis/batch/v1/defaults.go: both unset -> 1 and 1)."""
    parallelism = int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1)
    if spec.get("completions") is not None:
        completions: int | None = int(spec["completions"])
    else:
        completions = None if spec.get("parallelism") is not None else 1
    return parallelism, completions, spec.get("completionMode") == "Indexed"


def _sets_index(template: Obj) -> bool:
    """Whether the template's wrapped container sets CLAWPOINT_POD_INDEX per pod (a
    ``fieldRef``; a literal value would give every pod the same index)."""
    for e in wrapped_container(template).get("env") or []:
        if e.get("name") == POD_INDEX_ENV and "fieldRef" in (e.get("valueFrom") or {}):
            return True
    return False


def replicas_of(raw: Obj) -> int:
    """Replicas of a Deployment or StatefulSet (those kept by a preempt when scaled to 0)."""
    spec = raw.get("spec") or {}
    kept = (_meta(raw).get("annotations") or {}).get(REPLICAS_ANNOTATION)
    current = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
    return max(current, int(kept)) if kept and str(kept).isdigit() else current


def check_identities(kind: str, raw: Obj, *, pods: int | None = None) -> None:
    """Refuse a wrapped workload whose pods would share one lineage (``pods``: the count a
    scale would set, instead of the current one)."""
    base = workload_base(raw)
    if not base:
        return
    name = f"{kind} {_meta(raw).get('namespace')}/{_meta(raw).get('name')}"
    spec = raw.get("spec") or {}
    template = template_of(raw)
    literal = [
        e
        for e in wrapped_container(template).get("env") or []
        if e.get("name") in INDEX_ENVS and "value" in e
    ]
    if kind == "Job":
        parallelism, completions, indexed = job_shape(spec)
        if pods is not None:
            parallelism = pods
        if indexed and not literal:
            return
        if parallelism > 1 or (completions or 1) > 1:
            raise errors.NotSupported(
                f"{name} runs up to {max(parallelism, completions or 1)} wrapped pods that "
                f"would all write the one lineage {base}: a non-Indexed Job gives its pods no "
                "stable identity",
                hint="make it an Indexed Job (spec.completionMode: Indexed, with completions): "
                f"each pod then writes its own lineage {base}-INDEX from {JOB_INDEX_ENV}; "
                "docs/kubernetes.md 'Multi-pod workloads'",
                details={"kind": kind, "parallelism": parallelism, "completions": completions},
            )
    elif kind in ("Deployment", "StatefulSet"):
        replicas = replicas_of(raw) if pods is None else pods
        if replicas <= 1:
            return
        if kind == "Deployment":
            raise errors.NotSupported(
                f"{name} has {replicas} wrapped replicas that would all write the one lineage "
                f"{base}: a Deployment's pods have no stable identity",
                hint="run it as a StatefulSet with CLAWPOINT_POD_INDEX from the pod's "
                f"{STS_INDEX_LABEL} label (each pod then writes {base}-ORDINAL), or at one "
                "replica; docs/kubernetes.md 'Multi-pod workloads'",
                details={"kind": kind, "replicas": replicas},
            )
        if not _sets_index(template) or literal:
            raise errors.NotSupported(
                f"{name} has {replicas} wrapped replicas but its container does not set "
                f"{POD_INDEX_ENV} from the pod's ordinal: they would all write the one "
                f"lineage {base}",
                hint=f"add to the wrapped container: env {POD_INDEX_ENV} valueFrom.fieldRef."
                f"fieldPath: metadata.labels['{STS_INDEX_LABEL}'] (Kubernetes >= 1.28); "
                "docs/kubernetes.md 'Multi-pod workloads'",
                details={"kind": kind, "replicas": replicas},
            )


def pending_indexes(raw: Obj) -> list[int]:
    """The indexes an Indexed Job starts when it runs: the first ``parallelism`` indexes that
    have not completed (pkg/controller/job/indexed_job_utils.go firstPendingIndexes)."""
    parallelism, completions, _ = job_shape(raw.get("spec") or {})
    done: set[int] = set()
    for part in str((raw.get("status") or {}).get("completedIndexes") or "").split(","):
        first, _, last = part.partition("-")
        if first.isdigit():
            done.update(range(int(first), int(last if last.isdigit() else first) + 1))
    return [i for i in range(completions or 0) if i not in done][:parallelism]


def workload_lineages(kind: str, raw: Obj, pods: list[Obj]) -> list[str]:
    """Every lineage a wrapped workload's pods write or will write: one per index of an
    Indexed Job, per ordinal of an indexed StatefulSet, else its base; plus those of its
    live pods."""
    base = workload_base(raw)
    found: list[str] = []
    if base:
        spec = raw.get("spec") or {}
        _, completions, indexed = job_shape(spec)
        if kind == "Job" and indexed:
            found += [pod_lineage(base, {JOB_INDEX_ENV: str(i)}) for i in range(completions or 0)]
        elif kind == "StatefulSet" and _sets_index(template_of(raw)):
            found += [pod_lineage(base, {POD_INDEX_ENV: str(i)}) for i in range(replicas_of(raw))]
        else:
            found.append(base)
    for p in pods:
        lineage = lineage_of(p)
        if lineage and lineage not in found:
            found.append(lineage)
    return found


def job_lineages_to_restore(raw: Obj) -> list[str]:
    """The lineages a resumed Job's first pods write: one per pending index of an Indexed Job,
    else its base lineage."""
    base = workload_base(raw)
    if not base:
        return []
    _, _, indexed = job_shape(raw.get("spec") or {})
    if not indexed:
        return [base]
    return [pod_lineage(base, {JOB_INDEX_ENV: str(i)}) for i in pending_indexes(raw)]
