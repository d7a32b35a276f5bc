"""Plans and steps of the Kubernetes backend's actions (see ``backend`` for what each does).

Every step is one API request or one wait, named, with JSON-able args. The mutating ones
(``patch``, ``create_pod``, ``delete_pod``, ``evict``) are sent once with ``dryRun=All``
while planning (``preview``): the server validates and authorizes them and answers the
objects as they would be, which the plan carries in ``scope["dry_run"]``; so a preview shows
exactly what would change, and a missing RBAC permission is reported before anything runs.
A step the server would refuse in the state the plan starts from (a Job's template change
while it runs, see ``jobs``) carries ``deferred`` and is shown as validated when reached.
``run_step`` re-validates every name it is given (a journal could be edited) before it
reaches a URL. Values of the form ``$STEP.FIELD`` are filled in by the service.

Checkpoints go through ``pods/exec`` into the wrapped container
(``python -m core.backends.kubernetes.incontainer checkpoint LINEAGE``), which asks the
wrapper (the container's entrypoint) over its control socket and prints the manifest of the
checkpoint it published on the checkpoint volume.
"""

from __future__ import annotations

import copy
import json
import re
import time
from typing import TYPE_CHECKING, Any

import structlog

from core import actions as catalogue
from core import errors
from core.backends.base import PlanDraft, ProgressFn
from core.backends.kubernetes import ids, inventory, jobs, lineages
from core.backends.kubernetes.connection import Op
from core.backends.kubernetes.lineages import (
    CONTAINER_ANNOTATION,
    LINEAGE_ANNOTATION,
    REPLICAS_ANNOTATION,
    lineage_of,
)
from core.model import Action, PlanStep

if TYPE_CHECKING:
    from core.backends.kubernetes.backend import KubernetesBackend

log = structlog.get_logger("clawpoint.kubernetes")
Obj = dict[str, Any]

__all__ = ["CONTAINER_ANNOTATION", "LINEAGE_ANNOTATION", "REPLICAS_ANNOTATION", "lineage_of"]
FLOOR_ANNOTATION = "clawpoint.io/min-replicas"
MUTATING = frozenset({"patch", "create_pod", "delete_pod", "evict"})
_TERMINAL = ("Succeeded", "Failed")

# How each kind is suspended and resumed (a merge patch of the object itself).
SUSPEND: dict[str, tuple[Obj, Obj]] = {
    "Job": ({"spec": {"suspend": True}}, {"spec": {"suspend": False}}),
    "Workload": ({"spec": {"active": False}}, {"spec": {"active": True}}),
    "PyTorchJob": ({"spec": {"runPolicy": {"suspend": True}}}, {"spec": {"runPolicy": {"suspend": False}}}),
    "TFJob": ({"spec": {"runPolicy": {"suspend": True}}}, {"spec": {"runPolicy": {"suspend": False}}}),
    "MPIJob": ({"spec": {"runPolicy": {"suspend": True}}}, {"spec": {"runPolicy": {"suspend": False}}}),
    "TrainJob": ({"spec": {"suspend": True}}, {"spec": {"suspend": False}}),
    "RayJob": ({"spec": {"suspend": True}}, {"spec": {"suspend": False}}),
    "RayCluster": ({"spec": {"suspend": True}}, {"spec": {"suspend": False}}),
    "InferenceService": (
        {"metadata": {"annotations": {"serving.kserve.io/stop": "true"}}},
        {"metadata": {"annotations": {"serving.kserve.io/stop": None}}},
    ),
}  # fmt: skip
SCALED = ("Deployment", "StatefulSet")


def _cli(action: Action) -> str:
    """The CLI command of an action (``clawpoint nodes undrain``), from the catalogue."""
    return catalogue.command(action, catalogue.Interface.CLI)


def step(step_name: str, op: str, description: str, /, **args: Any) -> PlanStep:
    return PlanStep(name=step_name, op=op, args=args, description=description)


# ----- reading pods -------------------------------------------------------------------------
def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def container_of(pod: Obj) -> str:
    wanted = (meta(pod).get("annotations") or {}).get(CONTAINER_ANNOTATION)
    names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
    if wanted and wanted in names:
        return str(wanted)
    if not names:
        raise errors.InvalidInput(f"pod {meta(pod).get('name')} has no containers")
    return names[0]


