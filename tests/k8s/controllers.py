"""The pod-making rules of the fake Job and StatefulSet controllers (``FakeKubelet`` drives them).

Job (kubernetes/kubernetes pkg/controller/job/job_controller.go ``syncJob``/``manageJob`` and
indexed_job_utils.go), for a Job that is neither suspended nor finished:

- at most ``parallelism`` pods run at once; ``completions`` unset (defaulted only when
  ``parallelism`` is unset too, pkg/apis/batch/v1/defaults.go) is the work-queue mode: no pod
  is added once one has succeeded, and the Job completes when one has succeeded and none is
  active; with ``completions`` set, ``min(parallelism, completions - succeeded)`` pods are
  wanted and the Job completes at ``completions`` successes;
- ``completionMode: Indexed``: one pod per pending index (the lowest first,
  ``firstPendingIndexes``), each with the annotation and label
  ``batch.kubernetes.io/job-completion-index`` (``addCompletionIndexAnnotation`` /
  ``addCompletionIndexLabel``, the label under the PodIndexLabel gate, GA in 1.32), the env
  var ``JOB_COMPLETION_INDEX`` from that label through the downward API in every container
  that does not set it (``addCompletionIndexEnvVariable``), ``spec.hostname``
  ``JOBNAME-INDEX`` when the template sets none, and a name generated from ``JOBNAME-INDEX-``
  (``podGenerateNameWithIndex``); ``status.completedIndexes`` lists the succeeded indexes as
  intervals (``0-2,5``) and the Job completes when every index succeeded;
- with ``restartPolicy: OnFailure`` the running pods' container restarts count against
  ``backoffLimit`` too (``pastBackoffLimitOnFailure``);
- a failed pod is replaced (``TerminatingOrFailed``, the default pod replacement policy: a
  pod being deleted no longer counts as active) until more than ``backoffLimit`` pods failed,
  then the Job fails (condition ``Failed``, reason ``BackoffLimitExceeded``) and its active
  pods are deleted.

StatefulSet (pkg/controller/statefulset/stateful_set_control.go and stateful_set_utils.go),
``OrderedReady`` management: pods ``NAME-ORDINAL`` for ordinals ``0 .. replicas-1``, labelled
``apps.kubernetes.io/pod-index`` (and ``statefulset.kubernetes.io/pod-name``), created one at
a time in order, each only once every lower ordinal runs and is Ready; a missing (deleted)
pod is recreated with the same name; ordinals ``>= replicas`` are deleted, highest first.

Limits: no pod failure policy, ``backoffLimitPerIndex``, ``successPolicy``, exponential
back-off delays, ``activeDeadlineSeconds`` or finalizer tracking (counts are recomputed from
the pods that exist); StatefulSets have no ``Parallel`` policy, volume claim templates,
revisions or ``minReadySeconds``.
"""

from __future__ import annotations

import contextlib
import copy

from tests.k8s.emulator import status
from tests.k8s.emulator.store import Obj, Store

JOB_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
JOB_INDEX_ENV = "JOB_COMPLETION_INDEX"
STS_INDEX_LABEL = "apps.kubernetes.io/pod-index"
STS_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
_TERMINAL = ("Succeeded", "Failed")


def _phase(pod: Obj) -> str | None:
    return (pod.get("status") or {}).get("phase")


def completion_index(pod: Obj) -> int | None:
    """The pod's completion index from its annotation (``getCompletionIndex``): None when it
    is missing, not a number or negative."""
    value = (pod["metadata"].get("annotations") or {}).get(JOB_INDEX_KEY)
    try:
        index = int(str(value))
    except ValueError:
        return None
    return index if index >= 0 else None


def job_shape(spec: Obj) -> tuple[int, int | None, bool]:
    """(parallelism, completions or None for the work-queue mode, indexed)."""
    parallelism = int(spec.get("parallelism", 1))
    if "completions" in spec and spec["completions"] is not None:
        completions: int | None = int(spec["completions"])
    else:
        completions = None if "parallelism" in spec else 1
    return parallelism, completions, spec.get("completionMode") == "Indexed"


def format_indexes(indexes: set[int]) -> str:
    """Succeeded indexes as ``status.completedIndexes`` writes them (``orderedIntervals``)."""
    out: list[str] = []
    ordered = sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        first, last = ordered[i], ordered[j]
        if last == first:
            out.append(str(first))
        elif last == first + 1:
            out.append(f"{first},{last}")
        else:
            out.append(f"{first}-{last}")
        i = j + 1
    return ",".join(out)


