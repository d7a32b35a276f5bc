"""Plans of the Slurm backend's actions (see ``backend`` for what each does) and ``PLANS``,
the dispatch table the backend plans and declares its capabilities from.

Each plan is a list of small named steps (``steps`` runs them), each one Slurm command or
one wait, with JSON-able args built from their models (``step_args``); values of the form ``$STEP.FIELD`` are filled in by the
service from earlier outputs. Plans take ``SlurmContext`` (``context``), not the backend.
Limits: jobs not started by the sbatch helper (no lineage) cannot be checkpointed or moved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core import errors
from core.actions import (
    CordonParams,
    DrainParams,
    MoveParams,
    NoParams,
    PoolSizeParams,
    ResizeParams,
    StartParams,
    undo_step,
)
from core.backends.base import PlanDraft
from core.backends.dispatch import PlanEntry
from core.backends.slurm import pools, resize
from core.backends.slurm.context import SlurmContext
from core.backends.slurm.ids import check_reason, check_value, is_job_id
from core.backends.slurm.inventory import is_standby
from core.backends.slurm.moving import live_move as _live_move
from core.backends.slurm.moving import place as _place
from core.backends.slurm.moving import restart as _restart
from core.backends.slurm.moving import save_and_stop as _save_and_stop
from core.backends.slurm.step_args import (
    NodeStateArgs,
    RequeueArgs,
    ResumeNodeArgs,
    SignalArgs,
    WaitCheckpointArgs,
    step,
)
from core.model import (
    Action,
    NodeHealth,
    NodeInfo,
    PlanScope,
    PlanStep,
    WorkloadInfo,
    WorkloadState,
    validate_name,
)


def _scope(w: WorkloadInfo) -> PlanScope:
    return PlanScope(partition=w.partition, node=w.node, gpus=w.gpus, labels=w.labels)


def _target(b: SlurmContext, params: MoveParams, *, away_from: str | None) -> str | None:
    """The node named by ``to`` (``n2`` or ``slurm:n2``), checked to exist and take jobs."""
    wanted = params.to
    if wanted is None:
        return None
    node = b.get_node(str(wanted))
    if away_from and node.name in away_from.split(","):
        raise errors.InvalidInput(
            f"the job is already on {node.id}",
            hint=f"pass another node as {errors.arg('to')}, or omit it to let Slurm pick one",
        )
    if not node.schedulable:
        raise errors.Conflict(
            f"node {node.id} is {node.state} and takes no jobs",
            hint="pick a node that is up and not drained "
            f"({errors.step('list_nodes', backend='slurm')})",
        )
    return node.name


def plan_checkpoint(b: SlurmContext, w: WorkloadInfo, params: NoParams) -> PlanDraft:
    """A leave-running checkpoint (SIGUSR1); checkpoint-and-stop is ``plan_preempt``."""
    _require_running(w)
    lineage = b.lineage(w)
    stop = False
    sig = "USR2" if stop else "USR1"
    steps = [
        step(
            "signal",
            "signal",
            SignalArgs(job=w.name, signal=sig, lineage=lineage, owner=b.owner(w)),
            f"send SIG{sig} to the wrapper of job {w.name}",
        ),
        step(
            "wait_checkpoint",
            "wait_checkpoint",
            WaitCheckpointArgs(
                lineage=lineage,
                owner=b.owner(w),
                after_seq="$signal.after_seq",
                timeout_s=b.cfg.checkpoint_timeout_s,
            ),
            f"wait for a new checkpoint of {lineage}",
        ),
    ]
    return PlanDraft(
        steps=steps,
        summary=f"checkpoint Slurm job {w.name} ({lineage}) on {w.node}"
        + (" and stop it" if stop else ", leaving it running"),
        expected_pause_s=None if stop else 1.0,
        saves=f"the full process state of job {w.name} to the shared checkpoint directory",
        rollback="nothing to roll back: a checkpoint only adds an image",
        scope=_scope(w),
    )


def plan_preempt(b: SlurmContext, w: WorkloadInfo, params: NoParams) -> PlanDraft:
    _require_running(w)
    return PlanDraft(
        steps=_save_and_stop(b, w),
        summary=f"preempt Slurm job {w.name}: checkpoint, stop, requeue held (frees {w.node})",
        saves="the job's state; it resumes from it when released",
        rollback=f"resume it: {undo_step(Action.RESUME, f'slurm:{w.name}')}",
        scope=_scope(w),
    )


def plan_resume(b: SlurmContext, w: WorkloadInfo, params: StartParams) -> PlanDraft:
    if w.state is not WorkloadState.STOPPED and w.state is not WorkloadState.PENDING:
        raise errors.Conflict(
            f"Slurm job {w.name} is {w.state.value}, not held or pending",
            hint="only a preempted (held) or pending job can be resumed",
        )
    _require_restorable(b, w, params)
    target = _target(b, params, away_from=None)
    return PlanDraft(
        steps=_restart(b, w.name, _place(target, None)),
        summary=f"resume Slurm job {w.name}: release it and start it now"
        + (f" on {target}" if target else ""),
        saves="nothing new: the wrapper restores the newest good checkpoint",
        rollback=f"preempt it again: {undo_step(Action.PREEMPT, f'slurm:{w.name}')}",
        scope=_scope(w),
    )


def plan_migrate(b: SlurmContext, w: WorkloadInfo, params: MoveParams) -> PlanDraft:
    _require_running(w)
    source = w.node or ""
    target = _target(b, params, away_from=source)
    if b.cfg.live_handoff:  # a standby first; it falls back to the requeue by itself
        moves = _live_move(b, w, target, source)
        how = ": a standby job there takes it over (a new job id), else it is requeued"
    else:
        moves = _save_and_stop(b, w) + _restart(b, w.name, _place(target, source))
        how = ""
    return PlanDraft(
        steps=moves,
        summary=f"migrate Slurm job {w.name} off {source}"
        + (f" onto {target}" if target else " (Slurm picks the node)")
        + how,
        expected_pause_s=30.0,
        saves="the job's full state, restored by the wrapper on the new node",
        rollback=f"migrate it back: {undo_step(Action.MIGRATE, f'slurm:{w.name}', to=source)}"
        if source
        else "",
        scope=_scope(w),
    )


def plan_drain(b: SlurmContext, node: NodeInfo, params: DrainParams) -> PlanDraft:
    reason = check_reason(params.reason or "clawpoint drain")
    save = params.save
    target = _target(b, params, away_from=node.name)
    jobs = [b.get_workload(wid) for wid in node.workloads]
    wrapped = [w for w in jobs if w.labels.get("lineage") and w.state is WorkloadState.RUNNING]
    others = [w.name for w in jobs if w not in wrapped]
    steps = [
        step(
            "drain",
            "drain",
            NodeStateArgs(node=node.name, reason=reason),
            f"drain {node.name}: nothing new starts there",
        )
    ]
    if save:
        away = _place(target, node.name)
        for w in wrapped:
            if b.cfg.live_handoff:  # each to a standby job, else requeued (``handoff``)
                steps += _live_move(b, w, target, node.name, prefix="job")
            else:
                steps += _save_and_stop(b, w, "job") + _restart(b, w.name, away, prefix="job")
    note = f"; left running until they end: {', '.join(others)}" if others else ""
    live = ", each to a standby job there (new job ids), else requeued"
    return PlanDraft(
        steps=steps,
        summary=f"drain Slurm node {node.name}, moving {len(wrapped)} wrapped job(s) off"
        + (f" onto {target}" if target and save else "")
        + (live if save and wrapped and b.cfg.live_handoff else "")
        + note,
        saves="each wrapped job's state, restored on another node" if save else "",
        rollback=f"return it to service: {undo_step(Action.UNDRAIN_NODE, f'slurm:{node.name}')}",
        scope=PlanScope(node=node.name, partitions=node.partitions),
    )


def plan_cordon(b: SlurmContext, node: NodeInfo, params: CordonParams) -> PlanDraft:
    """Slurm's own drain: no new job starts there; running jobs go on until they end."""
    if not node.schedulable:
        raise errors.Conflict(
            f"Slurm node {node.name} is {node.state}: it already takes no new jobs",
            hint=f"nothing to do; {errors.step('list_nodes', backend='slurm')} shows each node's state",
        )
    steps = [
        step(
            "drain",
            "drain",
            NodeStateArgs(node=node.name, reason=check_reason(params.reason or "clawpoint cordon")),
            f"drain {node.name}: nothing new starts there; running jobs go on",
        )
    ]
    return PlanDraft(
        steps=steps,
        summary=f"cordon Slurm node {node.name}: no new job starts there; "
        f"{len(node.workloads)} job(s) keep running",
        saves="nothing to save: no job moves",
        rollback=f"return it to service: {undo_step(Action.UNDRAIN_NODE, f'slurm:{node.name}')}",
        scope=PlanScope(node=node.name, partitions=node.partitions),
    )


