"""How the local backend starts a workload's wrapper and checks the start: the ``start`` and
``standby`` steps' machinery (``steps``), also read by ``recovery``.

A start fences any older copy, launches a detached wrapper that restores the asked checkpoint
(or starts fresh, only when a person asked), then checks the postconditions: it restored
exactly what the step asked, and the restored program stays up and does not go back behind
its checkpoint's progress (``verify``); anything else is stopped and reported. A start that
already happened (a journal resumed after a crash) is recognised, not repeated. Functions
take a ``LocalContext``, never the backend class. Limits: one machine; the node is virtual.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from core import errors, logs, processes
from core.backends.local import moves, verify
from core.backends.local.common import _LIVE, NAME, _pid_alive, _wrapper_alive
from core.backends.local.context import LocalContext
from core.checkpoint import engine
from core.model import WorkloadState
from core.polling import poll_until
from core.specs import RunSpec
from core.state.interruptions import InterruptionHistory, Tally
from core.state.workloads import WorkloadRecord
from core.wrapper import auto_interval, handoff
from core.wrapper import fence as fencing
from core.wrapper.control import ControlClient
from core.wrapper.launch import launch_detached, launch_standby
from core.wrapper.progress import ProgressFile, Stamp

log = logs.get_logger("clawpoint.local")


def wait_wrapper_exit(
    ctx: LocalContext, rec: WorkloadRecord, timeout_s: float = 30.0, *, only_pid: bool = False
) -> None:
    """After a stop-checkpoint the wrapper records STOPPED and exits; wait for that so the
    next step never sees two wrappers for one workload. ``only_pid``: after a handoff,
    the workload's lock is the new wrapper's: wait for the old wrapper's process only."""
    start = processes.start_time(rec.wrapper_pid) if rec.wrapper_pid else None

    def gone() -> bool:
        if only_pid:
            return not fencing.same_process(rec.wrapper_pid, start)
        return not _wrapper_alive(ctx.settings, rec)

    if not poll_until(gone, timeout_s=timeout_s, every_s=0.05):
        raise errors.Conflict(
            f"the wrapper of {NAME}:{rec.name} did not exit {timeout_s:.0f} s after its "
            "stop-checkpoint",
            hint="check its log under CLAWPOINT_HOME/logs; the checkpoint itself is safe",
        )


def start(
    ctx: LocalContext,
    name: str,
    *,
    node: str,
    restore_from: str | None,
    fresh: bool = False,
    size: Size | None = None,
) -> dict[str, Any]:
    """The start step: launch the workload's wrapper on ``node`` restoring ``restore_from``
    (or fresh), then check it did; a start that already happened is returned as such.
    ``size``: (cpus, memory MiB) from now on, where a resize gives new ones."""
    rec = ctx.registry.require(name)
    before = rec.state
    if _wrapper_alive(ctx.settings, rec):
        # A wrapper is already up: either a start of this very step that was under way
        # when a previous clawpoint process died (resumed from the journal), or a
        # genuine second copy. Let it settle, then tell the two apart by its node.
        rec = settle(ctx, rec)
        mine = started_here(ctx, rec, node=node, restore_from=restore_from, fresh=fresh)
        if mine is not None:
            handed = _confirm_handoff(ctx, rec, restore_from)
            if handed is not None:
                return {**mine, **handed}
            return {**mine, "already_started": True}
        if rec.state in _LIVE or _wrapper_alive(ctx.settings, rec):
            raise errors.Conflict(
                f"{NAME}:{name} is already running on {rec.node}",
                hint="preempt or migrate it instead of starting a second copy",
            )
    fencing.fence(ctx.settings, rec)
    mark = ProgressFile.of(ctx.settings, name).stamp()
    # A start step restores (or fails); only a person's explicit --fresh starts over.
    spec = _spec(
        ctx, rec, node, size, restore_from=restore_from, start_mode="fresh" if fresh else "restore"
    )
    try:
        started = launch_detached(ctx.settings, spec)
    except errors.Conflict:
        # Another wrapper for this name won the lock meanwhile: the start spawned by a
        # clawpoint process that died right after spawning it. Same node: it is ours.
        current = settle(ctx, ctx.registry.require(name))
        mine = started_here(ctx, current, node=node, restore_from=restore_from, fresh=fresh)
        if mine is not None:
            return {**mine, "already_started": True}
        raise
    restored = _check_started_as_asked(
        ctx, started, restore_from=restore_from, fresh=fresh, previous=before
    )
    seen = None if restored is None else _watch_restored(ctx, started, restored, mark)
    # Files the restore rewound (their later content kept beside them) or kept: said in
    # the result, never silently.
    changed = fencing.read_identity(ctx.settings, name).get("files") or []
    return {
        "workload": f"{NAME}:{name}",
        "node": started.node,
        "pid": started.pid,
        "restored_from": restored,
        **({"fresh": True} if fresh else {}),
        **({"verified": seen.model_dump(mode="json")} if seen is not None else {}),
        **({"files": changed} if changed else {}),
    }


Size = tuple[float | None, int | None]  # (cpus, memory MiB) a resize gives; None: as recorded


