"""The local backend's steps and ``STEPS``, the dispatch table ``run_step`` runs them from.

One function per step op a plan emits (``plans``, ``node_plans``, ``planning``):
``checkpoint``, ``standby``, ``start``, ``fence``, ``terminate``, ``set_node``,
``delete_checkpoint``, ``suspend_gpu``, ``resume_gpu``, ``set_interval`` (and ``release``,
``set_limits``: ``pools``, ``resize``). Each is
``fn(ctx, args, progress)`` with ``ctx`` a ``LocalStepContext`` (never the backend class)
and returns the step's JSON-able output. The start machinery is in ``starting``; what a step did when its answer
was lost, in ``recovery``. Limits: an op not in the table is refused before anything runs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from core import errors
from core.backends.base import ProgressFn, asked_by_agent
from core.backends.dispatch import StepFn
from core.backends.local import planning, pools, resize, starting
from core.backends.local.common import NAME, _pid_alive, _wrapper_alive
from core.backends.local.context import LocalStepContext
from core.backends.local.step_args import CheckpointArgs, IntervalArgs, StandbyArgs, StartArgs
from core.durations import interval_text
from core.model import KILLED, WorkloadState
from core.polling import poll_until
from core.state.workloads import WorkloadRecord
from core.store import retention
from core.store.disk import parse_checkpoint_id
from core.wrapper import fence as fencing
from core.wrapper.control import ControlClient

Obj = dict[str, Any]


def checkpoint(ctx: LocalStepContext, args: Obj, progress: ProgressFn) -> Obj:
    """Checkpoint the workload through its wrapper; with ``stop``, wait for the wrapper to
    exit (after a handoff: the old wrapper's process only, the lock is the standby's)."""
    a = CheckpointArgs.model_validate(args)
    rec = ctx.registry.require(a.workload)
    if not rec.socket or not _wrapper_alive(ctx.settings, rec):
        raise errors.Conflict(
            f"the wrapper of {NAME}:{rec.name} is not running",
            hint=f"check {errors.step('list_workloads')}; a dead workload is recovered with "
            f"{errors.step('failover_workload', workload=f'{NAME}:{rec.name}')}",
        )
    client = ControlClient(Path(rec.socket))
    said: str | None = None
    held: int | None = None
    if a.stop and a.handoff:
        ckpt, said, held = client.stop_and_hand_over(
            standby=a.handoff, mode=str(a.mode), progress=progress
        )
    else:
        ckpt = client.checkpoint(stop=a.stop, progress=progress, by_agent=asked_by_agent())
    if a.stop:
        starting.wait_wrapper_exit(ctx, rec, only_pid=said == "sent")
    return {
        "checkpoint_id": ckpt.id.split(":", 1)[-1],
        "size_bytes": ckpt.size_bytes,
        "timings": ckpt.timings,
        "node": rec.node,
        **({"handoff": said} if said is not None else {}),
        **({"connections_held": held} if held is not None else {}),
    }


def standby(ctx: LocalStepContext, args: Obj, progress: ProgressFn) -> Obj:
    """Start a standby wrapper on the destination (``moves``); nothing is paused yet."""
    a = StandbyArgs.model_validate(args)
    return starting.start_standby(ctx, a.workload, node=a.node, size=(a.cpus, a.memory_mb))


def start(ctx: LocalStepContext, args: Obj, progress: ProgressFn) -> Obj:
    """Start the workload's wrapper on a node, restoring a checkpoint (or fresh)."""
    a = StartArgs.model_validate(args)
    if a.node is None:  # plans name the node of every start; a journal could say anything
        raise errors.InvalidInput("the start step names no node", hint="re-plan the action")
    if a.standby_pid:
        starting.await_standby(ctx, a.workload, int(a.standby_pid), a.standby)
    restore_from = a.restore_from
    # Held from here until the wrapper reports the restore (it holds it too while it
    # reads it): retention never rotates out what this execution restores.
    with (
        retention.hold(ctx.store, restore_from, missing_ok=True)
        if restore_from
        else contextlib.nullcontext()
    ):
        return starting.start(
            ctx, a.workload, node=a.node, restore_from=restore_from, fresh=a.fresh,
            size=(a.cpus, a.memory_mb),
        )  # fmt: skip


def fence(ctx: LocalStepContext, args: Obj, progress: ProgressFn) -> Obj:
    """Make sure no copy of the workload is still running."""
    rec = ctx.registry.require(args["workload"])
    return {"killed": fencing.fence(ctx.settings, rec)}


def terminate(ctx: LocalStepContext, args: Obj, progress: ProgressFn) -> Obj:
    """End the workload without saving; it is recorded as killed."""
    rec = ctx.registry.require(args["workload"])
    if rec.socket and _wrapper_alive(ctx.settings, rec):
        # Nothing is saved: a checkpoint under way gets a moment, then is given up
        # (a hung dump must not keep a person's kill waiting).
        ControlClient(Path(rec.socket)).terminate(timeout_s=30, dump_wait_s=5.0)
        # Its answer comes once the payload has ended, a moment before the wrapper records
        # that end ("terminated on request") and exits: wait for that, or its record would
        # land after ours and the kill would read as a completion.
        poll_until(lambda: not _wrapper_alive(ctx.settings, rec), timeout_s=30, every_s=0.05)
    fencing.fence(ctx.settings, rec)
    ctx.registry.update(
        rec.name,
        state=WorkloadState.FAILED,
        exit_status=KILLED,
        message="killed by clawpoint",
    )
    return {"terminated": True}