def plan_undrain(b: SlurmContext, node: NodeInfo, params: NoParams) -> PlanDraft:
    if node.schedulable and node.health is NodeHealth.HEALTHY:
        raise errors.Conflict(
            f"Slurm node {node.name} is {node.state}: not drained or down",
            hint=f"nothing to undo; {errors.step('list_nodes', backend='slurm')} shows each node's state",
        )
    return PlanDraft(
        steps=[
            step(
                "resume_node",
                "resume_node",
                ResumeNodeArgs(node=node.name, timeout_s=30.0),
                f"return {node.name} to service (scontrol update state=RESUME) and wait "
                "until it takes jobs",
            )
        ],
        summary=f"undrain Slurm node {node.name} ({node.state}): jobs may start there again",
        saves="nothing to save: no job moves",
        rollback=f"drain it again: {undo_step(Action.DRAIN_NODE, f'slurm:{node.name}')}",
        scope=PlanScope(node=node.name, partitions=node.partitions),
    )


def plan_failover(b: SlurmContext, w: WorkloadInfo, params: StartParams) -> PlanDraft:
    b.lineage(w)
    _require_restorable(b, w, params)
    node = w.node or ""
    target = _target(b, params, away_from=node or None)
    return PlanDraft(
        steps=_failover_steps(b, w.name, node, target),
        summary=f"fail over Slurm job {w.name}"
        + (f" from {node}" if node else "")
        + (f" onto {target}" if target else "")
        + ": requeue it elsewhere; the wrapper restores the newest good checkpoint",
        saves="nothing new: progress since the newest checkpoint is lost",
        rollback="none needed: the job restarts from its checkpoint",
        scope=_scope(w),
    )