def parse_indexes(text: str, completions: int) -> set[int]:
    """``0-2,5`` -> {0, 1, 2, 5}; parts that do not parse are skipped (``succeededIndexesFromString``)."""
    out: set[int] = set()
    for part in (text or "").split(","):
        first, _, last = part.partition("-")
        try:
            lo = int(first)
            hi = int(last) if last else lo
        except ValueError:
            continue
        out.update(range(lo, min(hi, completions - 1) + 1))
    return out


def first_pending(active: set[int], done: set[int], count: int, completions: int) -> list[int]:
    """The ``count`` lowest indexes below ``completions`` neither active nor done."""
    busy = active | done
    return [i for i in range(completions) if i not in busy][: max(0, count)]


def past_backoff_limit_on_failure(spec: Obj, pods: list[Obj]) -> bool:
    """job_controller.go ``pastBackoffLimitOnFailure``: with ``restartPolicy: OnFailure`` the
    container restarts of the Pending and Running pods count against ``backoffLimit`` (the
    sum reaching it, or any restart when it is 0, fails the Job)."""
    template_spec = (spec.get("template") or {}).get("spec") or {}
    if template_spec.get("restartPolicy") != "OnFailure":
        return False
    restarts = 0
    for p in pods:
        if _phase(p) in ("Running", "Pending"):
            st = p.get("status") or {}
            for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
                restarts += int(cs.get("restartCount") or 0)
    limit = int(spec.get("backoffLimit", 6))
    return restarts > 0 if limit == 0 else restarts >= limit


def pod_counts(pods: list[Obj]) -> Obj:
    """``status.ready`` (active pods whose Ready condition is True; JobReadyPods, GA 1.29) and
    ``status.terminating`` (pods being deleted that have not finished; JobPodReplacementPolicy,
    on by default since 1.29), as job_controller.go syncJob counts them."""
    live = [p for p in pods if _phase(p) not in _TERMINAL]
    ready = [
        p
        for p in live
        if not p["metadata"].get("deletionTimestamp")
        and any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (p.get("status") or {}).get("conditions") or []
        )
    ]
    terminating = [p for p in live if p["metadata"].get("deletionTimestamp")]
    return {"ready": len(ready), "terminating": len(terminating)}


def sync_job(store: Store, job: Obj, pods: list[Obj], st: Obj) -> tuple[Obj, list[Obj]]:
    """One sync of a running Job: creates and deletes pods; (status fields, new conditions)."""
    pods_kind = store.kinds[("", "pods")]
    spec, meta = job.get("spec") or {}, job["metadata"]
    parallelism, completions, indexed = job_shape(spec)
    active = [p for p in pods if _phase(p) not in _TERMINAL and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    succeeded = [p for p in pods if _phase(p) == "Succeeded"]
    failed = len([p for p in pods if _phase(p) == "Failed"])
    out: Obj = {"failed": failed, **pod_counts(pods)}
    conds: list[Obj] = []
    done: set[int] = set()
    if indexed and completions is not None:
        done = parse_indexes(str(st.get("completedIndexes") or ""), completions)
        done |= {i for p in succeeded if (i := completion_index(p)) is not None and i < completions}
        out["completedIndexes"] = format_indexes(done)
        out["succeeded"] = len(done)
    else:
        out["succeeded"] = len(succeeded)
    if failed > int(spec.get("backoffLimit", 6)) or past_backoff_limit_on_failure(spec, pods):
        for p in active:
            with contextlib.suppress(status.ApiError):
                store.delete(pods_kind, meta["namespace"], p["metadata"]["name"])
        out["active"] = 0
        # Since 1.31 the controller first records FailureTarget, then Failed with the same
        # reason; jobs/status refuses Failed=True without it (validation.go
        # RejectFailedJobWithoutFailureTarget).
        for kind in ("FailureTarget", "Failed"):
            conds.append(
                {"type": kind, "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit"}
            )  # fmt: skip
        return out, conds
    if completions is None:
        complete = bool(succeeded) and not active
        want = 0 if succeeded else parallelism
    else:
        complete = out["succeeded"] >= completions
        want = min(parallelism, completions - out["succeeded"])
    if complete:
        # Reaching the completions ends the pods still running (job_controller.go manageJob).
        for p in active:
            with contextlib.suppress(status.ApiError):
                store.delete(pods_kind, meta["namespace"], p["metadata"]["name"])
        out["active"] = 0
        # SuccessCriteriaMet first, then Complete (job_controller.go; jobs/status refuses
        # Complete=True without it: RejectCompleteJobWithoutSuccessCriteriaMet).
        for kind in ("SuccessCriteriaMet", "Complete"):
            conds.append(
                {"type": kind, "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods"}
            )  # fmt: skip
        return out, conds
    missing = want - len(active)
    created = 0
    if indexed and completions is not None and missing > 0:
        busy = {i for p in active if (i := completion_index(p)) is not None}
        for index in first_pending(busy, done, missing, completions):
            store.create(pods_kind, meta["namespace"], job_pod(job, index), api=True)
            created += 1
    elif missing > 0:
        for _ in range(missing):
            store.create(pods_kind, meta["namespace"], job_pod(job, None), api=True)
            created += 1
    out["active"] = len(active) + created
    return out, conds


def _owner(kind: str, api_version: str, meta: Obj) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def job_pod(job: Obj, index: int | None) -> Obj:
    """A pod of ``job`` from its template (with the Indexed additions when ``index`` is set)."""
    meta = job["metadata"]
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    labels = {
        **(tmeta.get("labels") or {}),
        "job-name": meta["name"],
        "batch.kubernetes.io/job-name": meta["name"],
    }
    annotations = dict(tmeta.get("annotations") or {})
    spec = template.get("spec") or {}
    generate = f"{meta['name']}-"
    if index is not None:
        annotations[JOB_INDEX_KEY] = str(index)
        labels[JOB_INDEX_KEY] = str(index)
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            env = c.setdefault("env", [])
            if not any(e.get("name") == JOB_INDEX_ENV for e in env):
                path = f"metadata.labels['{JOB_INDEX_KEY}']"
                env.append({"name": JOB_INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": path}}})
        if not spec.get("hostname"):
            spec["hostname"] = f"{meta['name']}-{index}"
        generate = f"{meta['name']}-{index}-"  # the server adds 5 random characters
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": generate,
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [_owner("Job", "batch/v1", meta)],
        },
        "spec": spec,
    }


# ----- StatefulSet ---------------------------------------------------------------------------
def _ready(pod: Obj) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return _phase(pod) == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conds
    )


