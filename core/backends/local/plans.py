"""The local backend's workload plans and ``PLANS``, the dispatch table it plans and declares
its capabilities from (``core.backends.dispatch``).

One function per catalogue action, each ``plan(ctx, target, params)`` with ``params`` already
the catalogue's model for it (parsed before the function runs) and ``ctx`` a
``LocalContext``, never the backend class. Node plans and checkpoint deletion are in
``node_plans``; the shared pieces (target choice, scope, pause estimate, refusals) in
``planning``. Read-only: a plan never changes a workload. Limits: a local workload is one
process tree, so it is moved, never scaled.
"""

from __future__ import annotations

from core import errors
from core.actions import (
    CordonParams,
    DrainParams,
    IntervalParams,
    MoveParams,
    NoParams,
    PoolSizeParams,
    ResizeParams,
    StartParams,
    undo_step,
)
from core.backends.base import PlanDraft
from core.backends.dispatch import PlanEntry
from core.backends.local import node_plans, pools, resize
from core.backends.local.common import _LIVE, NAME
from core.backends.local.context import LocalContext
from core.backends.local.planning import (
    cost_effect,
    estimate_pause,
    move_scope,
    move_steps,
    pick_target,
    price_note,
    require_restorable,
    require_state,
    scope,
    size_hint,
    start_step,
    subject,
    with_files,
    work_lost_note,
    workload_record,
)
from core.backends.local.starting import seen_on
from core.backends.local.step_args import (
    CheckpointArgs,
    IntervalArgs,
    StartArgs,
    WorkloadArgs,
    step,
)
from core.durations import AUTO, interval_seconds, interval_text
from core.model import KILLED, Action, RiskClass, WorkloadState
from core.state.workloads import WorkloadRecord
from core.wrapper import auto_interval


def plan_checkpoint(ctx: LocalContext, target: str, params: NoParams) -> PlanDraft:
    """Checkpoint a running workload; it keeps running."""
    action = Action.CHECKPOINT
    rec = subject(ctx, target, action, {WorkloadState.RUNNING}, probe=True)
    ref, size = f"{NAME}:{target}", size_hint(ctx, target)
    return PlanDraft(
        steps=[
            step(
                "checkpoint",
                "checkpoint",
                CheckpointArgs(workload=target, stop=False),
                f"checkpoint {ref}, leave it running",
            )
        ],
        summary=f"Checkpoint {ref} on {rec.node} (it keeps running)",
        expected_pause_s=estimate_pause(ctx, target),
        saves=f"the full process state of {ref}{size}",
        rollback="nothing to undo: a checkpoint only adds an image",
        scope=scope(ctx, rec),
    )


def plan_migrate(ctx: LocalContext, target: str, params: MoveParams) -> PlanDraft:
    """Move a running workload to another node (a handoff to a standby where it can)."""
    action = Action.MIGRATE
    rec = subject(ctx, target, action, {WorkloadState.RUNNING}, probe=True)
    ref, size = f"{NAME}:{target}", size_hint(ctx, target)
    to = params.to
    dest = pick_target(ctx, exclude={rec.node or ""}, requested=to)
    return PlanDraft(
        steps=[
            *(stops := move_steps(ctx, rec, dest)),
            start_step(
                target,
                dest,
                "$checkpoint.checkpoint_id",
                f"restore it on {dest} from that checkpoint",
                after_standby=len(stops) > 1,
            ),
        ],
        on_failure=[
            step(
                "restart-source",
                "start",
                StartArgs(workload=target, node=rec.node, restore_from=None),
                f"restart it on {rec.node} from its newest good checkpoint",
            )
        ],
        summary=f"Move {ref} from {rec.node} to {dest} without losing progress",
        expected_pause_s=estimate_pause(ctx, target, move=stops),
        saves=f"the full process state of {ref}{size}",
        rollback=f"migrate it back: {undo_step(Action.MIGRATE, ref, to=rec.node)}",
        cost_effect=cost_effect(ctx, rec.node, dest),
        scope=move_scope(ctx, rec, dest),
    )


