"""What a local step did when its answer was lost: ``recover_step`` (a journal resumed after
a crash) and ``reconcile_step`` (a step that reported an error).

Read from the store, the registry and the processes, never from the lost answer: a
stop-checkpoint whose checkpoint is published and whose wrapper stopped succeeded; a start
whose wrapper runs as asked happened. Functions take a ``LocalStepContext``, never the
backend class. Limits: ``fence`` and ``terminate`` are safe to run again, so they are not
recovered (None: run the step again).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core import errors
from core.backends.local import starting
from core.backends.local.common import _LIVE, _wrapper_alive
from core.backends.local.context import LocalStepContext
from core.model import KILLED, CheckpointInfo, WorkloadState
from core.state.workloads import WorkloadRecord
from core.wrapper import fence as fencing


def reconcile_step(
    ctx: LocalStepContext, op: str, args: dict[str, Any], started_at: datetime
) -> dict[str, Any] | None:
    """After a step reported an error: did it take effect anyway? Read from the store,
    the registry and the processes, never from the (possibly lost) answer. A
    stop-checkpoint whose answer was lost but whose checkpoint is published and whose
    wrapper stopped is a step that succeeded."""
    if op == "terminate":
        # The answer to a terminate can be lost the same way: what counts is that no
        # process of the workload is left.
        rec = ctx.registry.get(args["workload"])
        if rec is None:
            return None
        try:
            starting.wait_wrapper_exit(ctx, rec)  # a wrapper that ended its payload exits next
        except errors.Conflict:
            return None
        if not fencing.fence(ctx.settings, rec):
            return None
        ctx.registry.update(
            rec.name, state=WorkloadState.FAILED, exit_status=KILLED,
            message="killed by clawpoint",
        )  # fmt: skip
        return {"terminated": True, "recovered": True}
    return recover_step(ctx, op, args, started_at)


def _checkpoint_happened(
    ctx: LocalStepContext, args: dict[str, Any], started_at: datetime
) -> dict[str, Any] | None:
    """The output of a checkpoint step that took effect since ``started_at``: a checkpoint
    published since then that the wrapper recorded as its last, and for a stop, the
    wrapper STOPPED with it and gone."""
    name = args["workload"]
    rec = ctx.registry.get(name)
    newer = [c for c in ctx.store.list(name) if c.created_at >= started_at]
    if rec is None or not newer:
        return None
    if args["stop"] and args.get("handoff"):
        handed = _handed_over_since(ctx, rec, newer)
        if handed is not None:
            return handed
    if args["stop"]:
        try:
            starting.wait_wrapper_exit(ctx, rec)  # it exits right after recording STOPPED
        except errors.Conflict:
            return None
        rec = ctx.registry.get(name)
        if rec is None or rec.state is not WorkloadState.STOPPED:
            return None
    c = next((c for c in newer if c.id == rec.last_checkpoint), None)
    return None if c is None else _recovered_checkpoint(c)


def _handed_over_since(
    ctx: LocalStepContext, rec: WorkloadRecord, newer: list[CheckpointInfo]
) -> dict[str, Any] | None:
    """The output of a handoff's checkpoint step whose answer was lost: a checkpoint
    published since the step began is the one the wrapper now running the workload
    (the standby) was started from."""
    rec = starting.settle(ctx, rec, timeout_s=15.0)
    known, got = starting.restored_from(ctx, rec)
    c = next((c for c in newer if known and c.id == got), None)
    if c is None or rec.state not in _LIVE or not _wrapper_alive(ctx.settings, rec):
        return None
    return _recovered_checkpoint(c, handoff="sent")


def recover_step(
    ctx: LocalStepContext, op: str, args: dict[str, Any], started_at: datetime
) -> dict[str, Any] | None:
    if op == "checkpoint":
        return _checkpoint_happened(ctx, args, started_at)
    if op == "start":
        rec = ctx.registry.get(args["workload"])
        if rec is None:
            return None
        mine = starting.started_here(
            ctx,
            rec,
            node=args["node"],
            restore_from=args.get("restore_from"),
            fresh=bool(args.get("fresh")),
        )
        return {**mine, "recovered": True} if mine is not None else None
    if op == "release":
        gone = args["node"] in ctx.released_nodes()
        return {"node": args["node"], "released": gone} if gone == args["released"] else None
    if op == "set_node":
        node = ctx.get_node(args["node"])
        return (
            {"node": node.name, "schedulable": node.schedulable}
            if node.schedulable == args["schedulable"]
            else None
        )
    if op == "delete_checkpoint":
        try:
            ctx.store.get(args["checkpoint_id"])
        except errors.NotFound:
            return {"deleted": args["checkpoint_id"], "recovered": True}
        return None
    return None  # fence / terminate are safe to run again


def _recovered_checkpoint(c: CheckpointInfo, **extra: Any) -> dict[str, Any]:
    """A checkpoint step's output, found again after its answer was lost."""
    return {"checkpoint_id": c.id, "size_bytes": c.size_bytes, "timings": c.timings,
            "node": c.node, **extra, "recovered": True}  # fmt: skip
