"""Moving batch/v1 Jobs the way kube-apiserver accepts it, and Jobs that Kueue admits.

A Job's pod template is immutable except its scheduling directives (node affinity,
nodeSelector, tolerations, template labels and annotations, scheduling gates), and those
change only while the Job **as stored** is suspended **and** ``status.startTime`` is nil
(kubernetes/kubernetes pkg/registry/batch/job/strategy.go, ``validationOptionsForJob``;
pkg/apis/batch/validation/validation.go, ``validatePodTemplateUpdate``). A Job that ran keeps
its ``startTime`` when suspended (pkg/controller/job/job_controller.go, ``syncJob``, on 1.34;
KEP-5440 makes later controllers clear it themselves), so a move is:

1. checkpoint the wrapped pod (it keeps running);
2. ``spec.suspend: true`` (the controller deletes the pod; the wrapper checkpoints again on
   SIGTERM);
3. wait until the Job has no pod left;
4. ``status.startTime: null`` through the ``jobs/status`` subresource (RBAC ``jobs/status``
   patch), which the server allows only while the Job is suspended, as Kueue and JobSet do;
5. the template's node affinity (and a hostname ``nodeSelector`` dropped);
6. ``spec.suspend: false``; the controller sets a new ``startTime`` and makes a pod there;
7. wait until that pod runs restored from the checkpoint.

Steps 4 and 5 would be refused while the Job runs, so a plan's dry-run preview does not send
them: they carry ``deferred`` (why) and are validated by the server when reached. A crash
between steps is recovered step by step by reading the Job back (``recover_step``).

Kueue: a Job with the ``kueue.x-k8s.io/queue-name`` label belongs to Kueue, which owns its
``spec.suspend`` (a write there is undone or fights admission) and its template's
nodeSelector (injected at admission from the ResourceFlavor, restored on eviction;
kubernetes-sigs/kueue pkg/controller/jobframework/reconciler.go and
pkg/controller/jobs/job). Such a Job is preempted by setting its Workload's ``spec.active``
to false (Kueue evicts it with reason ``Deactivated``, suspends the Job and clears its
``startTime``) and resumed by setting it back to true (Kueue requeues and admits it again;
kubernetes-sigs/kueue#2063). A move Kueue cannot make (to a named node, or off one without
a cordon steering the new admission) is refused at plan time by name.
"""

from __future__ import annotations

from typing import Any

from core import errors
from core.backends.kubernetes import ids
from core.backends.kubernetes.builders import (
    checkpoint_step,
    patch_step,
    wait_pods_gone_step,
    wait_restored_step,
)
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.lineages import lineage_of
from core.backends.kubernetes.pods import with_placement
from core.model import PlanStep

Obj = dict[str, Any]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CLEAR_START_TIME: Obj = {"status": {"startTime": None}}
DEFERRED = (
    "validated when reached: kube-apiserver takes it only once the Job is suspended with "
    "its pods ended and status.startTime cleared, so it is not sent while the Job runs"
)


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def started(job: Obj) -> bool:
    return bool((job.get("status") or {}).get("startTime"))


def suspended(job: Obj) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def placement_patch(job: Obj, *, to: str | None, away_from: list[str]) -> Obj:
    """A merge patch of the template's scheduling directives only: required node affinity
    to ``to`` (or off ``away_from``), and a hostname ``nodeSelector`` pin dropped."""

    template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    placed = with_placement(template, to=to, away_from=away_from)
    spec: Obj = {"affinity": placed.get("affinity")}
    if template.get("nodeSelector") != placed.get("nodeSelector"):
        # merge patch: the whole map replaced, or removed (None) when nothing is left
        spec["nodeSelector"] = placed.get("nodeSelector")
    return {"spec": {"template": {"spec": spec}}}


def retarget_steps(
    job: Obj, *, to: str | None, away_from: list[str], prefix: str, defer: bool
) -> list[PlanStep]:
    """Clear ``startTime`` through ``jobs/status``, then set the template's placement.
    ``defer``: the Job is not suspended-and-ended yet when the plan is made (its preview
    would be refused), so these two are validated when reached."""

    m = _meta(job)
    ns, name = str(m["namespace"]), str(m["name"])
    where = f"on {to}" if to else f"off {', '.join(away_from)}"
    clear = patch_step(
        f"{prefix}clear_start_time",
        "Job",
        ns,
        name,
        CLEAR_START_TIME,
        f"clear Job {ns}/{name}'s status.startTime through jobs/status (the server lets "
        "a suspended Job's scheduling directives change only once it is cleared)",
        subresource="status",
    )
    place = patch_step(
        f"{prefix}place",
        "Job",
        ns,
        name,
        placement_patch(job, to=to, away_from=away_from),
        f"set Job {ns}/{name}'s template node affinity ({where}) while it is suspended",
    )
    if defer:
        clear.args["deferred"] = DEFERRED
        place.args["deferred"] = DEFERRED
    elif started(job):
        place.args["deferred"] = DEFERRED  # its preview would still see the old startTime
    return [clear, place]


def _per_pod(pods: list[Obj], prefix: str) -> list[tuple[str, Obj]]:
    """Each pod with its steps' name prefix (one pod: the prefix alone)."""
    return [(f"{prefix}{_meta(p)['name']}-" if len(pods) > 1 else prefix, p) for p in pods]