def plan_preempt(ctx: LocalContext, target: str, params: NoParams) -> PlanDraft:
    """Checkpoint a running workload and stop it, freeing its node."""
    action = Action.PREEMPT
    rec = subject(ctx, target, action, {WorkloadState.RUNNING}, probe=True)
    ref, size = f"{NAME}:{target}", size_hint(ctx, target)
    return PlanDraft(
        steps=[
            step(
                "checkpoint",
                "checkpoint",
                CheckpointArgs(workload=target, stop=True),
                f"checkpoint {ref} and stop it, freeing {rec.node}",
            )
        ],
        summary=f"Preempt {ref}: save its state and stop it, freeing node {rec.node}",
        expected_pause_s=None,
        saves=f"the full process state of {ref}{size}",
        rollback=f"resume it: {undo_step(Action.RESUME, ref)}",
        cost_effect=f"frees {rec.node}" + price_note(ctx, rec.node),
        scope=scope(ctx, rec),
    )


def plan_resume(ctx: LocalContext, target: str, params: StartParams) -> PlanDraft:
    """Start a stopped workload again from its newest good checkpoint (or from scratch)."""
    action = Action.RESUME
    rec = subject(ctx, target, action, {WorkloadState.STOPPED})
    ref = f"{NAME}:{target}"
    start = params
    wanted: str | None = start.to or rec.node
    dest = pick_target(ctx, exclude=set(), requested=wanted)
    if start.fresh:
        return _plan_fresh(ctx, rec, dest, fence=False)
    require_restorable(ctx, target)
    return PlanDraft(
        steps=[
            start_step(
                target,
                dest,
                None,
                f"restore {ref} on {dest} from its newest good checkpoint",
            )
        ],
        summary=f"Resume {ref} on {dest} from its newest good checkpoint",
        saves="nothing new; restores the saved state",
        rollback=f"preempt it again: {undo_step(Action.PREEMPT, ref)}",
        scope=move_scope(ctx, rec, dest),
    )


def plan_failover(ctx: LocalContext, target: str, params: StartParams) -> PlanDraft:
    """Fence a failed workload and restore it elsewhere from its newest good checkpoint."""
    action = Action.FAILOVER
    rec = workload_record(ctx, target)
    ref = f"{NAME}:{target}"
    if rec.state in _LIVE:
        raise errors.Conflict(
            f"{ref} is running on {rec.node}; failover is for a workload that died",
            hint=f"to move a live workload use {errors.step('migrate_workload', workload=ref)}",
        )
    require_state(rec, {WorkloadState.FAILED}, action)
    exclude = {rec.node} if rec.node else set()
    start = params
    if start.fresh:
        dest = pick_target(ctx, exclude=exclude, requested=start.to)
        return _plan_fresh(ctx, rec, dest, fence=True)
    good = ctx.store.newest_good(target)
    if good is None:
        require_restorable(ctx, target)  # names the corrupt ones, if any
        raise errors.CorruptCheckpoint(
            f"no checkpoint of {ref} verifies: nothing to fail over from",
            hint="a person can start it from scratch: "
            + errors.step("failover_workload", workload=ref, fresh=True),
        )
    dest = pick_target(ctx, exclude=exclude, requested=start.to)
    lost = work_lost_note(ctx, good)
    return PlanDraft(
        steps=[
            step(
                "fence",
                "fence",
                WorkloadArgs(workload=target),
                "make sure no copy of the workload is still running",
            ),
            start_step(target, dest, None, f"restore it on {dest} from its newest good checkpoint"),
        ],
        summary=f"Fail over {ref} from {rec.node} to {dest}, restoring checkpoint {NAME}:{good.id}",
        saves=with_files(ctx, f"resumes from {NAME}:{good.id}; {lost}", good),
        rollback=f"migrate it back: {undo_step(Action.MIGRATE, ref, to=rec.node)}",
        cost_effect=cost_effect(ctx, rec.node, dest),
        scope=move_scope(ctx, rec, dest),
    )


