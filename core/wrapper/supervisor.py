"""The workload wrapper: run a command so that it can be checkpointed, restored and stopped.

``run(settings, spec)`` (foreground; returns the exit code) does, in order:

1. takes ``<run_dir>/NAME.lock`` (one wrapper per name: Conflict otherwise) and fences any
   orphaned payload of the same name, so a workload never runs twice;
2. restores ``spec.restore_from`` exactly (verified; if corrupt it fails: no other checkpoint
   is substituted), else the newest good checkpoint of the lineage; it starts fresh only for
   a lineage with no checkpoint at all (``start_mode`` auto) or when asked to (``fresh``).
   When no checkpoint verifies it fails (CorruptCheckpoint) and changes nothing: a restore
   never silently becomes a restart from zero;
3. records itself in the WorkloadRegistry and serves ``<run_dir>/NAME.sock`` (JSON lines,
   see ``core.wrapper.control``); SIGUSR1 = checkpoint, SIGUSR2 = checkpoint and stop,
   SIGTERM/SIGINT = terminate (below); periodic checkpoints every ``checkpoint_every``
   seconds (changed while it runs through the socket: ``periodic``; re-timed by itself if
   auto: ``auto_interval``); retention after each publish;
4. when the payload exits, records COMPLETED / FAILED (with the exit status) / STOPPED.

Termination contract (SIGTERM or SIGINT to the wrapper: ``kill``, Slurm's scancel, a pod's
termination, Ctrl-C): within ``[wrapper] term_grace_s`` of the signal, the wrapper takes a
stop checkpoint if ``term_checkpoint`` is on and one is expected to finish in what is left
of the budget (judged from the last checkpoint's duration); then it stops the payload for
real (SIGTERM to its process group, SIGKILL of the tree after ``term_kill_after_s``: the
payload is PID 1 of its namespace and ignores signals it has no handler for). A watchdog
kills it at the deadline whatever is in progress. The workload is recorded STOPPED with the
reason "terminated, checkpoint ID saved" or "terminated without checkpoint: WHY" (registry
message, wrapper log, audit log).

All checkpoints run on the main thread, one at a time (requests queue up). Rooms beside this
one: ``desk`` (control socket, job queue), ``restoring`` (which checkpoint a start restores),
``ending`` (termination, the record each end leaves), ``handoff_source``/``handoff_target``
(a live move's two wrappers), ``progress`` (the payload's progress file). Limits: this
host's processes only; a payload started outside the wrapper cannot be adopted.
"""

from __future__ import annotations

import fcntl
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from core import errors, logs
from core.checkpoint import cooperative, engine, ops
from core.config import Settings, ensure_dirs
from core.guardrails.audit import AuditLog
from core.model import CheckpointInfo, WorkloadState, utcnow
from core.polling import poll_until
from core.specs import AutoInterval, RunSpec
from core.state.db import Database
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.store import staging
from core.store.disk import ON_REQUEST, REQUESTED_BY
from core.store.store import CheckpointStore
from core.wrapper import cgroup_limits, ending, fence, handoff, payload, restoring, warm_up
from core.wrapper.auto_interval import AutoTimer
from core.wrapper.desk import ControlDesk, Job
from core.wrapper.faults import die_if
from core.wrapper.handoff_source import HandoffSource
from core.wrapper.handoff_target import HandoffTarget
from core.wrapper.periodic import PeriodicClock
from core.wrapper.progress import ProgressFile

log = logs.get_logger(__name__)

ABORT_WAIT_S = 15.0  # a given-up dump ends within this (CRIU killed, the tree resumed)


_RECORDED = {"name", "node", "engine", "command", "init", "user_namespace", "cwd", "labels",
             "cpus", "memory_mb"}  # fmt: skip


