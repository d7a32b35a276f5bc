"""Plans of the workload actions on Kubernetes (checkpoint, preempt, resume, migrate, scale;
resize in ``resize``; see ``backend`` for what each does) and ``PLANS``, the dispatch table the backend plans and
declares its capabilities from (node actions from ``node_plans``).

Plans take ``KubeContext`` (``context``), not the backend. Each table entry resolves its
target first (a node by name, a workload by id, read once), so a wrong target is NotFound
before anything else is looked at.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from core import errors
from core.action_params import ResizeParams
from core.actions import (
    ActionParams,
    CordonParams,
    DrainParams,
    FailoverParams,
    MoveParams,
    NoParams,
    PoolSizeParams,
    ScaleParams,
    StartParams,
    undo_step,
)
from core.backends.base import PlanDraft
from core.backends.dispatch import PlanEntry
from core.backends.kubernetes import ids, jobs, lineages, node_plans, pools
from core.backends.kubernetes.builders import (
    checkpoint_step,
    patch_step,
    wait_pods_gone_step,
    wait_restored_step,
)
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.lineages import REPLICAS_ANNOTATION, lineage_of
from core.backends.kubernetes.moves import move_job_steps, move_pod_steps, restore_floor
from core.backends.kubernetes.pods import (
    SCALED,
    image_warnings,
    meta,
    pods_of,
    require_wrapped,
    selector,
)
from core.backends.kubernetes.resize import plan_resize
from core.model import Action, PlanScope, PlanStep

Obj = dict[str, Any]

FLOOR_ANNOTATION = "clawpoint.io/min-replicas"

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


def _scope(b: KubeContext, ref: ids.WorkloadRef, node: str | None = None) -> PlanScope:
    return PlanScope(namespace=ref.namespace, kind=ref.kind.kind, node=node)


def plan_checkpoint(b: KubeContext, ref: ids.WorkloadRef, raw: Obj, params: NoParams) -> PlanDraft:
    """A leave-running checkpoint; checkpoint-and-stop is ``plan_preempt``."""
    pods = [p for p in pods_of(b, ref, raw) if lineage_of(p)]
    if not pods:
        raise errors.Conflict(
            f"{ref} has no running pod under the clawpoint wrapper to checkpoint",
            hint="start it (resume) or check that its pods carry the clawpoint.io/lineage annotation",
        )
    stop = False  # the catalogue sends "stop" to preempt
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


def plan_preempt(b: KubeContext, ref: ids.WorkloadRef, raw: Obj, params: NoParams) -> PlanDraft:
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
            wait_pods_gone_step(b, "wait_stopped", ref.namespace, selector(labels), str(ref))
        )
    return PlanDraft(
        steps=steps,
        summary=f"preempt {ref}: checkpoint its wrapped pods, then {what}",
        saves="each wrapped pod's state on the checkpoint volume; the wrapper restores it on resume",
        rollback=f"resume it: {undo_step(Action.RESUME, ref)}",
        scope=_scope(b, ref),
    )


def plan_resume(b: KubeContext, ref: ids.WorkloadRef, raw: Obj, params: StartParams) -> PlanDraft:
    kind = ref.kind.kind
    to = b.target_node(params.to)
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
                    hint=f"migrate it instead: {undo_step(Action.MIGRATE, ref, to=ids.PREFIX + to)}",
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
        rollback=f"preempt it again: {undo_step(Action.PREEMPT, ref)}",
        scope=_scope(b, ref, to),
    )


def _job_restore_waits(b: KubeContext, ref: ids.WorkloadRef, raw: Obj) -> list[PlanStep]:
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


def plan_migrate(b: KubeContext, ref: ids.WorkloadRef, raw: Obj, params: MoveParams) -> PlanDraft:
    pods = [p for p in pods_of(b, ref, raw) if (p.get("status") or {}).get("phase") == "Running"]
    if not pods:
        raise errors.Conflict(
            f"{ref} has no running pod to migrate", hint="list its pods; resume it first"
        )
    pod = pods[0]
    source = str((pod.get("spec") or {}).get("nodeName") or "")
    to = b.target_node(params.to, away_from=source)
    if ref.kind.kind not in ("Pod", "Job"):
        raise errors.NotSupported(
            f"migrate moves wrapped Pods and Jobs, not {ref.kind.kind}",
            hint="preempt and resume it, or drain its node",
        )
    require_wrapped(pod)
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
        steps = move_pod_steps(b, pod, to=to, away=[source], prefix="")
    else:
        wrapped = [p for p in pods if lineage_of(p)] or [pod]
        steps = move_job_steps(b, raw, wrapped, to=to, away=[source], prefix="")
    warnings = image_warnings(spec)
    scope = _scope(b, ref, source)
    scope.fits, scope.warnings = fits, warnings
    return PlanDraft(
        steps=steps,
        summary=f"migrate {ref} from {source} to {to or 'another node'} through a checkpoint"
        + ("" if to else f" (nodes that fit: {', '.join(fits)})")
        + "".join(f". Warning: {w}" for w in warnings),
        expected_pause_s=None,
        saves="the pod's full state: the new pod's wrapper restores the checkpoint just taken",
        rollback=f"migrate it back: {undo_step(Action.MIGRATE, ref, to=ids.PREFIX + source)}",
        scope=scope,
    )


def floor_of(b: KubeContext, raw: Obj) -> int:
    own = (meta(raw).get("annotations") or {}).get(FLOOR_ANNOTATION)
    try:
        return max(b.cfg.min_replicas, int(own)) if own is not None else b.cfg.min_replicas
    except ValueError:
        return b.cfg.min_replicas


def plan_scale(b: KubeContext, ref: ids.WorkloadRef, raw: Obj, params: ScaleParams) -> PlanDraft:
    kind = ref.kind.kind
    replicas = params.replicas  # a whole number >= 0 (the catalogue checked it)
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
        rollback=f"scale it back: {undo_step(Action.SCALE, ref, replicas=current)}",
        scope=_scope(b, ref),
    )


# ----- the dispatch table -----------------------------------------------------------------
_Plan = Callable[[KubeContext, str, Any], PlanDraft]


def _refuse_unsupported(params: ActionParams) -> None:
    """What the catalogue takes but this backend does not do, refused before any lookup."""
    if getattr(params, "fresh", False):
        raise errors.NotSupported(
            "the Kubernetes backend does not start workloads from scratch (fresh)",
            hint="delete the checkpoints of the lineage, or recreate the workload yourself",
        )
    if getattr(params, "down_without_save", False):
        raise errors.NotSupported(
            "scaling down without saving is the controller's ordinary scale-down here",
            hint="leave out the option to scale down without saving",
        )


def _on_node(fn: Callable[[KubeContext, str, Any], PlanDraft]) -> _Plan:
    """A plan of one node: its name checked (NotFound) before anything else."""

    def plan(b: KubeContext, target: str, params: Any) -> PlanDraft:
        _refuse_unsupported(params)
        node = ids.parse_node_id(target)
        b.node_detail(node)  # NotFound before anything else
        return fn(b, node, params)

    return plan


def _on_workload(
    fn: Callable[[KubeContext, ids.WorkloadRef, Obj, Any], PlanDraft], *, identities: bool = True
) -> _Plan:
    """A plan of one workload, read once; its pods' identities checked unless the plan
    checks them itself (scale checks the count it would set)."""

    def plan(b: KubeContext, target: str, params: Any) -> PlanDraft:
        _refuse_unsupported(params)
        ref = ids.parse_workload_id(target)
        raw = b.read_raw(ref)
        if identities:
            lineages.check_identities(ref.kind.kind, raw)
        return fn(b, ref, raw, params)

    return plan


def _failover_workload(
    b: KubeContext, ref: ids.WorkloadRef, raw: Obj, params: FailoverParams
) -> PlanDraft:
    """Fail over one workload: its node's failover, limited to its pods."""
    pods = pods_of(b, ref, raw) or ([raw] if ref.kind.kind == "Pod" else [])
    nodes = {str((p.get("spec") or {}).get("nodeName") or "") for p in pods} - {""}
    if len(nodes) != 1:
        raise errors.Conflict(
            f"{ref} is not on one node to fail over from", hint="fail over its node instead"
        )
    names = {str(meta(p)["name"]) for p in pods}
    return node_plans.plan_failover(b, nodes.pop(), names, params)