def plan_kill(ctx: LocalContext, target: str, params: NoParams) -> PlanDraft:
    """Terminate a running workload without saving."""
    action = Action.KILL
    rec = subject(ctx, target, action, {WorkloadState.RUNNING})
    ref = f"{NAME}:{target}"
    return PlanDraft(
        steps=[
            step(
                "terminate",
                "terminate",
                WorkloadArgs(workload=target),
                f"terminate {ref} without saving",
            )
        ],
        summary=f"Kill {ref} without saving: work since its last checkpoint is lost",
        saves="nothing",
        rollback=f"resume from its newest checkpoint: {undo_step(Action.FAILOVER, ref)}",
        scope=scope(ctx, rec),
    )


def _plan_gpu(ctx: LocalContext, target: str, action: Action) -> PlanDraft:
    """Suspend or resume the GPU state of a running workload in place."""
    rec = subject(ctx, target, action, {WorkloadState.RUNNING})
    ref = f"{NAME}:{target}"
    suspend = action is Action.SUSPEND_GPU
    return PlanDraft(
        steps=[
            step(
                action.value,
                action.value,
                WorkloadArgs(workload=target),
                f"move {ref}'s GPU memory to host memory and free its GPU"
                if suspend
                else f"put {ref}'s GPU memory back and let its GPU calls go on",
            )
        ],
        summary=(
            f"Suspend the GPU state of {ref} in place: it stays alive, its GPU is freed"
            if suspend
            else f"Resume the GPU state of {ref} on its GPU"
        ),
        saves="the workload's GPU state is kept in its host memory; nothing is lost",
        rollback=undo_step(Action.RESUME_GPU if suspend else Action.SUSPEND_GPU, ref),
        scope=scope(ctx, rec),
    )


def plan_set_interval(ctx: LocalContext, target: str, params: IntervalParams) -> PlanDraft:
    """Change how often a workload is checkpointed: its record keeps the interval (a resume,
    migrate or failover starts with it) and a running wrapper follows it at once."""
    action = Action.SET_CHECKPOINT_INTERVAL
    rec = workload_record(ctx, target)
    ref = f"{NAME}:{target}"
    if rec.state is WorkloadState.COMPLETED or rec.exit_status == KILLED:
        how = "completed" if rec.state is WorkloadState.COMPLETED else "was killed"
        raise errors.Conflict(
            f"cannot {action.value} {ref}: it {how} and nothing checkpoints it any more",
            hint=f"see its state with {errors.step('list_workloads')}",
        )
    require_state(rec, {WorkloadState.RUNNING, WorkloadState.STOPPED, WorkloadState.FAILED}, action)
    if params.every == AUTO:
        return _plan_auto_interval(ctx, rec, params)
    was, new = rec.checkpoint_every, interval_seconds(params.every)
    # The catalogue's risk reads the parameters only (off: disruptive). Whether a new
    # interval is longer than the one in force is known here, from the workload's record,
    # so the plan says it: a longer one leaves more work at risk between checkpoints
    # (disruptive, as off is); the service keeps the higher risk. The step refuses to run
    # if the interval in force changed since (``was_s``), so the risk stays the true one.
    longer = new is None or (was is not None and new > was)
    live = rec.state in _LIVE
    what = "no periodic checkpoints" if new is None else f"a checkpoint every {params.every}"
    return PlanDraft(
        steps=[
            step(
                "set-interval",
                "set_interval",
                IntervalArgs(
                    workload=target,
                    every_s=new,
                    was_s=was,
                    was_auto=rec.checkpoint_auto,
                    reason=params.reason,
                ),
                f"record {what} for {ref}" + (", and tell its wrapper" if live else ""),
            )
        ],
        summary=f"Give {ref} {what} (was {_in_force(rec)})"
        + ("" if live else f"; it applies when {ref} runs again"),
        saves="nothing is paused; "
        + ("only checkpoints asked for save its work" if new is None else f"{what} saves it"),
        rollback=undo_step(Action.SET_CHECKPOINT_INTERVAL, ref, every=_in_force(rec)),
        scope=scope(ctx, rec),
        risk=RiskClass.DISRUPTIVE if longer else RiskClass.SAFE,
    )