def live(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in _TERMINAL and not meta(pod).get(
        "deletionTimestamp"
    )


def owner_kind(pod: Obj) -> str | None:
    for o in meta(pod).get("ownerReferences") or []:
        if o.get("controller"):
            return str(o.get("kind"))
    return None


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def pods_of(b: KubernetesBackend, ref: ids.WorkloadRef, raw: Obj) -> list[Obj]:
    """The live pods of a workload (itself for a Pod)."""
    kind = ref.kind.kind
    if kind == "Pod":
        return [raw] if live(raw) else []
    if kind == "Job":
        sel = f"batch.kubernetes.io/job-name={ref.name}"
    elif kind in SCALED:
        labels = ((raw.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if not labels:
            return []
        sel = _selector({str(k): str(v) for k, v in labels.items()})
    else:
        return []
    return [p for p in b.list_pods(ref.namespace, label_selector=sel) if live(p)]


_WRAPPER_ARGV = re.compile(r"(^|[\s/])clawpoint\s+run(\s|$)|-m\s+core\.cli\s+run(\s|$)")


def runs_wrapper(pod: Obj) -> bool | None:
    """Whether the wrapped container's ``command``/``args`` start clawpoint's wrapper
    (``clawpoint run`` or ``python -m core.cli run``, also inside a shell line); None when
    the spec sets neither, so the image's entrypoint decides and only the container knows."""
    spec = pod.get("spec") or {}
    name = container_of(pod) if spec.get("containers") else ""
    container: Obj = next((c for c in spec.get("containers") or [] if c.get("name") == name), {})
    argv = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
    if not container.get("command"):
        return None  # the image's ENTRYPOINT runs (args, if any, are its arguments)
    return bool(_WRAPPER_ARGV.search(" ".join(argv)))


def _require_wrapped(pod: Obj) -> str:
    lineage = lineage_of(pod)
    where = f"pod {meta(pod).get('namespace')}/{meta(pod).get('name')}"
    if not lineage:
        raise errors.NotSupported(
            f"{where} does not run under the clawpoint wrapper (no clawpoint.io/lineage "
            "annotation)",
            hint="run its container with the wrapper as entrypoint and a checkpoint volume "
            "(deploy/kubernetes/example-job.yaml), or make it a cooperative app",
        )
    if runs_wrapper(pod) is False:
        # Annotated as wrapped, but the command shown is something else: the exec into it
        # would find no wrapper to ask. Refused here instead of failing after the wait.
        raise errors.NotSupported(
            f"{where} is annotated {LINEAGE_ANNOTATION}={lineage} but its container "
            f"{container_of(pod)!r} does not run the wrapper (its command is not "
            "`clawpoint run ...` or `python -m core.cli run ...`)",
            code="kubernetes-wrapper-missing",
            hint="start the container with `clawpoint run --name LINEAGE -- <your command>` "
            "(spec.containers[].command), or remove the annotation",
        )
    return lineage


def image_warnings(spec: Obj) -> list[str]:
    """A warning per container whose image is not pinned by digest: the target node may
    pull another image, and CRIU restores files by path and checks them."""
    return [
        f"container {c.get('name')!r} runs image {c.get('image')!r}, not pinned by digest "
        "(name@sha256:...): the target node may pull a different image than the one "
        "checkpointed, and the restore fails if files the process had open differ"
        for c in spec.get("containers") or []
        if "@sha256:" not in str(c.get("image") or "")
    ]


# ----- affinity -----------------------------------------------------------------------------
def with_placement(spec: Obj, *, to: str | None, away_from: list[str]) -> Obj:
    """A pod spec pinned to ``to`` or kept off ``away_from`` (required node affinity on
    ``kubernetes.io/hostname``); ``nodeName`` and a hostname ``nodeSelector`` cleared so the
    scheduler places it."""
    out = copy.deepcopy(spec)
    out.pop("nodeName", None)
    # A pin to the old node by hostname would contradict the new placement.
    selector = dict(out.get("nodeSelector") or {})
    if (to or away_from) and selector.pop("kubernetes.io/hostname", None) is not None:
        if selector:
            out["nodeSelector"] = selector
        else:
            out.pop("nodeSelector", None)
    if to:
        expr = {"key": "kubernetes.io/hostname", "operator": "In", "values": [to]}
    elif away_from:
        expr = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": sorted(away_from)}
    else:
        return out
    affinity = out.setdefault("affinity", {})
    node_aff = affinity.setdefault("nodeAffinity", {})
    # The pod's own required terms stay (terms are ORed, a term's expressions ANDed: the
    # placement is ANDed into each); only their hostname expressions are replaced.
    own = (node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    ) or [{}]
    terms = []
    for term in own:
        kept = [
            e
            for e in term.get("matchExpressions") or []
            if e.get("key") != "kubernetes.io/hostname"
        ]
        terms.append({**term, "matchExpressions": [*kept, expr]})
    node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    return out


# ----- step builders ------------------------------------------------------------------------
def checkpoint_step(b: KubernetesBackend, pod: Obj, *, stop: bool, prefix: str = "") -> PlanStep:
    lineage = _require_wrapped(pod)
    m = meta(pod)
    return step(
        f"{prefix}checkpoint",
        "exec_checkpoint",
        f"exec into pod {m['namespace']}/{m['name']}: the wrapper checkpoints {lineage} to the "
        "checkpoint volume" + (", then stops its payload" if stop else ", leaving it running"),
        namespace=m["namespace"],
        pod=m["name"],
        container=container_of(pod),
        lineage=lineage,
        stop=stop,
        timeout_s=b.cfg.checkpoint_timeout_s,
    )


def patch_step(
    name: str, ref_kind: str, namespace: str, obj_name: str, patch: Obj, description: str, *,
    subresource: str = "",
) -> PlanStep:  # fmt: skip
    return step(
        name,
        "patch",
        description,
        kind=ref_kind,
        namespace=namespace,
        name=obj_name,
        patch=patch,
        subresource=subresource,
    )


def wait_pods_gone_step(
    b: KubernetesBackend, name: str, namespace: str, selector: str, what: str
) -> PlanStep:
    return step(
        name,
        "wait_pods_gone",
        f"wait until {what} has no pod left",
        namespace=namespace,
        selector=selector,
        timeout_s=b.cfg.checkpoint_timeout_s,
    )


def wait_restored_step(
    b: KubernetesBackend, name: str, namespace: str, selector: str, lineage: str, after: str | int
) -> PlanStep:
    return step(
        name,
        "wait_restored",
        f"wait until a pod ({selector}) runs and its wrapper restored {lineage} from a "
        "checkpoint at least as new as the one just taken",
        namespace=namespace,
        selector=selector,
        lineage=lineage,
        min_seq=after,
        timeout_s=b.cfg.start_timeout_s,
    )


def _scope(b: KubernetesBackend, ref: ids.WorkloadRef, node: str | None = None) -> Obj:
    return {"namespace": ref.namespace, "kind": ref.kind.kind, "node": node}


# ----- plans --------------------------------------------------------------------------------
def plan_checkpoint(b: KubernetesBackend, ref: ids.WorkloadRef, raw: Obj, params: Obj) -> PlanDraft:
    pods = [p for p in pods_of(b, ref, raw) if lineage_of(p)]
    if not pods:
        raise errors.Conflict(
            f"{ref} has no running pod under the clawpoint wrapper to checkpoint",
            hint="start it (resume) or check that its pods carry the clawpoint.io/lineage annotation",
        )
    stop = bool(params.get("stop"))
    steps = [
        checkpoint_step(b, p, stop=stop, prefix=f"{meta(p)['name']}-" if len(pods) > 1 else "")
        for p in pods
    ]
    return PlanDraft(
        steps=steps,
        summary=f"checkpoint {ref} ({len(pods)} pod(s))"
        + (" and stop it" if stop else ", leaving it running"),
        expected_pause_s=None if stop else 1.0,
        saves="the full process state of each wrapped pod, on the checkpoint volume",
        rollback="nothing to roll back: a checkpoint only adds an image",
        scope=_scope(b, ref, (raw.get("spec") or {}).get("nodeName")),
    )


def plan_preempt(b: KubernetesBackend, ref: ids.WorkloadRef, raw: Obj, params: Obj) -> PlanDraft:
    kind = ref.kind.kind
    steps: list[PlanStep] = []
    pods = pods_of(b, ref, raw)
    wrapped = [p for p in pods if lineage_of(p)]
    for p in wrapped:
        steps.append(checkpoint_step(b, p, stop=False, prefix=f"{meta(p)['name']}-"))
    workload = jobs.kueue_workload(b, raw) if kind == "Job" else None
    if workload is not None:
        # Kueue owns the Job's spec.suspend: deactivate its Workload instead.
        wl = jobs.kueue_ref(workload)
        what = f"deactivate its Kueue Workload {wl.name} (Kueue evicts it and suspends the Job)"
        steps.append(
            patch_step("suspend", "Workload", wl.namespace, wl.name, SUSPEND["Workload"][0], what)
        )
    elif kind in SUSPEND:
        patch = SUSPEND[kind][0]
        what = "suspend it"
    elif kind in SCALED:
        replicas = int((raw.get("spec") or {}).get("replicas", 1) or 0)
        if replicas == 0:
            raise errors.Conflict(f"{ref} is already scaled to zero", hint="resume it instead")
        patch = {
            "metadata": {"annotations": {REPLICAS_ANNOTATION: str(replicas)}},
            "spec": {"replicas": 0},
        }
        what = f"scale it from {replicas} to 0 (the count is kept in {REPLICAS_ANNOTATION})"
    else:
        raise errors.NotSupported(
            f"a bare Pod cannot be suspended ({ref})",
            hint="migrate it, checkpoint it with stop, or run it as a Job",
        )
    if workload is None:
        steps.append(patch_step("suspend", kind, ref.namespace, ref.name, patch, what))
    if pods and kind == "Job":
        steps.append(
            wait_pods_gone_step(
                b,
                "wait_stopped",
                ref.namespace,
                f"batch.kubernetes.io/job-name={ref.name}",
                str(ref),
            )
        )
    elif pods and kind in SCALED:
        labels = ((raw.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        steps.append(
            wait_pods_gone_step(b, "wait_stopped", ref.namespace, _selector(labels), str(ref))
        )
    return PlanDraft(
        steps=steps,
        summary=f"preempt {ref}: checkpoint its wrapped pods, then {what}",
        saves="each wrapped pod's state on the checkpoint volume; the wrapper restores it on resume",
        rollback=f"resume it: {_cli(Action.RESUME)} {ref}",
        scope=_scope(b, ref),
    )


def plan_resume(b: KubernetesBackend, ref: ids.WorkloadRef, raw: Obj, params: Obj) -> PlanDraft:
    kind = ref.kind.kind
    to = b.target_node(params.get("to"))
    steps: list[PlanStep] = []
    workload = jobs.kueue_workload(b, raw) if kind == "Job" else None
    patch_kind, patch_name = kind, ref.name
    if kind == "Job" and to and workload is None:
        # Pre-flight: the Job's next pods would be scheduled there.
        template = ((raw.get("spec") or {}).get("template") or {}).get("spec") or {}
        b.preflight(template, to=to, away=[], what=str(ref))
    if workload is not None:
        if to:
            jobs.refuse_kueue_move(b, raw, f"resume it on {to}")
        patch_kind, patch_name = "Workload", jobs.kueue_ref(workload).name
        patch = copy.deepcopy(SUSPEND["Workload"][1])
        what = f"reactivate its Kueue Workload {patch_name} (Kueue admits it again and unsuspends the Job)"
    elif kind in SUSPEND:
        patch = copy.deepcopy(SUSPEND[kind][1])
        if kind == "Job" and to:
            if not jobs.suspended(raw):
                raise errors.Conflict(
                    f"{ref} runs: resume --to moves a suspended Job",
                    hint=f"migrate it instead: {_cli(Action.MIGRATE)} {ref} --to {ids.PREFIX}{to}",
                )
            # The server takes a template change only while suspended and never started:
            # clear startTime through jobs/status first, then place it, then unsuspend.
            steps += jobs.retarget_steps(raw, to=to, away_from=[], prefix="", defer=False)
        what = "unsuspend it" + (f" on {to}" if to else "")
    elif kind in SCALED:
        replicas = int(
            ((raw.get("metadata") or {}).get("annotations") or {}).get(REPLICAS_ANNOTATION, "1")
        )
        patch = {
            "metadata": {"annotations": {REPLICAS_ANNOTATION: None}},
            "spec": {"replicas": replicas},
        }
        what = f"scale it back to {replicas}"
    else:
        raise errors.NotSupported(f"{ref} cannot be resumed", hint="migrate a bare Pod instead")
    steps.append(patch_step("resume", patch_kind, ref.namespace, patch_name, patch, what))
    if kind == "Job":
        steps += _job_restore_waits(b, ref, raw)
    return PlanDraft(
        steps=steps,
        summary=f"resume {ref}: {what}",
        saves="nothing new: the wrapper restores the newest good checkpoint",
        rollback=f"preempt it again: {_cli(Action.PREEMPT)} {ref}",
        scope=_scope(b, ref, to),
    )


def restore_floor(b: KubernetesBackend, lineage: str) -> int | None:
    """The seq a restored pod of ``lineage`` must restore at least: its newest good
    checkpoint's (the wrapper skips bad ones); None when the volume holds none. Without the
    checkpoint volume mounted here (no k8s.checkpoint_dir) nothing is known: 0."""
    if b.store() is None:
        return 0
    good = b.newest_good(lineage)
    return good.seq if good is not None else None


def _job_restore_waits(b: KubernetesBackend, ref: ids.WorkloadRef, raw: Obj) -> list[PlanStep]:
    """A wait per pod the resumed Job starts (one per pending index of an Indexed Job), each
    until that pod runs restored from its own lineage's newest good checkpoint. Refused when
    some of those lineages have a checkpoint and others none: those pods would start from
    scratch beside pods that restore, and the Job's state would be half lost."""
    wanted = lineages.job_lineages_to_restore(raw)
    floors = {lineage: restore_floor(b, lineage) for lineage in wanted}
    missing = sorted(lineage for lineage, seq in floors.items() if seq is None)
    if missing and len(missing) < len(wanted):
        raise errors.Conflict(
            f"{ref}: no good checkpoint of {', '.join(missing)} (the other pods of the Job "
            "have one): resuming would start those pods from scratch",
            hint="restore the missing checkpoints to the checkpoint volume, or delete and "
            "recreate the Job to start every pod over; to see what is there: clawpoint "
            f"checkpoints {ref}",
            details={"missing": missing},
        )
    sel = f"batch.kubernetes.io/job-name={ref.name}"
    several = len(wanted) > 1
    return [
        wait_restored_step(
            b, f"{lineage}-wait_restored" if several else "wait_restored", ref.namespace, sel,
            lineage, seq,
        )
        for lineage, seq in floors.items()
        if seq is not None
    ]  # fmt: skip


def restarts(pod: Obj) -> bool:
    """Whether the kubelet starts the pod's containers again after they exit: restartPolicy
    Always (the API default of a pod) or OnFailure (the wrapper's exit code after a stop is
    not promised to be 0)."""
    return ((pod.get("spec") or {}).get("restartPolicy") or "Always") != "Never"


def _move_pod_steps(
    b: KubernetesBackend,
    pod: Obj,
    *,
    to: str | None,
    away: list[str],
    prefix: str,
    take_checkpoint: bool = True,
) -> list[PlanStep]:
    """Checkpoint-and-stop a wrapped bare pod, recreate it elsewhere so its wrapper restores
    that checkpoint, then delete the old pod (only once the new one runs from it)."""
    m = meta(pod)
    lineage = _require_wrapped(pod)
    ns, old = m["namespace"], m["name"]
    new_name = b.next_pod_name(old)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": new_name,
            "namespace": ns,
            "labels": dict(m.get("labels") or {}),
            "annotations": dict(m.get("annotations") or {}),
        },
        "spec": with_placement(pod.get("spec") or {}, to=to, away_from=away),
    }
    steps: list[PlanStep] = []
    after: str | int = b.newest_seq(lineage)
    where = f"on {to}" if to else f"off {', '.join(away)}"
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
            step(f"{prefix}create", "create_pod", f"create pod {ns}/{new_name} {where} (same spec; its wrapper restores {lineage})", namespace=ns, body=body),
            wait_restored_step(b, f"{prefix}wait_restored", ns, f"metadata.name={new_name}", lineage, f"${prefix}checkpoint.seq"),
        ]  # fmt: skip
    if take_checkpoint:
        steps.append(checkpoint_step(b, pod, stop=True, prefix=prefix))
        steps.append(
            step(f"{prefix}wait_ended", "wait_pod_ended", f"wait until pod {ns}/{old} has stopped",
                 namespace=ns, name=old, timeout_s=b.cfg.checkpoint_timeout_s)
        )  # fmt: skip
        after = f"${prefix}checkpoint.seq"
    steps += [
        step(f"{prefix}create", "create_pod", f"create pod {ns}/{new_name} {where} (same spec; its wrapper restores {lineage})", namespace=ns, body=body),
        wait_restored_step(b, f"{prefix}wait_restored", ns, f"metadata.name={new_name}", lineage, after),
        step(f"{prefix}delete_old", "delete_pod", f"delete the old pod {ns}/{old}", namespace=ns, name=old, grace_s=None if take_checkpoint else 0),
    ]  # fmt: skip
    return steps


def _move_job_steps(
    b: KubernetesBackend,
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
        _require_wrapped(p)
    return jobs.move_steps(b, job, pods, to=to, away=away, prefix=prefix)


def plan_migrate(b: KubernetesBackend, ref: ids.WorkloadRef, raw: Obj, params: Obj) -> PlanDraft:
    pods = [p for p in pods_of(b, ref, raw) if (p.get("status") or {}).get("phase") == "Running"]
    if not pods:
        raise errors.Conflict(
            f"{ref} has no running pod to migrate", hint="list its pods; resume it first"
        )
    pod = pods[0]
    source = str((pod.get("spec") or {}).get("nodeName") or "")
    to = b.target_node(params.get("to"), away_from=source)
    if ref.kind.kind not in ("Pod", "Job"):
        raise errors.NotSupported(
            f"migrate moves wrapped Pods and Jobs, not {ref.kind.kind}",
            hint="preempt and resume it, or drain its node",
        )
    _require_wrapped(pod)
    # Pre-flight, before any step stops anything: the target tolerates and fits the pod.
    spec = (
        pod.get("spec") or {}
        if ref.kind.kind == "Pod"
        else ((raw.get("spec") or {}).get("template") or {}).get("spec") or {}
    )
    fits = b.preflight(
        spec, to=to, away=[source], what=str(ref), pod=(meta(pod)["namespace"], meta(pod)["name"])
    )
    if ref.kind.kind == "Pod":
        steps = _move_pod_steps(b, pod, to=to, away=[source], prefix="")
    else:
        wrapped = [p for p in pods if lineage_of(p)] or [pod]
        steps = _move_job_steps(b, raw, wrapped, to=to, away=[source], prefix="")
    warnings = image_warnings(spec)
    return PlanDraft(
        steps=steps,
        summary=f"migrate {ref} from {source} to {to or 'another node'} through a checkpoint"
        + ("" if to else f" (nodes that fit: {', '.join(fits)})")
        + "".join(f". Warning: {w}" for w in warnings),
        expected_pause_s=None,
        saves="the pod's full state: the new pod's wrapper restores the checkpoint just taken",
        rollback=f"migrate it back: {_cli(Action.MIGRATE)} {ref} --to {ids.PREFIX}{source}",
        scope={**_scope(b, ref, source), "fits": fits, "warnings": warnings},
    )


def floor_of(b: KubernetesBackend, raw: Obj) -> int:
    own = (meta(raw).get("annotations") or {}).get(FLOOR_ANNOTATION)
    try:
        return max(b.cfg.min_replicas, int(own)) if own is not None else b.cfg.min_replicas
    except ValueError:
        return b.cfg.min_replicas


def plan_scale(b: KubernetesBackend, ref: ids.WorkloadRef, raw: Obj, params: Obj) -> PlanDraft:
    kind = ref.kind.kind
    replicas = params.get("replicas")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise errors.InvalidInput(
            f"scale needs replicas, a whole number >= 0 (got {replicas!r})",
            hint="pass --replicas N",
        )
    lineages.check_identities(kind, raw, pods=replicas)
    floor = floor_of(b, raw)
    if replicas < floor:
        raise errors.PolicyDenied(
            f"scaling {ref} to {replicas} would go below its floor of {floor} replicas",
            hint=f"scale to {floor} or more; the floor is k8s.min_replicas or the "
            f"workload's {FLOOR_ANNOTATION} annotation",
            details={"floor": floor, "replicas": replicas},
        )
    if kind in SCALED:
        current = int((raw.get("spec") or {}).get("replicas", 1) or 0)
        s = patch_step(
            "scale",
            kind,
            ref.namespace,
            ref.name,
            {"spec": {"replicas": replicas}},
            f"set replicas {current} -> {replicas}",
            subresource="scale",
        )
    elif kind == "Job":
        current = int((raw.get("spec") or {}).get("parallelism", 1) or 0)
        s = patch_step(
            "scale",
            kind,
            ref.namespace,
            ref.name,
            {"spec": {"parallelism": replicas}},
            f"set parallelism {current} -> {replicas}",
        )
    else:
        raise errors.NotSupported(f"scale changes Deployments, StatefulSets and Jobs, not {kind}", hint="scale its owner")  # fmt: skip
    return PlanDraft(
        steps=[s],
        summary=f"scale {ref} from {current} to {replicas} (floor {floor})",
        saves="nothing: scaling down removes pods the controller picks",
        rollback=f"scale it back: {_cli(Action.SCALE)} {ref} --replicas {current}",
        scope=_scope(b, ref),
    )


REASON_ANNOTATION = inventory.CORDON_REASON_ANNOTATION


def _cordon_step(node: str, reason: str, description: str) -> PlanStep:
    patch: Obj = {"spec": {"unschedulable": True}}
    if reason:
        patch["metadata"] = {"annotations": {REASON_ANNOTATION: reason}}
    s = patch_step("cordon", "Node", "", node, patch, description)
    s.args["reason"] = reason
    return s


def plan_drain(b: KubernetesBackend, node: str, params: Obj) -> PlanDraft:
    from core.backends.kubernetes import nodes  # builds on this module

    to = b.target_node(params.get("to"), away_from=node)
    save = params.get("save", True) is not False
    force = bool(params.get("force"))
    reason = str(params.get("reason") or "")
    steps: list[PlanStep] = [_cordon_step(node, reason, f"cordon {node}: nothing new lands there")]
    moved, evicted = 0, 0
    warnings: list[str] = []
    evictions: list[PlanStep] = []  # after the moves: a budget that blocks one moves nothing
    jobs_moved: set[tuple[str, str]] = set()  # a Job moves once, with every pod it has
    left: list[str] = []  # DaemonSet and mirror pods (kubectl drain leaves them too)
    forced: list[str] = []  # evicted only because of force
    unforced: list[tuple[str, str]] = []
    for pod in b.list_pods(None, field_selector=f"spec.nodeName={node}"):
        if not live(pod):
            continue
        why_left = nodes.left_alone(pod)
        if why_left:
            left.append(f"{nodes.name_of(pod)}: {why_left}")
            continue
        m = meta(pod)
        prefix = f"{m['namespace']}-{m['name']}-"
        # A wrapped pod saves itself: moved through a checkpoint (a bare or Job pod, with
        # save), or checkpointing on SIGTERM (its emptyDir is the wrapper's scratch).
        wrapped = bool(lineage_of(pod))
        moved_kind = owner_kind(pod) in (None, "Job")
        why_force = nodes.needs_force(pod, wrapped=wrapped, moved=save and wrapped and moved_kind)
        if why_force:
            if not force:
                unforced.append((nodes.name_of(pod), why_force))
                continue
            forced.append(f"{nodes.name_of(pod)}: {why_force}")
        if save and lineage_of(pod) and owner_kind(pod) in (None, "Job"):
            _require_wrapped(pod)
            spec = _spec_to_move(b, pod)
            b.preflight(spec, to=to, away=[node], what=f"pod {m['namespace']}/{m['name']}",
                        pod=(m["namespace"], m["name"]))  # fmt: skip
            warnings += image_warnings(spec)
        if save and lineage_of(pod) and owner_kind(pod) is None:
            steps += _move_pod_steps(b, pod, to=to, away=[node], prefix=prefix)
            moved += 1
        elif save and lineage_of(pod) and owner_kind(pod) == "Job":
            job_name = next(
                str(o["name"]) for o in m.get("ownerReferences") or [] if o.get("controller")
            )
            if (m["namespace"], job_name) in jobs_moved:
                continue
            jobs_moved.add((m["namespace"], job_name))
            job_ref = ids.WorkloadRef(ids.kind_named("Job"), m["namespace"], job_name)
            job = b.read_raw(job_ref)
            lineages.check_identities("Job", job)
            job_pods = [
                p for p in pods_of(b, job_ref, job)
                if lineage_of(p) and (p.get("status") or {}).get("phase") == "Running"
            ] or [pod]  # fmt: skip
            workload = jobs.kueue_workload(b, job)
            if workload is not None and to is None:
                # Through Kueue: the node is cordoned, so its new admission lands elsewhere.
                steps += jobs.kueue_requeue_steps(b, job, workload, job_pods, prefix=prefix)
            else:
                steps += _move_job_steps(b, job, job_pods, to=to, away=[node], prefix=prefix)
            moved += 1
        else:
            evictions.append(
                step(f"{prefix}evict", "evict", f"evict pod {m['namespace']}/{m['name']} (honouring its PodDisruptionBudget)",
                     namespace=m["namespace"], name=m["name"], wait_s=b.cfg.eviction_wait_s)
            )  # fmt: skip
            evicted += 1
    if unforced:
        raise nodes.refuse_unforced(node, unforced)
    steps += evictions
    not_handled, visible = nodes.outside_scope(b, node)
    steps.append(nodes.check_drained_step(b, node, visible=visible))
    where = f" to {to}" if to else ""
    scope_ns = ", ".join(b.conn.scoped_namespaces or [])
    notes = ""
    if not_handled:
        notes += (
            f"; NOT HANDLED (outside {scope_ns}): {', '.join(not_handled)}: the drain reports "
            "the node not drained while they run"
        )
    if not visible:
        notes += (
            f"; these credentials cannot list pods outside {scope_ns}: pods of other "
            "namespaces on the node are unknown, so the node cannot be reported drained"
        )
    if forced:
        notes += f"; forced (their work is lost): {', '.join(forced)}"
    return PlanDraft(
        steps=steps,
        summary=f"drain {node}: cordon it, move {moved} wrapped workload(s){where} through "
        f"checkpoints, evict {evicted} other pod(s) through the Eviction API"
        + (
            ""
            if save
            else " (save=false: wrapped pods are evicted too, without a checkpoint first)"
        )
        + notes
        + "".join(f". Warning: {w}" for w in warnings),
        saves="every wrapped workload's state (restored elsewhere); evicted pods restart per their controllers"
        if save
        else "only what each wrapper saves on SIGTERM within the grace period",
        rollback=f"undrain it: {_cli(Action.UNDRAIN_NODE)} {ids.PREFIX}{node}",
        scope={
            "node": node,
            "not_handled": not_handled,
            "other_namespaces_visible": visible,
            "left": left,
            "forced": forced,
            "warnings": warnings,
        },
    )


def _spec_to_move(b: KubernetesBackend, pod: Obj) -> Obj:
    """The spec the moved pod's copy is made from: its own (a bare pod) or its Job's
    template (the Job controller makes the next pod from it)."""
    if owner_kind(pod) != "Job":
        return pod.get("spec") or {}
    m = meta(pod)
    job_name = next(str(o["name"]) for o in m.get("ownerReferences") or [] if o.get("controller"))
    job = b.read_raw(ids.WorkloadRef(ids.kind_named("Job"), m["namespace"], job_name))
    return ((job.get("spec") or {}).get("template") or {}).get("spec") or {}


def plan_cordon(b: KubernetesBackend, node: str, params: Obj) -> PlanDraft:
    if b.node_detail(node).unschedulable:
        raise errors.Conflict(
            f"node {node} is already cordoned",
            hint=f"undrain it first: {_cli(Action.UNDRAIN_NODE)} {ids.PREFIX}{node}",
        )
    reason = str(params.get("reason") or "")
    return PlanDraft(
        steps=[_cordon_step(node, reason, f"cordon {node}: nothing new lands there; what runs stays")],
        summary=f"cordon {node}",
        rollback=f"undrain it: {_cli(Action.UNDRAIN_NODE)} {ids.PREFIX}{node}",
        scope={"node": node},
    )  # fmt: skip


def plan_undrain(b: KubernetesBackend, node: str, params: Obj) -> PlanDraft:
    if not b.node_detail(node).unschedulable:
        raise errors.Conflict(
            f"node {node} is not cordoned or drained: nothing to undo",
            hint="undrain a node that was drained or cordoned",
        )
    patch: Obj = {
        "spec": {"unschedulable": None},
        "metadata": {"annotations": {REASON_ANNOTATION: None}},
    }
    from core.backends.kubernetes import nodes  # builds on this module

    kept = nodes.without_out_of_service(nodes.read_node(b, node))
    if kept is not None:  # fenced by a failover: back in service once repaired (KEP-2268)
        patch["spec"]["taints"] = kept
    return PlanDraft(
        steps=[patch_step("uncordon", "Node", "", node, patch, f"uncordon {node}")],
        summary=f"undrain {node}: it takes pods again",
        rollback=f"drain it again: {_cli(Action.DRAIN_NODE)} {ids.PREFIX}{node}",
        scope={"node": node},
    )  # fmt: skip


def plan_failover(b: KubernetesBackend, node: str, only: set[str] | None, params: Obj) -> PlanDraft:
    """Restore the wrapped workloads of a node that is down or tainted for interruption
    from their newest good checkpoints, elsewhere (``only``: pod names to limit it to)."""
    detail = b.node_detail(node)
    if detail.ready and detail.disruption != "interruption":
        raise errors.Conflict(
            f"node {node} is Ready and has no interruption taint: nothing to fail over",
            hint="migrate or drain it instead (those take a fresh checkpoint first)",
        )
    if b.store() is None:
        raise errors.InvalidInput(
            "failover needs k8s.checkpoint_dir: the checkpoint volume as mounted here, "
            "to find each workload's newest good checkpoint",
            hint="mount the checkpoint PVC here and point the checkpoint directory setting of the "
            "[k8s] section at it (docs/kubernetes.md)",
        )
    to = b.target_node(params.get("to"), away_from=node)
    steps: list[PlanStep] = []
    warnings: list[str] = []
    if detail.ready:
        if params.get("fenced"):
            raise errors.InvalidInput(
                f"node {node} is Ready: fenced applies to a lost (NotReady) node only",
                hint="leave out fenced: a Ready node with a notice is failed over as it is",
            )
        # A spot notice on a Ready node: the node is alive, so it is not fenced (the
        # out-of-service taint would tell Kubernetes it is shut down and detach its volumes);
        # its pods are stopped through the API and their wrappers checkpoint on SIGTERM.
        fencing: Obj = {"node": node, "by": "not needed", "why": "the node is Ready (a notice)"}
    else:
        from core.backends.kubernetes import nodes  # builds on this module

        # Before any pod of it is deleted or recreated elsewhere (refused while it is alive).
        steps, fencing = nodes.fence_steps(b, node, bool(params.get("fenced")))
    fence_count = len(steps)
    for pod in b.list_pods(None, field_selector=f"spec.nodeName={node}"):
        m = meta(pod)
        if (pod.get("status") or {}).get("phase") in _TERMINAL or not lineage_of(pod):
            continue
        if only is not None and m["name"] not in only:
            continue
        lineage = _require_wrapped(pod)
        if b.newest_good(lineage) is None:
            raise errors.Conflict(
                f"{lineage} (pod {m['namespace']}/{m['name']}) has no good checkpoint to restore",
                hint="it can only be restarted from scratch (resume with fresh)",
            )
        prefix = f"{m['namespace']}-{m['name']}-"
        if owner_kind(pod) in (None, "Job"):
            spec = _spec_to_move(b, pod)
            b.preflight(spec, to=to, away=[node], what=f"pod {m['namespace']}/{m['name']}",
                        pod=(m["namespace"], m["name"]))  # fmt: skip
            warnings += image_warnings(spec)
        if owner_kind(pod) == "Job":
            job_name = next(
                str(o["name"]) for o in m.get("ownerReferences") or [] if o.get("controller")
            )
            job_ref = ids.WorkloadRef(ids.kind_named("Job"), m["namespace"], job_name)
            lineages.check_identities("Job", b.read_raw(job_ref))
            steps += [
                step(f"{prefix}delete_old", "delete_pod", f"delete pod {m['namespace']}/{m['name']} on the lost node (grace 0: its node is gone)",
                     namespace=m["namespace"], name=m["name"], grace_s=0),
                wait_restored_step(b, f"{prefix}wait_restored", m["namespace"], f"batch.kubernetes.io/job-name={job_name}", lineage, restore_floor(b, lineage) or 0),
            ]  # fmt: skip
        elif owner_kind(pod) is None:
            steps += _move_pod_steps(
                b, pod, to=to, away=[node], prefix=prefix, take_checkpoint=False
            )
    if len(steps) == fence_count:
        raise errors.Conflict(
            f"no wrapped workload to fail over on {node}", hint="list the workloads on it"
        )
    back = (
        ""
        if detail.ready
        else f"; once {node} is repaired, undrain it (removes the out-of-service taint, "
        f"uncordons it): {_cli(Action.UNDRAIN_NODE)} {ids.PREFIX}{node}"
    )
    return PlanDraft(
        steps=steps,
        summary=f"fail over the wrapped workloads of {node} ({'not Ready' if not detail.ready else 'interruption notice'}) "
        f"from their newest good checkpoints{f' onto {to}' if to else ''}; fencing: {fencing['why']}"
        + "".join(f". Warning: {w}" for w in warnings),
        saves="the newest good checkpoint of each; work since it is lost",
        rollback="nothing to undo: the old pods were on a lost node" + back,
        scope={"node": node, "fencing": fencing, "warnings": warnings},
    )


# ----- requests -----------------------------------------------------------------------------
def _kind_api(b: KubernetesBackend, kind: str) -> ids.WorkloadKind | None:
    return None if kind == "Node" else ids.kind_named(kind)


def mutate(b: KubernetesBackend, op: str, args: Obj, *, dry_run: bool) -> Obj:
    """One mutating request (``dryRun=All`` when asked); the server's answer as JSON."""
    extra: Obj = {"dry_run": "All"} if dry_run else {}
    conn = b.conn
    ns = str(args.get("namespace") or "")
    if ns:
        ids.check_namespace(ns)
    if op == "patch":
        kind, name, patch, sub = (
            str(args["kind"]),
            ids.check_name(str(args["name"])),
            args["patch"],
            str(args.get("subresource") or ""),
        )
        if not isinstance(patch, dict):
            raise errors.InvalidInput("a patch must be a JSON object")
        if kind == "Node":
            core = conn.api("CoreV1Api")
            return conn.call_json(
                Op("patch", "nodes", "", None, name), core.patch_node, name, patch, **extra
            )
        wk = ids.kind_named(kind)
        res = f"{wk.plural}/{sub}" if sub else wk.plural
        opn = Op("patch", res, wk.group, ns, name)
        if wk.builtin:
            api_name, method = {
                "Job": ("BatchV1Api", "patch_namespaced_job"),
                "Deployment": ("AppsV1Api", "patch_namespaced_deployment"),
                "StatefulSet": ("AppsV1Api", "patch_namespaced_stateful_set"),
                "Pod": ("CoreV1Api", "patch_namespaced_pod"),
            }[wk.kind]
            if sub == "scale":
                method += "_scale"
            kw = dict(extra)
            if sub == "status":
                # jobs/status: clearing startTime before a move, as a JSON merge patch
                # (RFC 7386: null removes the field), the same for every client and kind
                method += "_status"
                kw["_content_type"] = "application/merge-patch+json"
            return conn.call_json(opn, getattr(conn.api(api_name), method), name, ns, patch, **kw)
        version = b.inventory.served_versions().get(wk.kind)
        if version is None:
            raise errors.NotFound(
                f"this cluster does not serve {wk.kind}", hint="install its operator"
            )
        custom = conn.api("CustomObjectsApi")
        return conn.call_json(
            opn,
            custom.patch_namespaced_custom_object,
            wk.group,
            version,
            ns,
            wk.plural,
            name,
            patch,
            **extra,
        )
    core = conn.api("CoreV1Api")
    if op == "create_pod":
        body = args["body"]
        ids.check_name(str(meta(body).get("name", "")))
        return conn.call_json(
            Op("create", "pods", "", ns), core.create_namespaced_pod, ns, body, **extra
        )
    if op == "delete_pod":
        name = ids.check_name(str(args["name"]))
        grace = args.get("grace_s")
        kw = dict(extra)
        if grace is not None:
            kw["grace_period_seconds"] = int(grace)
        return conn.call_json(
            Op("delete", "pods", "", ns, name), core.delete_namespaced_pod, name, ns, **kw
        )
    if op == "evict":
        name = ids.check_name(str(args["name"]))
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
        }
        return conn.call_json(
            Op("create", "pods/eviction", "", ns, name),
            core.create_namespaced_pod_eviction,
            name,
            ns,
            body,
            **extra,
        )
    raise errors.InvalidInput(f"unknown Kubernetes step {op!r}")


def _trim(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    (out.get("metadata") or {}).pop("managedFields", None)
    return out


def preview(b: KubernetesBackend, steps: list[PlanStep]) -> list[Obj]:
    """Each mutating step sent with ``dryRun=All``: what the server says would change.

    A 403 raises (the plan cannot run; the error names the permission). A refusal the step
    would wait on (a PodDisruptionBudget) is shown as ``refused`` instead of failing the plan."""
    out: list[Obj] = []
    for s in steps:
        if s.op not in MUTATING:
            continue
        entry: Obj = {"step": s.name, "op": s.op, "request": describe(s)}
        if s.args.get("deferred"):
            # The server would refuse it in the state the plan starts from (a running Job's
            # template); it is validated when the steps before it have run.
            entry["deferred"] = str(s.args["deferred"])
            out.append(entry)
            continue
        try:
            entry["object"] = _trim(mutate(b, s.op, s.args, dry_run=True))
        except errors.Conflict as exc:
            if exc.code != "kubernetes-disruption-budget":
                raise
            entry["refused"] = exc.message
        out.append(entry)
    return out


def describe(s: PlanStep) -> str:
    a = s.args
    if s.op == "patch":
        where = f"{a['namespace']}/" if a.get("namespace") else ""
        sub = f"/{a['subresource']}" if a.get("subresource") else ""
        return f"PATCH {a['kind']} {where}{a['name']}{sub} {json.dumps(a['patch'], sort_keys=True)}"
    if s.op == "create_pod":
        return f"CREATE Pod {a['namespace']}/{meta(a['body']).get('name')}"
    if s.op == "delete_pod":
        return f"DELETE Pod {a['namespace']}/{a['name']}"
    return f"EVICT Pod {a['namespace']}/{a['name']}"


# ----- running steps ------------------------------------------------------------------------
def run_step(b: KubernetesBackend, op: str, args: Obj, progress: ProgressFn) -> Obj:
    if op in MUTATING:
        if op == "evict":
            return _evict(b, args, progress)
        try:
            result = mutate(b, op, args, dry_run=False)
        except errors.NotFound:
            if op == "delete_pod":
                return {"deleted": args["name"], "already_gone": True}
            raise
        except errors.Conflict as exc:
            if op == "create_pod" and exc.code == "kubernetes-alreadyexists":
                return {"pod": meta(args["body"]).get("name"), "already_created": True}
            raise
        return {
            "name": meta(result).get("name"),
            "resourceVersion": meta(result).get("resourceVersion"),
        }
    if op == "exec_checkpoint":
        return _exec_checkpoint(b, args)
    if op == "wait_pods_gone":
        ns, sel = ids.check_namespace(str(args["namespace"])), str(args["selector"])
        b.wait_until(
            f"the pods {sel} to stop",
            float(args["timeout_s"]),
            lambda: not b.list_pods(ns, label_selector=sel),
        )
        return {"stopped": True}
    if op == "wait_pod_ended":
        ns, name = ids.check_namespace(str(args["namespace"])), ids.check_name(str(args["name"]))

        def ended() -> bool:
            pods = b.list_pods(ns, field_selector=f"metadata.name={name}")
            return not pods or (pods[0].get("status") or {}).get("phase") in _TERMINAL

        b.wait_until(f"pod {ns}/{name} to stop", float(args["timeout_s"]), ended)
        return {"ended": True}
    if op == "wait_restored":
        return _wait_restored(b, args, progress)
    if op in ("check_node_drained", "wait_lease_expired"):
        from core.backends.kubernetes import nodes  # builds on this module

        if op == "check_node_drained":
            return nodes.run_check_drained(b, args)
        return nodes.run_wait_lease_expired(b, args)
    raise errors.InvalidInput(f"unknown Kubernetes step {op!r}", hint="re-plan the action")


def exec_in(
    b: KubernetesBackend, ns: str, pod: str, container: str, argv: list[str], timeout_s: float
) -> tuple[int, str, str]:
    """Run ``argv`` in a container through ``pods/exec``; (exit code, stdout, stderr)."""
    from kubernetes.stream import stream

    core = b.conn.api("CoreV1Api")
    op = Op("create", "pods/exec", "", ns, pod)

    def run() -> tuple[int, str, str]:
        resp = stream(
            core.connect_get_namespaced_pod_exec, pod, ns, command=argv, container=container,
            stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False,
        )  # fmt: skip
        try:
            resp.run_forever(timeout=timeout_s)
            out, err = resp.read_stdout() or "", resp.read_stderr() or ""
            code = resp.returncode
        finally:
            resp.close()
        return (1 if code is None else int(code)), out, err

    return _call_exec(b, op, run)


def _call_exec(b: KubernetesBackend, op: Op, fn: Any) -> tuple[int, str, str]:
    from core.backends.kubernetes.connection import translate

    try:
        result: tuple[int, str, str] = fn()
        return result
    except Exception as exc:
        mapped = translate(exc, op, where=b.conn.host)
        if isinstance(mapped, errors.ClawpointError):
            raise mapped from exc
        raise errors.BackendUnavailable(
            f"exec into the pod failed ({op.describe()}): {mapped}",
            hint="check that the API server is reachable, then retry",
        ) from exc


def _wrapper_error(out: str, err: str, code: int, what: str) -> errors.ClawpointError:
    try:
        data = json.loads(err.strip().splitlines()[-1])
    except (ValueError, IndexError):
        data = {}
    if isinstance(data, dict) and data.get("error"):
        from core.wrapper.control import error_from

        return error_from(data)
    return errors.OperationFailed(
        f"{what} failed (exit {code}): {(err or out).strip()[-500:]}",
        hint="check that the container runs clawpoint's wrapper as its entrypoint and that "
        "k8s.exec_python names its interpreter",
    )


def _exec_checkpoint(b: KubernetesBackend, args: Obj) -> Obj:
    ns, pod = ids.check_namespace(str(args["namespace"])), ids.check_name(str(args["pod"]))
    container = ids.check_name(str(args["container"]), what="container name")
    lineage = ids.check_name(str(args["lineage"]), what="lineage")
    argv = [*b.cfg.exec_python, "-m", "core.backends.kubernetes.incontainer", "checkpoint", lineage]
    if args.get("stop"):
        argv.append("--stop")
    code, out, err = exec_in(b, ns, pod, container, argv, float(args.get("timeout_s", 600)))
    if code != 0:
        raise _wrapper_error(out, err, code, f"the checkpoint of {lineage} in pod {ns}/{pod}")
    info = json.loads(out.strip().splitlines()[-1])
    return {
        "checkpoint": f"{ids.BACKEND}:{lineage}@{info['seq']}",
        "seq": int(info["seq"]),
        "lineage": lineage,
    }


def _seq_of(checkpoint_id: str) -> int:
    """``LINEAGE@SEQ`` (or ``LINEAGE/SEQ``) -> SEQ; -1 when there is none."""
    for sep in ("@", "/"):
        head, found, tail = checkpoint_id.rpartition(sep)
        if found and head and tail.isdigit():
            return int(tail)
    return -1


def _pod_lineage(pod: Obj) -> str | None:
    try:
        return lineage_of(pod)
    except errors.InvalidInput:
        return None  # an index the wrapper refuses too: that pod restores nothing


def _wait_restored(b: KubernetesBackend, args: Obj, progress: ProgressFn) -> Obj:
    ns, sel, lineage = (
        ids.check_namespace(str(args["namespace"])),
        str(args["selector"]),
        ids.check_name(str(args["lineage"])),
    )
    min_seq = int(args.get("min_seq") or 0)
    found: Obj = {}

    def restored() -> bool:
        field = sel if sel.startswith("metadata.name=") else None
        pods = (
            b.list_pods(ns, field_selector=field) if field else b.list_pods(ns, label_selector=sel)
        )
        for pod in pods:
            if (pod.get("status") or {}).get("phase") != "Running" or not live(pod):
                continue
            if _pod_lineage(pod) != lineage:
                continue  # another pod of the workload: its wrapper serves its own lineage
            code, out, _err = exec_in(
                b, ns, meta(pod)["name"], container_of(pod),
                [*b.cfg.exec_python, "-m", "core.backends.kubernetes.incontainer", "status", lineage], 120,
            )  # fmt: skip
            if code != 0:
                continue
            status = json.loads(out.strip().splitlines()[-1])
            if not status.get("running") or not status.get("pid"):
                continue  # the wrapper serves its socket before it has restored: not yet
            seq = _seq_of(str((status.get("restore") or {}).get("from") or ""))
            source = str((status.get("restore") or {}).get("from") or "")
            if seq < 0 and min_seq > 0:
                raise errors.OperationFailed(
                    f"pod {ns}/{meta(pod)['name']} started without restoring {lineage}",
                    hint="check that it mounts the checkpoint volume and its wrapper's log",
                )
            if seq >= min_seq:
                found.update(
                    pod=meta(pod)["name"],
                    node=(pod.get("spec") or {}).get("nodeName"),
                    restored_from=source,
                )
                return True
        return False

    b.wait_until(
        f"a pod of {lineage} to run restored from its checkpoint",
        float(args["timeout_s"]),
        restored,
    )
    progress(1, 1, f"{lineage} runs on {found.get('node')} from {found.get('restored_from')}")
    return found


def _evict(b: KubernetesBackend, args: Obj, progress: ProgressFn) -> Obj:
    """Evict through the API; a PodDisruptionBudget refusal is waited on for ``wait_s``, then
    reported (Conflict naming the budget). Never a plain delete instead."""
    deadline = time.monotonic() + float(args.get("wait_s") or 0)
    while True:
        try:
            mutate(b, "evict", args, dry_run=False)
            return {"evicted": args["name"]}
        except errors.NotFound:
            return {"evicted": args["name"], "already_gone": True}
        except errors.Conflict as exc:
            if exc.code != "kubernetes-disruption-budget" or time.monotonic() >= deadline:
                raise
            progress(0, None, f"waiting on a PodDisruptionBudget: {exc.details.get('budget', '')}")
            time.sleep(b.cfg.poll_interval_s)


def _contains(current: Any, patch: Any) -> bool:
    """Whether a merge patch's values are already in ``current`` (None = absent)."""
    if isinstance(patch, dict):
        cur = current if isinstance(current, dict) else {}
        return all(
            (k not in cur or cur[k] in (None, False)) if v is None else _contains(cur.get(k), v)
            for k, v in patch.items()
        )
    return bool(current == patch)


def _read_for_patch(b: KubernetesBackend, args: Obj) -> Obj:
    kind, name = str(args["kind"]), ids.check_name(str(args["name"]))
    if kind == "Node":
        core = b.conn.api("CoreV1Api")
        return b.conn.call_json(Op("get", "nodes", "", None, name), core.read_node, name)
    return b.read_raw(
        ids.WorkloadRef(ids.kind_named(kind), ids.check_namespace(str(args["namespace"])), name)
    )


def recover_step(b: KubernetesBackend, op: str, args: Obj) -> Obj | None:
    """After a crash: the output of a step that took effect, read from the cluster, else None."""
    if op == "patch" and isinstance(args.get("patch"), dict):
        current = _read_for_patch(b, args)
        if _contains(current, args["patch"]):
            return {"name": args["name"], "already_applied": True}
        return None
    if op == "create_pod":
        name = str(meta(args.get("body") or {}).get("name", ""))
        ns = ids.check_namespace(str(args["namespace"]))
        if b.list_pods(ns, field_selector=f"metadata.name={ids.check_name(name)}"):
            return {"pod": name, "already_created": True}
    if op == "delete_pod":
        ns = ids.check_namespace(str(args["namespace"]))
        name = ids.check_name(str(args["name"]))
        if not b.list_pods(ns, field_selector=f"metadata.name={name}"):
            return {"deleted": name, "already_gone": True}
    return None
