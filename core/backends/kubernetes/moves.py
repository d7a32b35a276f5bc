"""Moving one wrapped workload through a checkpoint: a bare pod recreated elsewhere (live,
through a standby copy started first, where it may be: ``standby``), a Job re-placed
(``jobs``), and the checkpoint a restored pod must come back from. Used by migrate, drain
and failover. No requests here beyond the context's reads.
"""

from __future__ import annotations

from typing import Any

from core.backends.kubernetes import disruption, ids, jobs, standby
from core.backends.kubernetes.builders import checkpoint_step, step, wait_restored_step
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.pods import (
    meta,
    owner_kind,
    require_wrapped,
    restarts,
    with_placement,
)
from core.model import PlanStep

Obj = dict[str, Any]


def restore_floor(b: KubeContext, lineage: str) -> int | None:
    """The seq a restored pod of ``lineage`` must restore at least: its newest good
    checkpoint's (the wrapper skips bad ones); None when the volume holds none. Without the
    checkpoint volume mounted here (no k8s.checkpoint_dir) nothing is known: 0."""
    if b.store() is None:
        return 0
    good = b.newest_good(lineage)
    return good.seq if good is not None else None


def move_pod_steps(
    b: KubeContext,
    pod: Obj,
    *,
    to: str | None,
    away: list[str],
    prefix: str,
    take_checkpoint: bool = True,
    spec: Obj | None = None,
) -> list[PlanStep]:
    """Checkpoint-and-stop a wrapped bare pod, recreate it elsewhere so its wrapper restores
    that checkpoint, then delete the old pod (only once the new one runs from it). ``spec``:
    the copy's pod spec when it differs from the pod's (a resize's new resources)."""
    m = meta(pod)
    lineage = require_wrapped(pod)
    ns, old = m["namespace"], m["name"]
    new_name = b.next_pod_name(old)
    body = standby.without_standby({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": new_name,
            "namespace": ns,
            "labels": dict(m.get("labels") or {}),
            "annotations": disruption.without_ours(m.get("annotations")),
        },
        "spec": with_placement(spec or pod.get("spec") or {}, to=to, away_from=away),
    })  # fmt: skip
    steps: list[PlanStep] = []
    after: str | int = b.newest_seq(lineage)
    where = f"on {to}" if to else f"off {', '.join(away)}"
    same = "same spec" if spec is None else "new resources"
    if take_checkpoint and restarts(pod):
        # restartPolicy Always/OnFailure: a payload stopped in place is started again by the
        # kubelet (and its wrapper would restore the checkpoint right there), so the old pod
        # is never waited on to end: checkpoint it running, then delete it (deletion never
        # restarts; its SIGTERM makes the wrapper checkpoint once more within the grace
        # period), and only once it is gone create the copy, which restores the newest.
        policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
        return [
            checkpoint_step(b, pod, stop=False, prefix=prefix),
            step(f"{prefix}delete_old", "delete_pod", f"delete pod {ns}/{old} (restartPolicy {policy}: stopping it in place would restart it; its wrapper checkpoints again on SIGTERM)", namespace=ns, name=old, grace_s=None),
            step(f"{prefix}wait_ended", "wait_pod_ended", f"wait until pod {ns}/{old} is gone", namespace=ns, name=old, timeout_s=b.cfg.checkpoint_timeout_s),
            step(f"{prefix}create", "create_pod", f"create pod {ns}/{new_name} {where} ({same}; its wrapper restores {lineage})", namespace=ns, body=body),
            wait_restored_step(b, f"{prefix}wait_restored", ns, f"metadata.name={new_name}", lineage, f"${prefix}checkpoint.seq"),
        ]  # fmt: skip
    not_live = standby.why_not_live(b, pod) if take_checkpoint else None
    if take_checkpoint and not_live is None:
        return standby.live_move_steps(b, pod, body, where=where, prefix=prefix)
    if not_live is not None:  # the plan says why this move stops the pod before its copy
        same += f"; not a live move: {not_live}"
    if take_checkpoint:
        steps.append(checkpoint_step(b, pod, stop=True, prefix=prefix))
        steps.append(
            step(f"{prefix}wait_ended", "wait_pod_ended", f"wait until pod {ns}/{old} has stopped",
                 namespace=ns, name=old, timeout_s=b.cfg.checkpoint_timeout_s)
        )  # fmt: skip
        after = f"${prefix}checkpoint.seq"
    steps += [
        step(f"{prefix}create", "create_pod", f"create pod {ns}/{new_name} {where} ({same}; its wrapper restores {lineage})", namespace=ns, body=body),
        wait_restored_step(b, f"{prefix}wait_restored", ns, f"metadata.name={new_name}", lineage, after),
        step(f"{prefix}delete_old", "delete_pod", f"delete the old pod {ns}/{old}", namespace=ns, name=old, grace_s=None if take_checkpoint else 0),
    ]  # fmt: skip
    return steps


def move_job_steps(
    b: KubeContext,
    job: Obj,
    pods: list[Obj],
    *,
    to: str | None,
    away: list[str],
    prefix: str,
) -> list[PlanStep]:
    """Suspend, wait, clear startTime, place, unsuspend, and wait until each pod runs
    restored from its own checkpoint (``jobs``)."""
    for p in pods:
        require_wrapped(p)
    return jobs.move_steps(b, job, pods, to=to, away=away, prefix=prefix)


def spec_to_move(b: KubeContext, pod: Obj) -> Obj:
    """The spec the moved pod's copy is made from: its own (a bare pod) or its Job's
    template (the Job controller makes the next pod from it)."""
    if owner_kind(pod) != "Job":
        return pod.get("spec") or {}
    m = meta(pod)
    job_name = next(str(o["name"]) for o in m.get("ownerReferences") or [] if o.get("controller"))
    job = b.read_raw(ids.WorkloadRef(ids.kind_named("Job"), m["namespace"], job_name))
    return ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
