"""Plans of the node actions on Kubernetes: drain, cordon, undrain and failover (see
``backend`` for what each does). The node rules they apply (what a drain leaves alone, what
needs force, fencing) are ``nodes``'; moving each wrapped workload is ``moves``'.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core import errors
from core.actions import CordonParams, DrainParams, FailoverParams, NoParams, undo_step
from core.backends.base import PlanDraft
from core.backends.kubernetes import ids, jobs, lineages, nodes
from core.backends.kubernetes.builders import (
    REASON_ANNOTATION,
    patch_step,
    step,
    wait_restored_step,
)
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.lineages import lineage_of
from core.backends.kubernetes.moves import (
    move_job_steps,
    move_pod_steps,
    restore_floor,
    spec_to_move,
)
from core.backends.kubernetes.pods import (
    TERMINAL,
    image_warnings,
    live,
    meta,
    owner_kind,
    pods_of,
    require_wrapped,
)
from core.model import Action, PlanScope, PlanStep

Obj = dict[str, Any]


def cordon_step(node: str, reason: str, description: str, name: str = "cordon") -> PlanStep:
    patch: Obj = {"spec": {"unschedulable": True}}
    if reason:
        patch["metadata"] = {"annotations": {REASON_ANNOTATION: reason}}
    s = patch_step(name, "Node", "", node, patch, description)
    s.args["reason"] = reason
    return s


@dataclass
class DrainBody:
    """What draining one cordoned node takes: the steps that move or evict its pods, then the
    check that it is empty, and what the plan says about them."""

    steps: list[PlanStep] = field(default_factory=list)
    moved: int = 0
    evicted: int = 0
    warnings: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)  # DaemonSet and mirror pods
    forced: list[str] = field(default_factory=list)
    not_handled: list[str] = field(default_factory=list)
    visible: bool = True


def plan_drain(b: KubeContext, node: str, params: DrainParams) -> PlanDraft:

    to = b.target_node(params.to, away_from=node)
    save, force, reason = params.save, params.force, params.reason
    cordon = cordon_step(node, reason, f"cordon {node}: nothing new lands there")
    body = drain_body(b, node, to=to, away=[node], save=save, force=force)
    steps: list[PlanStep] = [cordon, *body.steps]
    moved, evicted, warnings, left, forced = (
        body.moved,
        body.evicted,
        body.warnings,
        body.left,
        body.forced,
    )
    not_handled, visible = body.not_handled, body.visible
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
        rollback=f"undrain it: {undo_step(Action.UNDRAIN_NODE, ids.PREFIX + node)}",
        scope=PlanScope(
            node=node,
            not_handled=not_handled,
            other_namespaces_visible=visible,
            left=left,
            forced=forced,
            warnings=warnings,
        ),
    )


def drain_body(
    b: KubeContext, node: str, *, to: str | None, away: list[str], save: bool, force: bool,
    check: str = "check_drained",
) -> DrainBody:  # fmt: skip
    """The steps after a node's cordon: each wrapped bare or Job pod moved through a
    checkpoint (with ``save``) off every node in ``away``, the others evicted through the
    Eviction API, then the check that nothing is left, step ``check`` (a pool's shrink
    drains several nodes in one plan)."""
    steps: list[PlanStep] = []
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
            require_wrapped(pod)
            spec = spec_to_move(b, pod)
            b.preflight(spec, to=to, away=away, what=f"pod {m['namespace']}/{m['name']}",
                        pod=(m["namespace"], m["name"]))  # fmt: skip
            warnings += image_warnings(spec)
        if save and lineage_of(pod) and owner_kind(pod) is None:
            steps += move_pod_steps(b, pod, to=to, away=away, prefix=prefix)
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
                steps += move_job_steps(b, job, job_pods, to=to, away=away, prefix=prefix)
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
    steps.append(nodes.check_drained_step(b, node, visible=visible, name=check))
    return DrainBody(steps, moved, evicted, warnings, left, forced, not_handled, visible)


def plan_cordon(b: KubeContext, node: str, params: CordonParams) -> PlanDraft:
    if b.node_detail(node).unschedulable:
        raise errors.Conflict(
            f"node {node} is already cordoned",
            hint=f"undrain it first: {undo_step(Action.UNDRAIN_NODE, ids.PREFIX + node)}",
        )
    reason = params.reason
    return PlanDraft(
        steps=[cordon_step(node, reason, f"cordon {node}: nothing new lands there; what runs stays")],
        summary=f"cordon {node}",
        rollback=f"undrain it: {undo_step(Action.UNDRAIN_NODE, ids.PREFIX + node)}",
        scope=PlanScope(node=node),
    )  # fmt: skip


def plan_undrain(b: KubeContext, node: str, params: NoParams) -> PlanDraft:
    if not b.node_detail(node).unschedulable:
        raise errors.Conflict(
            f"node {node} is not cordoned or drained: nothing to undo",
            hint="undrain a node that was drained or cordoned",
        )
    patch: Obj = {
        "spec": {"unschedulable": None},
        "metadata": {"annotations": {REASON_ANNOTATION: None}},
    }

    kept = nodes.without_out_of_service(nodes.read_node(b, node))
    if kept is not None:  # fenced by a failover: back in service once repaired (KEP-2268)
        patch["spec"]["taints"] = kept
    return PlanDraft(
        steps=[patch_step("uncordon", "Node", "", node, patch, f"uncordon {node}")],
        summary=f"undrain {node}: it takes pods again",
        rollback=f"drain it again: {undo_step(Action.DRAIN_NODE, ids.PREFIX + node)}",
        scope=PlanScope(node=node),
    )  # fmt: skip


def plan_failover(
    b: KubeContext, node: str, only: set[str] | None, params: FailoverParams
) -> PlanDraft:
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
    to = b.target_node(params.to, away_from=node)
    steps: list[PlanStep] = []
    warnings: list[str] = []
    if detail.ready:
        if params.fenced:
            raise errors.InvalidInput(
                f"node {node} is Ready: fenced applies to a lost (NotReady) node only",
                hint="leave out fenced: a Ready node with a notice is failed over as it is",
            )
        # A spot notice on a Ready node: the node is alive, so it is not fenced (the
        # out-of-service taint would tell Kubernetes it is shut down and detach its volumes);
        # its pods are stopped through the API and their wrappers checkpoint on SIGTERM.
        fencing: Obj = {"node": node, "by": "not needed", "why": "the node is Ready (a notice)"}
    else:
        # Before any pod of it is deleted or recreated elsewhere (refused while it is alive).
        steps, fencing = nodes.fence_steps(b, node, params.fenced)
    fence_count = len(steps)
    for pod in b.list_pods(None, field_selector=f"spec.nodeName={node}"):
        m = meta(pod)
        if (pod.get("status") or {}).get("phase") in TERMINAL or not lineage_of(pod):
            continue
        if only is not None and m["name"] not in only:
            continue
        lineage = require_wrapped(pod)
        if b.newest_good(lineage) is None:
            raise errors.Conflict(
                f"{lineage} (pod {m['namespace']}/{m['name']}) has no good checkpoint to restore",
                hint="it can only be restarted from scratch (resume with fresh)",
            )
        prefix = f"{m['namespace']}-{m['name']}-"
        if owner_kind(pod) in (None, "Job"):
            spec = spec_to_move(b, pod)
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
            steps += move_pod_steps(
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
        f"uncordons it): {undo_step(Action.UNDRAIN_NODE, ids.PREFIX + node)}"
    )
    return PlanDraft(
        steps=steps,
        summary=f"fail over the wrapped workloads of {node} ({'not Ready' if not detail.ready else 'interruption notice'}) "
        f"from their newest good checkpoints{f' onto {to}' if to else ''}; fencing: {fencing['why']}"
        + "".join(f". Warning: {w}" for w in warnings),
        saves="the newest good checkpoint of each; work since it is lost",
        rollback="nothing to undo: the old pods were on a lost node" + back,
        scope=PlanScope(node=node, fencing=fencing, warnings=warnings),
    )