def _in_force(rec: WorkloadRecord) -> str:
    """The interval in force as it is written: auto, off or a duration."""
    return AUTO if rec.checkpoint_auto else interval_text(rec.checkpoint_every)


def _plan_auto_interval(
    ctx: LocalContext, rec: WorkloadRecord, params: IntervalParams
) -> PlanDraft:
    """``auto``: the wrapper re-times its periodic checkpoints after each one it makes, to
    what pays at its measured cost on its node (``core.wrapper.auto_interval``). It starts
    from the recommendation the workload's newest checkpoints make now (else the interval
    in force, within the bounds, else the shortest). Auto may lengthen the interval later
    without asking, up to ``[economics] max_interval_s`` (the cap a person sets): so it is
    disruptive unless that cap is no longer than the interval in force, or periodic
    checkpoints are off today (then auto only adds checkpoints)."""
    ref, was = f"{NAME}:{rec.name}", rec.checkpoint_every
    node = ctx.node_config.get(rec.node or "")
    spot = bool(node and node.spot)
    auto = auto_interval.for_node(ctx.settings.economics, spot=spot, seen=seen_on(ctx, spot=spot))
    newest = sorted(ctx.store.list(rec.name), key=lambda c: c.created_at, reverse=True)
    advice = auto_interval.advise(auto, newest[: auto_interval.RECENT])
    start = auto_interval.clamp(auto, advice.interval_s if advice else was)
    now = (
        f"now {interval_text(start)} ({advice.why.rstrip('.')})"
        if advice
        else f"from {interval_text(start)} until a checkpoint is measured"
    )
    live = rec.state in _LIVE
    cap = interval_text(auto.max_s)
    return PlanDraft(
        steps=[
            step(
                "set-interval",
                "set_interval",
                IntervalArgs(
                    workload=rec.name,
                    every_s=start,
                    was_s=was,
                    was_auto=rec.checkpoint_auto,
                    auto=auto,
                    reason=params.reason,
                ),
                f"record auto for {ref}" + (", and tell its wrapper" if live else ""),
            )
        ],
        summary=f"Give {ref} the checkpoint interval that pays, re-timed after each checkpoint: "
        f"{now}; between {interval_text(auto.min_s)} and the cap {cap} "
        f"(was {_in_force(rec)})" + ("" if live else f"; it applies when {ref} runs again"),
        saves=f"nothing is paused; a checkpoint at least every {cap} saves it",
        rollback=undo_step(Action.SET_CHECKPOINT_INTERVAL, ref, every=_in_force(rec)),
        scope=scope(ctx, rec),
        risk=RiskClass.SAFE if was is None or auto.max_s <= was else RiskClass.DISRUPTIVE,
    )


def _plan_fresh(ctx: LocalContext, rec: WorkloadRecord, dest: str, *, fence: bool) -> PlanDraft:
    """Start ``rec`` from scratch on ``dest``: an explicit request by a person (``--fresh``)."""
    ref = f"{NAME}:{rec.name}"
    n = len(ctx.store.published_ids(rec.name))
    steps = (
        [
            step(
                "fence",
                "fence",
                WorkloadArgs(workload=rec.name),
                "make sure no copy of the workload is still running",
            )
        ]
        if fence
        else []
    )
    steps.append(
        start_step(
            rec.name,
            dest,
            None,
            f"start {ref} on {dest} FROM SCRATCH: restore no checkpoint",
            fresh=True,
        )
    )
    return PlanDraft(
        steps=steps,
        summary=f"Start {ref} on {dest} from scratch (--fresh): none of its {n} checkpoint(s) "
        "is restored and all its progress is lost",
        saves="nothing: the workload starts over (its checkpoints are kept)",
        rollback=f"its checkpoints stay in the store: {errors.step('list_checkpoints', workload=ref)}",
        scope=move_scope(ctx, rec, dest),
    )


