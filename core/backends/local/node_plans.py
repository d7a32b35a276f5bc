"""The local backend's plans on nodes (drain, cordon, undrain) and on checkpoints (delete),
entries of ``plans.PLANS``.

Each takes a ``LocalContext`` (never the backend class) and the catalogue's parameter model
for its action. Read-only: a plan names the steps, ``steps`` runs them. Limits: nodes are
the virtual ones of the ``[local]`` configuration; deletion is re-checked under the store's
lock when it runs (``planning.last_good``).
"""

from __future__ import annotations

from core import errors
from core.actions import CordonParams, DrainParams, NoParams, undo_step
from core.backends.base import PlanDraft
from core.backends.local.common import _LIVE, NAME
from core.backends.local.context import LocalContext
from core.backends.local.planning import last_good, pick_target
from core.backends.local.step_args import (
    CheckpointArgs,
    DeleteCheckpointArgs,
    SetNodeArgs,
    StartArgs,
    WorkloadArgs,
    step,
)
from core.model import Action, PlanScope, PlanStep, WorkloadInfo


def plan_delete(ctx: LocalContext, checkpoint_id: str, params: NoParams) -> PlanDraft:
    ckpt = ctx.store.get(checkpoint_id)
    rec = ctx.registry.get(ckpt.lineage)
    # Protected by goodness, not age: the newest checkpoint that verifies (newer corrupt
    # ones are found, marked and skipped here), whatever lies above it. Execution asks
    # again, under the store's lock (``check_deletable`` and the delete step).
    protected = last_good(ctx, ckpt.id) is not None
    return PlanDraft(
        steps=[
            step(
                "delete",
                "delete_checkpoint",
                DeleteCheckpointArgs(checkpoint_id=ckpt.id),
                f"delete checkpoint {NAME}:{ckpt.id}",
            )
        ],
        summary=f"Delete checkpoint {NAME}:{ckpt.id} ({ckpt.size_bytes / 2**20:.0f} MiB)",
        saves="nothing; the image is removed for good",
        rollback="none: a deleted checkpoint cannot be recovered",
        scope=PlanScope(
            backend=NAME, labels=rec.labels if rec else {}, newest_of_live_workload=protected
        ),
    )


def plan_drain(ctx: LocalContext, node: str, params: DrainParams) -> PlanDraft:
    info = ctx.get_node(node)
    save = params.save
    steps: list[PlanStep] = []
    running = [w for w in ctx.workloads() if w.node == node and w.state in _LIVE]
    targets: list[str] = []
    for w in running:
        if save:
            dest = pick_target(ctx, exclude={node}, requested=params.to)
            targets.append(dest)
            steps += evacuate(w, dest)
        else:
            steps.append(
                step(
                    f"terminate-{w.name}",
                    "terminate",
                    WorkloadArgs(workload=w.name),
                    f"terminate {w.id} without saving",
                )
            )
    steps.append(
        step(
            "cordon",
            "set_node",
            SetNodeArgs(
                node=node, schedulable=False, reason=params.reason or "drained by clawpoint"
            ),
            f"mark {info.id} unschedulable",
        )
    )
    onto = f" onto {params.to}" if targets and params.to else ""
    return PlanDraft(
        steps=steps,
        summary=f"Drain {info.id}: "
        + (
            f"move {len(running)} workload(s) off it{onto}"
            if save
            else f"kill {len(running)} workload(s) on it"
        )
        + ", then cordon it",
        saves="the full state of every workload on it" if save else "nothing: running work is lost",
        rollback=f"return it to service: {undo_step(Action.UNDRAIN_NODE, info.id)}",
        scope=PlanScope(
            backend=NAME,
            node=node,
            node_labels=info.labels,
            workloads=[w.id for w in running],
            targets=targets,
        ),
    )


def evacuate(w: WorkloadInfo, dest: str | None) -> list[PlanStep]:
    """Save ``w`` and stop it, then restore it on ``dest``; with no ``dest``, it stays
    stopped with its state saved (resume it later). Never a step that loses its work."""
    steps = [
        step(
            f"checkpoint-{w.name}",
            "checkpoint",
            CheckpointArgs(workload=w.name, stop=True),
            f"checkpoint {w.id} and stop it",
        )
    ]
    if dest is not None:
        steps.append(
            step(
                f"start-{w.name}",
                "start",
                StartArgs(
                    workload=w.name, node=dest, restore_from=f"$checkpoint-{w.name}.checkpoint_id"
                ),
                f"restore {w.id} on {dest}",
            )
        )
    return steps


def plan_cordon(ctx: LocalContext, node: str, params: CordonParams) -> PlanDraft:
    info = ctx.get_node(node)
    if not info.schedulable:
        raise errors.Conflict(
            f"{info.id} is already {info.state}: it takes no new workloads",
            hint=f"nothing to do; {errors.step('list_nodes')} shows each node's state",
        )
    return PlanDraft(
        steps=[
            step(
                "cordon",
                "set_node",
                SetNodeArgs(
                    node=node, schedulable=False, reason=params.reason or "cordoned by clawpoint"
                ),
                f"mark {info.id} unschedulable; its workloads keep running",
            )
        ],
        summary=f"Cordon {info.id}: nothing new lands there; "
        f"{len(info.workloads)} workload(s) keep running",
        saves="nothing to save: no workload moves",
        rollback=f"return it to service: {undo_step(Action.UNDRAIN_NODE, info.id)}",
        scope=PlanScope(backend=NAME, node=node, node_labels=info.labels),
    )


def plan_undrain(ctx: LocalContext, node: str, params: NoParams) -> PlanDraft:
    info = ctx.get_node(node)
    if info.schedulable:
        raise errors.Conflict(
            f"{info.id} is not drained: it already takes workloads",
            hint=f"nothing to undo; {errors.step('list_nodes')} shows each node's state",
        )
    return PlanDraft(
        steps=[
            step(
                "uncordon",
                "set_node",
                SetNodeArgs(node=node, schedulable=True, reason=""),
                f"mark {info.id} schedulable again",
            )
        ],
        summary=f"Undrain {info.id}: return it to service (new workloads may land there)",
        saves="nothing to save: no workload moves",
        rollback=f"drain it again: {undo_step(Action.DRAIN_NODE, info.id)}",
        scope=PlanScope(backend=NAME, node=node, node_labels=info.labels),
    )