def sts_pod(sts: Obj, ordinal: int) -> Obj:
    """Pod ``NAME-ORDINAL`` of ``sts`` (``newStatefulSetPod``: identity labels, hostname)."""
    meta = sts["metadata"]
    template = copy.deepcopy((sts.get("spec") or {}).get("template") or {})
    tmeta = template.get("metadata") or {}
    name = f"{meta['name']}-{ordinal}"
    spec = template.get("spec") or {}
    spec["hostname"] = name  # updateIdentity: hostname = pod name, subdomain = serviceName
    if (sts.get("spec") or {}).get("serviceName"):
        spec["subdomain"] = sts["spec"]["serviceName"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {
                **(tmeta.get("labels") or {}),
                STS_NAME_LABEL: name,
                STS_INDEX_LABEL: str(ordinal),
            },
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [_owner("StatefulSet", "apps/v1", meta)],
        },
        "spec": spec,
    }


def sync_statefulset(store: Store, sts: Obj, pods: list[Obj]) -> Obj:
    """One sync of a StatefulSet (OrderedReady); the status fields it publishes."""
    pods_kind = store.kinds[("", "pods")]
    meta = sts["metadata"]
    replicas = int((sts.get("spec") or {}).get("replicas", 1))
    by_ordinal: dict[int, Obj] = {}
    for p in pods:
        head, _, tail = p["metadata"]["name"].rpartition("-")
        if head == meta["name"] and tail.isdigit():
            by_ordinal[int(tail)] = p
    # Condemned ordinals go first, highest first, one at a time.
    condemned = sorted((o for o in by_ordinal if o >= replicas), reverse=True)
    if condemned:
        victim = by_ordinal[condemned[0]]
        if not victim["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(status.ApiError):
                store.delete(pods_kind, meta["namespace"], victim["metadata"]["name"])
    else:
        for ordinal in range(replicas):
            pod = by_ordinal.get(ordinal)
            if pod is None:
                store.create(pods_kind, meta["namespace"], sts_pod(sts, ordinal), api=True)
                break
            if _phase(pod) == "Failed" and not pod["metadata"].get("deletionTimestamp"):
                # A failed pod is deleted and recreated with the same identity.
                with contextlib.suppress(status.ApiError):
                    store.delete(pods_kind, meta["namespace"], pod["metadata"]["name"])
                break
            if not _ready(pod):
                break  # OrderedReady: the next ordinal waits for this one
    live = [p for o, p in by_ordinal.items() if o < replicas and _phase(p) not in _TERMINAL]
    ready = [p for p in live if _ready(p)]
    return {
        "replicas": len(live),
        "readyReplicas": len(ready),
        "availableReplicas": len(ready),
        "currentReplicas": len(live),
        "observedGeneration": meta.get("generation", 1),
    }