def _spec(
    ctx: LocalContext, rec: WorkloadRecord, node: str, size: Size | None, **how: Any
) -> RunSpec:
    """The run spec of ``rec`` started on ``node``, with its recorded limits (or ``size``:
    a resize's; its limits go with it on every start); ``how``: restore_from, start_mode..."""
    cpus, memory_mb = size if size is not None else (None, None)
    # An auto interval stays auto, with the hazard of the node it now starts on.
    spot = bool((cfg := ctx.node_config.get(node)) and cfg.spot)
    auto = (
        auto_interval.for_node(ctx.settings.economics, spot=spot, seen=seen_on(ctx, spot=spot))
        if rec.checkpoint_auto
        else None
    )
    return RunSpec(
        name=rec.name, node=node, engine=rec.engine, checkpoint_every=rec.checkpoint_every,
        checkpoint_auto=auto, command=rec.command, init=rec.init,
        user_namespace=rec.user_namespace, cwd=rec.cwd, labels=rec.labels,
        cpus=cpus if cpus is not None else rec.cpus,
        memory_mb=memory_mb if memory_mb is not None else rec.memory_mb,
        home=str(ctx.settings.home), **how,
    )  # fmt: skip


def seen_on(ctx: LocalContext, *, spot: bool) -> Tally:
    """What the watch loop saw on the local spot (or on-demand) nodes: the hazard's history."""
    return InterruptionHistory(ctx.registry.db).tally(NAME, spot=spot)


def start_standby(
    ctx: LocalContext, name: str, *, node: str, size: Size | None = None
) -> dict[str, Any]:
    """The standby step: a wrapper waiting on ``node`` for the workload (``moves``), with
    ``size`` (a resize's limits). A standby that cannot start is no failure: the move goes
    on the plain way."""
    rec = ctx.registry.require(name)
    spec = _spec(ctx,
        rec, node, size, start_mode="restore", standby=handoff.new_token(),
        standby_timeout_s=ctx.settings.migration.standby_timeout_s,
    )  # fmt: skip
    try:
        pid, path = launch_standby(ctx.settings, spec)
    except errors.ClawpointError as exc:
        log.warning("local.standby_failed", workload=name, error=exc.message)
        return {"socket": None, "pid": None, "node": node, "problem": exc.message}
    return {"socket": str(path), "pid": pid, "node": node}


def await_standby(ctx: LocalContext, name: str, pid: int, socket_path: str | None) -> None:
    """Before a start after a handoff: let the standby that got the order take the
    workload's lock (so no second wrapper is launched beside it); retire one that got
    no order (its socket is still there): it holds nothing, and is not needed now."""
    start = processes.start_time(pid)
    if not moves.is_wrapper(pid):
        return
    if socket_path and Path(socket_path).exists():
        log.info("local.standby_retired", workload=name, pid=pid)
        engine.signal_tree(pid, signal.SIGTERM)
        return
    poll_until(
        lambda: (
            not fencing.same_process(pid, start) or fencing.lock_holder(ctx.settings, name) == pid
        ),
        timeout_s=15.0,
        every_s=0.005,
    )


def _confirm_handoff(
    ctx: LocalContext, rec: WorkloadRecord, restore_from: str | None
) -> dict[str, Any] | None:
    """For a wrapper a handoff started from ``restore_from``: the restore watch (as for
    every restore) and the pause it took. None for any other wrapper."""
    if restore_from is None:
        return None
    restore = moves.restore_status(rec)
    if not moves.handed_over(restore, restore_from):
        return None
    assert restore is not None
    mark = Stamp.parse(restore.get("progress_mark"))
    seen = _watch_restored(ctx, rec, restore_from, mark)
    restore = moves.restore_status(rec) or restore  # the first progress is known by now
    if (restore.get("handoff") or {}).get("staged"):
        # Restored from images published only afterwards: what was restored must be
        # what was published, and verify (the same files: hard links of them).
        _verify_or_stop(ctx, rec, restore_from)
    report = moves.handoff_report(restore, ctx.store.get(restore_from))
    return {"handoff": report.model_dump(mode="json"), "verified": seen.model_dump(mode="json")}


def _verify_or_stop(ctx: LocalContext, rec: WorkloadRecord, checkpoint_id: str) -> None:
    """Verify every byte of what a staged handoff restored; a corrupt one stops the workload."""
    try:
        ctx.store.verify(checkpoint_id)
    except errors.CorruptCheckpoint as exc:
        log.error("local.handoff_images_corrupt", workload=rec.name, error=exc.message)
        if rec.socket and _wrapper_alive(ctx.settings, rec):
            ControlClient(Path(rec.socket)).terminate(timeout_s=30)
        ctx.registry.update(rec.name, state=WorkloadState.FAILED,
                             exit_status="restore unverified", message=exc.message)  # fmt: skip
        raise