def plan_failover_node(b: SlurmContext, node: NodeInfo, params: StartParams) -> PlanDraft:
    target = _target(b, params, away_from=node.name)
    steps: list[PlanStep] = []
    for wid in node.workloads:
        w = b.get_workload(wid)
        if w.labels.get("lineage"):
            steps += _failover_steps(b, w.name, node.name, target, prefix="job")
    if not steps:
        raise errors.NotFound(
            f"no wrapped job runs on {node.name}", hint="nothing to fail over on this node"
        )
    return PlanDraft(
        steps=steps,
        summary=f"fail over every wrapped job of node {node.name}"
        + (f" onto {target}" if target else ""),
        saves="nothing new: each job restarts from its newest checkpoint",
        scope=PlanScope(node=node.name, partitions=node.partitions),
    )


def _failover_steps(
    b: SlurmContext, job: str, node: str, target: str | None, prefix: str = ""
) -> list[PlanStep]:
    p = f"{prefix}{job}-" if prefix else ""
    steps: list[PlanStep] = []
    if node:
        steps.append(
            step(
                f"{p}node_down",
                "node_down",
                NodeStateArgs(node=check_value(node), reason="clawpoint failover"),
                f"mark {node} DOWN (its jobs end)",
            )
        )
    steps.append(
        step(f"{p}requeue", "requeue", RequeueArgs(job=job, hold=True), f"requeue job {job} held")
    )
    return steps + _restart(b, job, _place(target, node or None), prefix)