def set_node(ctx: LocalStepContext, args: Obj, progress: ProgressFn) -> Obj:
    """Mark a virtual node schedulable or not."""
    ctx.set_node(
        args["node"],
        schedulable=bool(args["schedulable"]),
        reason=str(args.get("reason", "")),
    )
    return {"node": args["node"], "schedulable": bool(args["schedulable"])}


def delete_checkpoint(ctx: LocalStepContext, args: Obj, progress: ProgressFn) -> Obj:
    """Delete a checkpoint: under the store's lock, as the newer checkpoints verify now (the
    plan's view of them may be stale: Conflict, nothing deleted)."""
    cid = args["checkpoint_id"]
    live = planning.protects(ctx, parse_checkpoint_id(cid)[0])
    retention.delete(ctx.store, cid, live=live, label=f"{NAME}:")
    return {"deleted": cid}


def suspend_gpu(ctx: LocalStepContext, args: Obj, progress: ProgressFn) -> Obj:
    """Move the workload's GPU memory to host memory in place."""
    return _gpu_step(ctx, "suspend_gpu", ctx.registry.require(args["workload"]))


def resume_gpu(ctx: LocalStepContext, args: Obj, progress: ProgressFn) -> Obj:
    """Put the workload's GPU memory back."""
    return _gpu_step(ctx, "resume_gpu", ctx.registry.require(args["workload"]))


def set_interval(ctx: LocalStepContext, args: Obj, progress: ProgressFn) -> Obj:
    """Tell a running workload's wrapper its new checkpoint interval, then record it (what
    every later start of the workload reads). Safe to run again: it sets, never adds."""
    a = IntervalArgs.model_validate(args)
    rec = ctx.registry.require(a.workload)
    auto = a.auto is not None

    def as_set(every: float | None, was_auto: bool) -> bool:  # auto re-times: any passes
        return rec.checkpoint_auto == was_auto and (was_auto or rec.checkpoint_every == every)

    if not (as_set(a.was_s, a.was_auto) or as_set(a.every_s, auto)):  # the latter: ran before
        now = "auto" if rec.checkpoint_auto else interval_text(rec.checkpoint_every)
        then = "auto" if a.was_auto else interval_text(a.was_s)
        raise errors.Conflict(
            f"the checkpoint interval of {NAME}:{rec.name} is now {now}, not the {then} it "
            "was planned on; nothing was changed",
            hint="plan it again: its risk depends on the interval in force",
        )
    told: dict[str, Any] = {}
    if rec.socket and _wrapper_alive(ctx.settings, rec):
        how = a.auto.model_dump() if a.auto is not None else None
        told = ControlClient(Path(rec.socket)).set_interval(a.every_s, how)
    said = f"checkpoint interval {'auto from ' if auto else ''}{interval_text(a.every_s)}"
    said += f": {a.reason}" if a.reason else ""
    ctx.registry.update(rec.name, checkpoint_every=a.every_s, checkpoint_auto=auto, message=said)
    return {"checkpoint_every": a.every_s, "auto": auto, "live": bool(told), **told}


def _gpu_step(ctx: LocalStepContext, op: str, rec: WorkloadRecord) -> dict[str, Any]:
    """GPU suspend/resume in place of the workload's processes (core.checkpoint.gpu)."""
    from core.checkpoint import gpu  # local import: loads the driver library on use

    if rec.pid is None or not _pid_alive(rec.pid):
        raise errors.Conflict(
            f"{NAME}:{rec.name} has no running process",
            hint=f"check {errors.step('list_workloads')}",
        )
    reports = gpu.suspend_tree(rec.pid) if op == "suspend_gpu" else gpu.resume_tree(rec.pid)
    freed = [r.freed_bytes for r in reports if r.freed_bytes is not None]
    total = sum(freed) if freed else None
    if total is None:
        said = f"unmeasured (NVML: {reports[0].nvml})"
    else:
        said = f"{abs(total) / 2**30:.2f} GiB {'freed' if total >= 0 else 'taken back'}"
    ctx.registry.update(
        rec.name, message=f"GPU {'suspended' if op == 'suspend_gpu' else 'resumed'}: {said}"
    )
    return {
        "pids": [r.pid for r in reports],
        "freed_bytes": total,
        "reports": [r.model_dump() for r in reports],
    }


STEPS: dict[str, StepFn[LocalStepContext]] = {
    "checkpoint": checkpoint,
    "standby": standby,
    "start": start,
    "fence": fence,
    "terminate": terminate,
    "set_node": set_node,
    "delete_checkpoint": delete_checkpoint,
    "suspend_gpu": suspend_gpu,
    "resume_gpu": resume_gpu,
    "set_interval": set_interval,
    "release": pools.release,
    "set_limits": resize.set_limits,
}