def _failover(b: KubeContext, target: str, params: FailoverParams) -> PlanDraft:
    """A workload id (NAMESPACE/...) fails that workload over; a node name, every wrapped
    workload on the node."""
    if "/" in target:
        return _on_workload(_failover_workload)(b, target, params)
    return _on_node(lambda b, node, p: node_plans.plan_failover(b, node, None, p))(
        b, target, params
    )


PLANS: dict[Action, PlanEntry[KubeContext]] = {
    Action.CHECKPOINT: PlanEntry(_on_workload(plan_checkpoint), NoParams),
    Action.PREEMPT: PlanEntry(_on_workload(plan_preempt), NoParams),
    Action.RESUME: PlanEntry(_on_workload(plan_resume), StartParams),
    Action.MIGRATE: PlanEntry(_on_workload(plan_migrate), MoveParams),
    Action.RESIZE: PlanEntry(_on_workload(plan_resize), ResizeParams),
    Action.SCALE: PlanEntry(_on_workload(plan_scale, identities=False), ScaleParams),
    Action.FAILOVER: PlanEntry(_failover, FailoverParams),
    Action.DRAIN_NODE: PlanEntry(_on_node(node_plans.plan_drain), DrainParams),
    Action.UNDRAIN_NODE: PlanEntry(_on_node(node_plans.plan_undrain), NoParams),
    Action.CORDON_NODE: PlanEntry(_on_node(node_plans.plan_cordon), CordonParams),
    Action.SCALE_POOL: PlanEntry(pools.plan_scale_pool, PoolSizeParams),
}