class Supervisor:
    def __init__(self, settings: Settings, spec: RunSpec) -> None:
        self.settings = settings
        self.spec = spec = payload.how_it_starts(spec)
        self.name = spec.name
        self.store = CheckpointStore(
            settings.checkpoint_dir,
            keep=settings.store.keep_per_workload,
            keep_on_request=settings.store.keep_on_request,
            key=settings.store_key_path,
            group=settings.store.group,
        )
        self.registry = WorkloadRegistry(Database(settings.state_db))
        self.progress = ProgressFile.of(settings, self.name)
        self.engine = engine.get(spec.engine)
        # A stable path the engine may own (the cooperative engine's checkpoint directory).
        self.coop_link = settings.run_dir / f"{self.name}.checkpoint-dir"
        self.desk = ControlDesk(settings, self.name, self)
        self.sock_path = self.desk.sock_path
        self.source = HandoffSource(
            settings, spec, self.store, self.engine, self.registry, self._release_lock
        )
        self.target = HandoffTarget(settings, spec, self.store, self.engine, self.progress)
        self.term = ending.Termination(settings, self.name, self.registry, self.audit)
        self.payload: payload.Payload | None = None
        self.pipes: payload.Pipes | None = None
        self.stopping = False
        self.terminating = False
        # Clear while a checkpoint runs: a terminate waits for it, since killing the payload
        # in the middle of a dump can leave CRIU waiting on it for good.
        self._no_dump = threading.Event()
        self._no_dump.set()
        self.dump_since: float | None = None  # monotonic start of the checkpoint under way
        # Set by a terminate that waited for a dump in vain: the dump is given up (CRIU
        # stopped, the tree resumed) so that the kill goes on (``DumpRequest.abort``).
        self._abort_dump = threading.Event()
        self.last_checkpoint: str | None = None
        self.restore_info: dict[str, Any] = {}
        # What the restore did to the workload's files (rewound / kept), for the caller.
        self.restored_files: list[dict[str, Any]] = []
        self._lock_fd = -1
        self._last_ckpt_s: float | None = None  # wall time of this wrapper's last checkpoint
        self.clock = PeriodicClock(spec.checkpoint_every)
        self.auto = AutoTimer(self.clock, spec.checkpoint_auto)  # auto: it re-times the clock
        self._out: payload.RotatingOutput | None = None
        self.join: Callable[[], None] | None = None  # enters its cgroup, if it has a size

    @property
    def order(self) -> handoff.HandoffOrder | None:
        """A standby's order (set once it came): restore that checkpoint the way it says."""
        return self.target.order

    @property
    def handed_off(self) -> bool:
        """A source that gave its workload to a standby."""
        return self.source.handed_off

    # -- start --------------------------------------------------------------------------------

    def take_order(self, order: handoff.HandoffOrder) -> None:
        """A standby's order arrived: restore exactly that checkpoint, the way it says."""
        order = self.target.take(order)
        self.spec = self.spec.model_copy(update={"restore_from": order.checkpoint})

    def acquire(self, wait_s: float = 0.0) -> None:
        """Take the workload's lock (waiting up to ``wait_s``: a standby whose source is
        releasing it) and fence any orphaned payload of the name."""
        ensure_dirs(self.settings)
        fd = os.open(self.settings.run_dir / f"{self.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)

        def locked() -> bool:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        if not poll_until(locked, timeout_s=wait_s, every_s=0.002):
            os.close(fd)
            ident = fence.read_identity(self.settings, self.name)
            raise errors.Conflict(
                f"workload {self.name} already has a running wrapper "
                f"(pid {ident.get('wrapper_pid', '?')})",
                hint="checkpoint-and-stop or terminate it first, or pick another name",
            )
        self._lock_fd = fd
        old = self.registry.get(self.name)
        if (
            old is not None
            and self.order is not None
            and not fence.payload_alive(self.settings, old)
        ):
            # A handoff: the source wrapper released the lock after its payload died and is
            # still finishing its answer; there is nothing of the workload left to fence.
            return
        if old is not None and not fence.fence(self.settings, old):
            raise errors.Conflict(
                f"an old copy of workload {self.name} is still running and could not be fenced",
                hint="kill it (see its pid in the workload list), then retry",
            )

    def _env(self, restored: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["CLAWPOINT_WORKLOAD"] = self.name
        env["CLAWPOINT_PROGRESS_FILE"] = str(self.progress.path)
        env.pop(cooperative.ENV_RESTORE_DIR, None)  # never inherited from our own caller
        env.update(self.engine.payload_env(self.coop_link))
        env.update(restored or {})
        return env

    def start(self) -> None:
        payload.become_subreaper()
        if self.order is None:  # a standby did it while it waited
            self.store.cleanup_partial()
        self.engine.require(self.settings.checkpoint)
        self.join = cgroup_limits.joiner_for(self.settings, self.name, self.spec)
        if self.spec.start_mode == "fresh":
            self.start_fresh()
            message = "started fresh on request: no checkpoint was restored"
        elif self.order is not None and self.order.staged is not None:
            message = self._restore_staged()
        elif self.spec.restore_from:
            cid = self.spec.restore_from
            message = restoring.restore_exactly(self.store, self.name, cid, self, self.audit)
            self.last_checkpoint = cid
        else:
            self.last_checkpoint, message = restoring.restore_newest_good(
                self.store, self.name, self.spec.start_mode, self, self.audit
            )
        assert self.payload is not None
        log.info("wrapper.started", workload=self.name, pid=self.payload.pid, how=message)
        fence.write_identity(
            self.settings,
            self.name,
            wrapper=os.getpid(),
            payload=self.payload.pid,
            restored_from=self.last_checkpoint,
            files=self.restored_files,
        )
        self.registry.upsert(
            WorkloadRecord(
                # what it is and its limits, as started
                **self.spec.model_dump(include=_RECORDED),
                state=WorkloadState.RUNNING,
                pid=self.payload.pid,
                wrapper_pid=os.getpid(),
                socket=str(self.sock_path),
                **self.auto.recorded(),  # checkpoint_every, checkpoint_auto
                last_checkpoint=self.last_checkpoint,
                message=message,
                started_at=utcnow(),
            )
        )

    def _restore_staged(self) -> str:
        """Restore a handoff's staged images (their links) and run the workload at once."""
        order = self.order
        assert order is not None
        self.pipes = payload.Pipes(self._output())
        restored, self.restore_info = self.target.restore_staged(
            [self.pipes.out_w, self.pipes.err_w], join=self.join
        )
        assert restored.pid is not None
        self.payload = payload.restored(restored.pid)
        self.pipes.start()
        self.last_checkpoint = order.checkpoint
        return f"restored from {order.checkpoint} (handed over, {order.mode})"

    def audit(self, kind: str, *, principal: str, subject: str, data: dict[str, Any]) -> None:
        """Append to the audit log, best effort: what it records (a refusal, the end of the
        workload) stands whether or not it is recorded, and the wrapper may be going."""
        try:
            AuditLog(Database(self.settings.state_db)).append(
                kind, principal=principal, subject=subject, data=data
            )
        except Exception as exc:  # noqa: BLE001 (best effort, said in the log)
            log.warning("wrapper.audit_failed", error=str(exc))

    def start_fresh(self, restored: dict[str, str] | None = None) -> None:
        if self.pipes is None:  # a restore that restarts the command made them already
            self.pipes = payload.Pipes(self._output())
        self.payload = payload.start_fresh(
            self.spec.command,
            pipes=self.pipes,
            env=self._env(restored),
            cwd=self.spec.cwd,
            pid_namespace=self.engine.needs_pid_namespace,
            init=bool(self.spec.init),
            user_namespace=bool(self.spec.user_namespace),
            join=self.join,
        )
        self.pipes.start()

    def start_from(self, cid: str) -> None:
        info = self.store.get(cid)
        self.pipes = payload.Pipes(self._output())
        old = info.extra.get("pipes") or []
        new = [self.pipes.out_w, self.pipes.err_w]
        order = self.order if self.order is not None and self.order.checkpoint == cid else None
        # The progress file as it was before the restore: the first report after it is the
        # restored program's (the caller's restore watch compares it with the checkpoint's).
        mark = self.progress.stamp()
        self.target.mark("restoring")
        restored = ops.restore_verified(
            self.store,
            self.engine,
            cid,
            work_dir=fence.restore_dir(self.settings, self.name),
            cfg=self.settings.checkpoint,
            inherit_pipes={int(ino): fd for ino, fd in zip(old, new, strict=False)},
            lazy=order is not None and order.mode == "post-copy",
            resume_early=order is not None,
            join=self.join,
        )
        if restored.pid is None:  # the engine restarts the command, which reloads its state
            self.start_fresh(restored.env)
            return
        if order is not None:
            self.restore_info = self.target.note(restored, mark)
        else:
            self.restore_info = {"from": cid, "timings": restored.timings}
        if restored.files:
            self.restore_info["files"] = restored.files
            self.restored_files = restored.files
        self.payload = payload.restored(restored.pid)
        self.pipes.start()

    def _output(self) -> payload.RotatingOutput | None:
        """logs/NAME.out for a detached wrapper (one per wrapper, shared by its attempts)."""
        if self.spec.output == "file" and self._out is None:
            self._out = payload.RotatingOutput.of(self.settings, self.name)
        return self._out

    def close_pipes(self) -> None:
        if self.pipes is not None:
            self.pipes.close()
            self.pipes = None

    # -- what the control desk asks -------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        p = self.payload
        return {
            "name": self.name,
            "engine": self.spec.engine,
            "pid": p.pid if p else None,
            "wrapper_pid": os.getpid(),
            "running": bool(p and not p.exited.is_set()),
            "last_checkpoint": self.last_checkpoint,
            "progress": self.progress.read(),
            "restore": self.restore_info,
            **self.auto.status(),
        }

    def set_interval(self, every_s: float | None, auto: AutoInterval | None) -> dict[str, Any]:
        """Periodic checkpoints every ``every_s`` from now on (None: none; re-timed after each
        checkpoint if ``auto``); the desk wakes the main loop, which re-times its wait."""
        return self.auto.set(every_s, auto)

    def terminate(self, grace_s: float, *, dump_wait_s: float | None = None) -> None:
        """End the payload on request: let a checkpoint under way finish (up to
        ``dump_wait_s``, default ``grace_s``; no new periodic one starts), else give it up
        (a hung dump must not keep the workload frozen), then SIGTERM and, after
        ``grace_s``, SIGKILL the tree."""
        p = self.payload
        if p is not None and not p.exited.is_set():
            self.terminating = True  # before the wait: the main loop starts no periodic dump now
            wait_s = grace_s if dump_wait_s is None else dump_wait_s
            if not self._no_dump.wait(wait_s):
                log.warning(
                    "wrapper.terminate_during_checkpoint", workload=self.name, waited_s=wait_s
                )
                self._abort_dump.set()
                if not self._no_dump.wait(ABORT_WAIT_S):
                    log.warning("wrapper.dump_did_not_stop", workload=self.name)
                self.engine.resume(p.pid)  # a tree the dump left stopped must see SIGTERM
            ops.terminate_tree(p.pid, grace_s=grace_s, exited=p.exited)
            p.exited.wait(grace_s + 10)

    # -- checkpoints --------------------------------------------------------------------------

    def checkpoint(
        self,
        *,
        stop: bool,
        reply: queue.SimpleQueue[dict[str, Any]] | None,
        on_request: bool = False,
        handoff_to: dict[str, Any] | None = None,
        by_agent: bool = False,
    ) -> None:
        """Take a checkpoint, then apply retention. ``on_request``: a leave-running one someone
        asked for (control socket, SIGUSR1), which rotates only older ones taken on request
        out (``by_agent``: an agent asked for it, and only the agents' rotate it out).
        ``handoff_to`` (a stop only): ``{"socket", "mode"}`` of a standby wrapper to give the
        workload to once the checkpoint is published (``core.wrapper.handoff``)."""

        def progress(done: float, total: float | None, message: str) -> None:
            if reply is not None:
                reply.put({"progress": [done, total, message]})

        p = self.payload
        try:
            if p is None or p.exited.is_set():
                raise errors.Conflict(
                    f"workload {self.name} is not running: nothing to checkpoint",
                    hint="its newest checkpoint is in the checkpoint list",
                )
            if stop:
                self.stopping = True
            self.registry.update(self.name, state=WorkloadState.CHECKPOINTING)
            t0 = time.monotonic()
            said: str | None = None
            if stop and handoff_to is not None:
                pipes = list(self.pipes.inodes) if self.pipes is not None else []
                info, said = self.source.hand_over(
                    p, handoff_to, pipes=pipes, progress=self.progress.read(),
                    abort=self._abort_dump,
                )  # fmt: skip
            else:
                info = self._checkpoint(
                    p, stop=stop, progress=progress, on_request=on_request, by_agent=by_agent
                )
            self._last_ckpt_s = time.monotonic() - t0
        except errors.ClawpointError as exc:
            self.stopping = False
            log.error("wrapper.checkpoint_failed", workload=self.name, error=str(exc))
            if not self.handed_off:  # else the row is the new wrapper's
                self.registry.update(self.name, state=WorkloadState.RUNNING, message=exc.message)
            if reply is not None:
                reply.put({"error": exc.to_dict()})
            return
        self.last_checkpoint = info.id
        state = WorkloadState.STOPPED if stop else WorkloadState.RUNNING
        with self.auto.measured(info) as kept:  # auto: re-timed to what pays; the row says it
            if not self.handed_off:
                self.registry.update(self.name, state=state, last_checkpoint=info.id,
                                     message=f"checkpointed {info.id}", **kept)  # fmt: skip
        try:  # after the handoff: retention is not part of the pause
            deleted = self.store.apply_retention(self.name, fresh=info.id)
        except errors.ClawpointError as exc:  # the checkpoint itself is published and good
            log.warning("wrapper.retention_failed", workload=self.name, error=exc.message)
            deleted = []
        log.info("wrapper.checkpointed", id=info.id, stop=stop, deleted=deleted, **info.timings)
        result = info.model_dump(mode="json")
        if said is not None:
            result["handoff"] = said
        if self.source.connections_held is not None:  # clients that waited, not refused
            result["connections_held"] = self.source.connections_held
        if reply is not None:
            reply.put({"result": result})

    def _checkpoint(
        self,
        p: payload.Payload,
        *,
        stop: bool,
        progress: Any,
        on_request: bool = False,
        by_agent: bool = False,
    ) -> CheckpointInfo:
        extra: dict[str, Any] = {"command": self.spec.command, "progress": self.progress.read()}
        if on_request:
            extra[ON_REQUEST] = True
            if by_agent:
                extra[REQUESTED_BY] = "agent"
        return ops.checkpoint(
            self.store,
            self.engine,
            lineage=self.name,
            pid=p.pid,
            node=self.spec.node,
            stop=stop,
            cfg=self.settings.checkpoint,
            pipes=self.pipes.inodes if self.pipes is not None else (),
            link=self.coop_link,
            extra=extra,
            exited=p.exited,
            progress=progress,
            abort=self._abort_dump,
            side_files=self.progress.side_files(),
        )

    # -- main loop ----------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum in (signal.SIGUSR1, signal.SIGUSR2):  # USR2: a Slurm move's standby may wait
            stop = signum == signal.SIGUSR2
            self.desk.jobs.put(Job("checkpoint", stop=stop, extra={"may_hand_over": stop}))
            return
        p = self.payload
        if p is None or not self.term.begin(signum):
            return  # not started yet (run() stops it), or already being terminated
        # The main thread may be busy (a checkpoint): the job waits its turn, the watchdog
        # does not. SimpleQueue.put and starting a thread are safe in a signal handler.
        self.desk.jobs.put(Job("term"))
        self.term.watch(p)

    def _handle_term(self) -> None:
        p = self.payload
        if p is None:
            return

        def stop_checkpoint() -> str | None:
            before = self.last_checkpoint
            self.checkpoint(stop=True, reply=None)
            return self.last_checkpoint if self.last_checkpoint != before else None

        self.term.handle(
            p,
            estimate_s=lambda: ending.checkpoint_estimate_s(
                self._last_ckpt_s, self.store, self.name
            ),
            stop_checkpoint=stop_checkpoint,
        )

    def loop(self) -> int:
        assert self.payload is not None
        p = self.payload

        def waiter() -> None:
            self.desk.jobs.put(Job("exit", code=p.wait()))

        threading.Thread(target=waiter, daemon=True, name="payload-wait").start()
        self.clock.restart(checkpointed=False)
        while True:
            try:  # an "interval" job (a new interval) only wakes this wait to re-time it
                job = self.desk.jobs.get(timeout=self.clock.wait_s())
            except queue.Empty:
                job = Job("periodic")
            if job.kind == "exit":
                return self._finish(job.code)
            if job.kind == "term":
                self._handle_term()
                continue
            if job.kind == "checkpoint" and not self.desk.take(job):
                continue  # its requester was told it was withdrawn
            if job.kind == "periodic" or job.kind == "checkpoint":
                # Cleared before ``terminating`` is read: a terminate either sees this dump
                # and waits for it, or this loop sees the terminate and skips a periodic one.
                self._no_dump.clear()
                self._abort_dump.clear()
                self.dump_since = time.monotonic()
                try:
                    if not (job.kind == "periodic" and self.terminating):
                        self.checkpoint(
                            stop=job.stop,
                            reply=job.reply,
                            on_request=job.kind == "checkpoint" and not job.stop,
                            handoff_to=self.source.standby_for(job.extra),
                            by_agent=bool(job.extra.get("by_agent")),
                        )
                finally:
                    self.dump_since = None
                    self._no_dump.set()
                self.clock.restart(checkpointed=True)

    def _finish(self, code: int) -> int:
        if self.pipes is not None:
            self.pipes.drain()
        if self.term.signal is not None:
            return self.term.record(self.last_checkpoint)
        if self.handed_off:
            # The standby owns the workload's row now: writing it would undo its RUNNING.
            log.info("wrapper.handed_off", workload=self.name, checkpoint=self.last_checkpoint)
            return 0
        return ending.record_end(
            self.registry,
            self.name,
            code,
            stopping=self.stopping,
            terminating=self.terminating,
            last_checkpoint=self.last_checkpoint,
        )

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
        self.desk.close()
        cgroup_limits.discard(self.settings, self.name)  # its own, if it had (or was given) one
        self._release_lock()

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def run(settings: Settings, spec: RunSpec) -> int:
    """Run ``spec`` in the foreground under the wrapper; returns the payload's exit code.
    A standby waits for its order, and exits 0 without one (but a Slurm rerun of one that
    took over). Frees staged images of killed wrappers, whatever it does."""
    staging.sweep(settings.migration.staging_dir)
    sup = Supervisor(settings, spec)
    warm_up.start(sup.engine, settings.checkpoint)  # the engine check, before it is needed
    if spec.standby is not None:
        order = sup.target.wait(sup.registry)
        if order is not None:
            sup.take_order(order)
        elif not sup.target.rerun:
            return 0
    sup.acquire(wait_s=10.0 if sup.order is not None else 0.0)
    sup.target.mark("acquired")
    if sup.order is not None:
        die_if("CLAWPOINT_TEST_DIE_IN_TAKEOVER")  # the fault matrix's target dying mid-restore
    handled = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
    previous = {s: signal.signal(s, sup._on_signal) for s in handled}
    try:
        sup.desk.serve()  # before start: RUNNING in the registry means the socket answers
        sup.target.mark("serving")
        with sup.target.answering():  # a standby for another node tells its source
            sup.start()
        return sup.loop()
    except BaseException:
        # We are going away: take the payload with us rather than leave it unmanaged (its
        # parent-death signal would do it too; this also covers an in-process caller).
        if sup.payload is not None and not sup.payload.exited.is_set():
            ops.terminate_tree(sup.payload.pid, grace_s=5, exited=sup.payload.exited)
        raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        sup.desk.refuse_pending()
        sup.desk.wait_for_answers()
        sup.close()