def plan_restore(ctx: LocalContext, checkpoint_id: str, params: MoveParams) -> PlanDraft:
    ckpt = ctx.store.get(checkpoint_id)
    ctx.store.verify(checkpoint_id, digests=False)  # known corrupt or truncated: refuse now
    rec = ctx.registry.get(ckpt.lineage)
    if rec is not None:
        rec = ctx.refresh(rec)
        if rec.state in _LIVE:
            raise errors.Conflict(
                f"{NAME}:{ckpt.lineage} is running; restoring it would run two copies",
                hint=f"preempt it first ({errors.step('preempt_workload', workload=f'{NAME}:{ckpt.lineage}')})"
                " or migrate it",
            )
    if rec is None:
        raise errors.NotFound(
            f"checkpoint {checkpoint_id} belongs to no known workload",
            hint="start it with 'clawpoint run --name NAME -- CMD' to restore it",
        )
    dest = pick_target(ctx, exclude=set(), requested=params.to or rec.node)
    return PlanDraft(
        steps=[
            step(
                "fence",
                "fence",
                WorkloadArgs(workload=ckpt.lineage),
                "make sure no copy of the workload is still running",
            ),
            step(
                "start",
                "start",
                StartArgs(workload=ckpt.lineage, node=dest, restore_from=ckpt.id),
                f"restore {NAME}:{ckpt.id} on {dest}",
            ),
        ],
        summary=f"Restore {NAME}:{ckpt.lineage} on {dest} from checkpoint {NAME}:{ckpt.id}",
        saves=with_files(
            ctx, f"restores the state saved at {ckpt.created_at:%Y-%m-%d %H:%M:%S} UTC", ckpt
        ),
        rollback=f"preempt it: {undo_step(Action.PREEMPT, f'{NAME}:{ckpt.lineage}')}",
        scope=move_scope(ctx, rec, dest),
    )


def plan_suspend_gpu(ctx: LocalContext, target: str, params: NoParams) -> PlanDraft:
    """Move a running workload's GPU memory to host memory; it stays alive."""
    return _plan_gpu(ctx, target, Action.SUSPEND_GPU)


def plan_resume_gpu(ctx: LocalContext, target: str, params: NoParams) -> PlanDraft:
    """Put a suspended workload's GPU memory back."""
    return _plan_gpu(ctx, target, Action.RESUME_GPU)


PLANS: dict[Action, PlanEntry[LocalContext]] = {
    Action.CHECKPOINT: PlanEntry(plan_checkpoint, NoParams),
    Action.RESTORE: PlanEntry(plan_restore, MoveParams),
    Action.MIGRATE: PlanEntry(plan_migrate, MoveParams),
    Action.PREEMPT: PlanEntry(plan_preempt, NoParams),
    Action.RESUME: PlanEntry(plan_resume, StartParams),
    Action.FAILOVER: PlanEntry(plan_failover, StartParams),
    Action.DRAIN_NODE: PlanEntry(node_plans.plan_drain, DrainParams),
    Action.UNDRAIN_NODE: PlanEntry(node_plans.plan_undrain, NoParams),
    Action.CORDON_NODE: PlanEntry(node_plans.plan_cordon, CordonParams),
    Action.KILL: PlanEntry(plan_kill, NoParams),
    Action.DELETE_CHECKPOINT: PlanEntry(node_plans.plan_delete, NoParams),
    Action.SUSPEND_GPU: PlanEntry(plan_suspend_gpu, NoParams),
    Action.RESUME_GPU: PlanEntry(plan_resume_gpu, NoParams),
    Action.SET_CHECKPOINT_INTERVAL: PlanEntry(plan_set_interval, IntervalParams),
    Action.SCALE_POOL: PlanEntry(pools.plan_scale_pool, PoolSizeParams),
    Action.RESIZE: PlanEntry(resize.plan_resize, ResizeParams),
}

# Why an action is not in the table: every other action is refused with this reason.
WHY_NOT = "local workloads are single processes; use migrate"
WHY_NOT_BY_ACTION: dict[Action, str] = {a: WHY_NOT for a in Action if a not in PLANS}