def _watch_restored(
    ctx: LocalContext, started: WorkloadRecord, checkpoint_id: str, mark: Stamp | None
) -> verify.RestoreWatch:
    """The last postcondition of every restoring start: the restored program stays up
    and does not go back behind its checkpoint's progress. A workload that fails it and
    is still running is stopped (the checkpoint untouched), so it stays restorable."""
    try:
        return verify.watch_restored(
            ctx.settings, ctx.registry, ctx.store, started.name,
            checkpoint_id=checkpoint_id, mark=mark,
        )  # fmt: skip
    except errors.CheckpointError as exc:
        log.error("local.restore_unverified", workload=started.name, error=exc.message)
        current = ctx.registry.require(started.name)
        if current.socket and _wrapper_alive(ctx.settings, current):
            try:
                ControlClient(Path(current.socket)).terminate(timeout_s=30)
            except errors.ClawpointError as stop_exc:
                log.warning("local.stop_after_unverified_failed", error=str(stop_exc))
        try:  # its last registry write must come before ours
            wait_wrapper_exit(ctx, current)
        except errors.Conflict as wait_exc:
            log.warning("local.wrapper_still_up_after_unverified", error=str(wait_exc))
        fencing.fence(ctx.settings, current)
        ctx.registry.update(
            started.name,
            state=WorkloadState.FAILED,
            exit_status=current.exit_status or "restore unverified",
            message=exc.message,
        )
        raise


def started_here(
    ctx: LocalContext, rec: WorkloadRecord, *, node: str, restore_from: str | None, fresh: bool
) -> dict[str, Any] | None:
    """The output of a start step when ``rec`` is a live wrapper on ``node`` that started
    the way the step asks (that checkpoint, or fresh): a start that already happened."""
    if rec.state not in _LIVE or rec.node != node or not _wrapper_alive(ctx.settings, rec):
        return None
    known, got = restored_from(ctx, rec)
    if not known or not _as_asked(got, restore_from=restore_from, fresh=fresh):
        return None
    return {"workload": f"{NAME}:{rec.name}", "node": rec.node, "pid": rec.pid,
            "restored_from": got, **({"fresh": True} if fresh else {})}  # fmt: skip


def restored_from(ctx: LocalContext, rec: WorkloadRecord) -> tuple[bool, str | None]:
    """(known, checkpoint id) the running wrapper of ``rec`` started from (None: fresh),
    from the identity it wrote at start; unknown if that file is not this wrapper's."""
    ident = fencing.read_identity(ctx.settings, rec.name)
    if not rec.wrapper_pid or ident.get("wrapper_pid") != rec.wrapper_pid:
        return False, None
    if "restored_from" not in ident:
        return False, None
    value = ident.get("restored_from")
    return True, value if isinstance(value, str) else None


def _check_started_as_asked(
    ctx: LocalContext,
    started: WorkloadRecord,
    *,
    restore_from: str | None,
    fresh: bool,
    previous: WorkloadState,
) -> str | None:
    """The postcondition of a start step: it restored exactly ``restore_from`` (or some
    checkpoint of the lineage when None), or nothing when ``fresh``. Anything else is
    stopped again and reported as the failed restore it is."""
    known, got = restored_from(ctx, started)
    if known and _as_asked(got, restore_from=restore_from, fresh=fresh):
        return got
    wanted = "a fresh start" if fresh else (restore_from or "a checkpoint of the lineage")
    log.error("local.start_postcondition", workload=started.name, wanted=wanted, got=got)
    if started.socket and _wrapper_alive(ctx.settings, started):
        try:
            ControlClient(Path(started.socket)).terminate(timeout_s=30)
        except errors.ClawpointError as exc:
            log.warning("local.stop_after_postcondition_failed", error=str(exc))
    fencing.fence(ctx.settings, started)
    ctx.registry.update(
        started.name,
        state=previous,
        message=f"start refused: wanted {wanted}, the wrapper started from {got or 'scratch'}",
    )
    raise errors.CheckpointError(
        f"{NAME}:{started.name} was to start from {wanted} but the wrapper started from "
        f"{got or 'scratch' if known else 'an unknown state'}; it was stopped again",
        hint="check the workload's log; then restore the checkpoint you want explicitly",
        details={"wanted": wanted, "got": got},
    )


def settle(ctx: LocalContext, rec: WorkloadRecord, timeout_s: float = 60.0) -> WorkloadRecord:
    """Wait while a live wrapper is still starting (its row not yet RUNNING)."""
    current = rec

    def settled() -> WorkloadRecord | bool:
        nonlocal current
        if not _wrapper_alive(ctx.settings, current):
            return True  # no wrapper is starting: its row is final
        current = ctx.registry.require(rec.name)
        if current.state in _LIVE and current.wrapper_pid and _pid_alive(current.wrapper_pid):
            return current
        return False

    found = poll_until(settled, timeout_s=timeout_s, every_s=0.05)
    return found if isinstance(found, WorkloadRecord) else ctx.registry.require(rec.name)


def _as_asked(got: str | None, *, restore_from: str | None, fresh: bool) -> bool:
    """Whether a wrapper that started from ``got`` (None: fresh) did what a start step asked."""
    if fresh:
        return got is None
    return got == restore_from if restore_from else got is not None