def _require_restorable(b: SlurmContext, w: WorkloadInfo, params: StartParams) -> None:
    """A restarted job's wrapper restores the newest good checkpoint of its lineage, and
    refuses to start at all when the lineage has checkpoints but none verifies (it never
    silently starts over). Refuse such a plan up front (sizes only: cheap), and refuse
    ``fresh``: starting a Slurm job over is a new submission, not a restart."""
    if is_standby(w):
        _require_running(w)  # says what a standby is
    if params.fresh:
        raise errors.NotSupported(
            f"the slurm backend cannot start job {w.name} from scratch",
            hint="cancel it and submit the command again (clawpoint slurm submit) under a new "
            "lineage",
        )
    lineage = w.labels.get("lineage")
    if not lineage or not b.cfg.checkpoint_dir:
        return
    store = b.store(b.owner(w))
    published = store.published_ids(validate_name(lineage, what="lineage"))
    if not published:
        return  # never checkpointed: the wrapper starts it as the new lineage it is
    for info in store.candidates(lineage):
        try:
            store.verify(info.id, digests=False)
            return
        except errors.CorruptCheckpoint:
            continue
    raise errors.CorruptCheckpoint(
        f"every checkpoint of {lineage} (job {w.name}) is corrupt: its wrapper would refuse "
        "to start; nothing was changed",
        hint="cancel the job and submit it again to start over (its progress is lost)",
        details={"checkpoints": published},
    )


def _require_running(w: WorkloadInfo) -> None:
    if is_standby(w):
        raise errors.Conflict(
            f"Slurm job {w.name} is the standby of a live move: it holds nothing yet",
            hint="act on the job it stands by for; the standby ends by itself without an order",
        )
    if w.state is not WorkloadState.RUNNING:
        raise errors.Conflict(
            f"Slurm job {w.name} is {w.state.value}, not running",
            hint="only a running job can be checkpointed or moved; resume it first",
        )


# ----- the dispatch table --------------------------------------------------------------
def _failover(b: SlurmContext, target: str, params: StartParams) -> PlanDraft:
    """A job id fails that job over; anything else names a node (every wrapped job on it)."""
    if is_job_id(target):
        return plan_failover(b, b.get_workload(target), params)
    return plan_failover_node(b, b.get_node(target), params)


_Plan = Callable[[SlurmContext, str, Any], PlanDraft]


def _on_job(fn: Callable[[SlurmContext, WorkloadInfo, Any], PlanDraft]) -> _Plan:
    """A plan of one job: the target is its id (NotFound before anything else)."""
    return lambda b, target, params: fn(b, b.get_workload(target), params)


def _on_node(fn: Callable[[SlurmContext, NodeInfo, Any], PlanDraft]) -> _Plan:
    """A plan of one node: the target is its name (NotFound before anything else)."""
    return lambda b, target, params: fn(b, b.get_node(target), params)


PLANS: dict[Action, PlanEntry[SlurmContext]] = {
    Action.CHECKPOINT: PlanEntry(_on_job(plan_checkpoint), NoParams),
    Action.PREEMPT: PlanEntry(_on_job(plan_preempt), NoParams),
    Action.RESUME: PlanEntry(_on_job(plan_resume), StartParams),
    Action.MIGRATE: PlanEntry(_on_job(plan_migrate), MoveParams),
    Action.REQUEUE: PlanEntry(_on_job(plan_migrate), MoveParams),
    Action.FAILOVER: PlanEntry(_failover, StartParams),
    Action.DRAIN_NODE: PlanEntry(_on_node(plan_drain), DrainParams),
    Action.CORDON_NODE: PlanEntry(_on_node(plan_cordon), CordonParams),
    Action.UNDRAIN_NODE: PlanEntry(_on_node(plan_undrain), NoParams),
    Action.SCALE_POOL: PlanEntry(pools.plan_scale_pool, PoolSizeParams),
    Action.RESIZE: PlanEntry(_on_job(resize.plan_resize), ResizeParams),
}

# Why an action is not in the table, where the reason helps the caller.
WHY_NOT: dict[Action, str] = {
    Action.SCALE: "a Slurm job has a fixed allocation; submit more jobs (or an array) instead",
}