def move_steps(
    b: KubeContext,
    job: Obj,
    pods: list[Obj],
    *,
    to: str | None,
    away: list[str],
    prefix: str,
) -> list[PlanStep]:
    """The sequence in the module docstring, for a wrapped Job's running pods (each
    checkpointed into, and waited on restored from, its own lineage)."""

    m = _meta(job)
    ns, name = str(m["namespace"]), str(m["name"])
    refuse_kueue_move(b, job, "move it to another node")
    sel = f"{JOB_NAME_LABEL}={name}"
    own = _per_pod(pods, prefix)
    return [
        *(checkpoint_step(b, p, stop=False, prefix=pfx) for pfx, p in own),
        patch_step(f"{prefix}suspend", "Job", ns, name, {"spec": {"suspend": True}},
                           f"suspend Job {ns}/{name} (its pods checkpoint again on SIGTERM)"),
        wait_pods_gone_step(b, f"{prefix}wait_stopped", ns, sel, f"Job {ns}/{name}"),
        *retarget_steps(job, to=to, away_from=away, prefix=prefix, defer=True),
        patch_step(f"{prefix}unsuspend", "Job", ns, name, {"spec": {"suspend": False}},
                           f"unsuspend Job {ns}/{name}: its new pods start on the new node"),
        *(wait_restored_step(b, f"{pfx}wait_restored", ns, sel,
                                     lineage_of(p) or "", f"${pfx}checkpoint.seq")
          for pfx, p in own),
    ]  # fmt: skip


# ----- Kueue --------------------------------------------------------------------------------
def kueue_queue(job: Obj) -> str | None:
    value = (_meta(job).get("labels") or {}).get(QUEUE_LABEL)
    return str(value) if value else None


def kueue_workload(b: KubeContext, job: Obj) -> Obj | None:
    """The Workload Kueue made for ``job`` (its controller owner is the Job); None when the
    Job is not Kueue's (no queue label, or Kueue not installed: then the label is inert).
    Conflict when Kueue should have one but it is not there yet."""
    queue = kueue_queue(job)
    if queue is None or "Workload" not in b.inventory.served_versions():
        return None
    m = _meta(job)
    uid = m.get("uid")
    for wl in b.inventory.raw("Workload"):
        wm = _meta(wl)
        if wm.get("namespace") != m.get("namespace"):
            continue
        for owner in wm.get("ownerReferences") or []:
            if owner.get("kind") == "Job" and (
                owner.get("uid") == uid if uid else owner.get("name") == m.get("name")
            ):
                return wl
    raise errors.Conflict(
        f"Job {m.get('namespace')}/{m.get('name')} is queued by Kueue (LocalQueue {queue}) "
        "but has no Workload yet",
        hint="wait until Kueue has created its Workload (kubectl get workloads -n "
        f"{m.get('namespace')}), then plan again",
    )


def kueue_ref(wl: Obj) -> ids.WorkloadRef:
    wm = _meta(wl)
    return ids.WorkloadRef(
        ids.kind_named("Workload"),
        ids.check_namespace(str(wm["namespace"])),
        ids.check_name(str(wm["name"])),
    )


def refuse_kueue_move(b: KubeContext, job: Obj, what: str) -> None:
    """NotSupported, naming the Job and its Workload, for a move only Kueue may make."""
    wl = kueue_workload(b, job)
    if wl is None:
        return
    m = _meta(job)
    raise errors.NotSupported(
        f"cannot {what}: Job {m.get('namespace')}/{m.get('name')} is admitted by Kueue "
        f"(Workload {_meta(wl).get('name')}), which owns its spec.suspend and its placement",
        hint="preempt it (its Workload is deactivated) and resume it (Kueue admits it again "
        "where its ResourceFlavors allow), or drain the node (cordoned, so Kueue's new pod "
        "lands elsewhere); to choose nodes, give its LocalQueue a ResourceFlavor with those "
        "node labels",
        details={"job": f"{m.get('namespace')}/{m.get('name')}", "workload": _meta(wl).get("name")},
    )


def kueue_requeue_steps(
    b: KubeContext, job: Obj, workload: Obj, pods: list[Obj], *, prefix: str
) -> list[PlanStep]:
    """Move a Kueue Job's pods off a cordoned node through Kueue: checkpoint, deactivate its
    Workload (Kueue suspends the Job), wait for the pods to end, reactivate it (Kueue admits
    it again; the cordon keeps the new pods off the node), wait for each restore."""

    m = _meta(job)
    ns, name = str(m["namespace"]), str(m["name"])
    wl = kueue_ref(workload)
    sel = f"{JOB_NAME_LABEL}={name}"
    own = _per_pod(pods, prefix)
    return [
        *(checkpoint_step(b, p, stop=False, prefix=pfx) for pfx, p in own),
        patch_step(f"{prefix}deactivate", "Workload", wl.namespace, wl.name,
                           {"spec": {"active": False}},
                           f"deactivate Kueue Workload {wl.name} (Kueue evicts it and suspends Job {ns}/{name})"),
        wait_pods_gone_step(b, f"{prefix}wait_stopped", ns, sel, f"Job {ns}/{name}"),
        patch_step(f"{prefix}reactivate", "Workload", wl.namespace, wl.name,
                           {"spec": {"active": True}},
                           f"reactivate Kueue Workload {wl.name} (Kueue admits it again, off the cordoned node)"),
        *(wait_restored_step(b, f"{pfx}wait_restored", ns, sel,
                                     lineage_of(p) or "", f"${pfx}checkpoint.seq")
          for pfx, p in own),
    ]  # fmt: skip
