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
   seconds; retention after each publish;
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

All checkpoints run on the main thread, one at a time (requests queue up). Limits: this
host's processes only; a payload started outside the wrapper cannot be adopted.
"""

from __future__ import annotations

import fcntl
import json
import os
import queue
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from core import errors
from core.checkpoint import cooperative, engine, lazy_pages, ops
from core.config import Settings, ensure_dirs
from core.guardrails.audit import AuditLog
from core.model import CheckpointInfo, CheckpointStatus, WorkloadState, utcnow
from core.state.db import Database
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.store import staging
from core.store.store import ON_REQUEST, REQUESTED_BY, CheckpointStore, parse_checkpoint_id
from core.wrapper import control, fence, handoff, payload
from core.wrapper.spec import RunSpec, output_path

log = structlog.get_logger(__name__)

ABORT_WAIT_S = 15.0  # a given-up dump ends within this (CRIU killed, the tree resumed)


@dataclass
class _Job:
    kind: str  # checkpoint | exit | periodic
    stop: bool = False
    reply: queue.SimpleQueue[dict[str, Any]] | None = None
    code: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    # A requested checkpoint: set when the main loop starts it; ``withdrawn`` when its
    # requester stopped waiting first (the loop then skips it: nobody would hear of it).
    started: threading.Event = field(default_factory=threading.Event)
    withdrawn: bool = False


def _test_fault(name: str) -> bool:
    """Fault injection for tests only (never set in production): ``CLAWPOINT_TEST_DROP_REPLY``
    = 1 closes a checkpoint or terminate request's connection without its answer (lost);
    ``CLAWPOINT_TEST_DIE_AFTER_HANDOFF`` = 1 SIGKILLs a source wrapper right after it handed
    its workload to a standby, before publishing the checkpoint;
    ``CLAWPOINT_TEST_DIE_IN_TAKEOVER`` = 1 SIGKILLs a standby once it holds the workload's
    lock, before it restores;
    ``CLAWPOINT_TEST_REPLY_DELAY_S`` = seconds to wait before writing it (a slow one)."""
    value = os.environ.get(name, "")
    if not value:
        return False
    if name.endswith("_S"):
        try:
            delay = float(value)
        except ValueError:
            return False
        log.warning("control.test_hook_delaying_reply", seconds=delay)
        time.sleep(max(0.0, min(delay, 60.0)))
        return True
    return value == "1"


HANG_UP_WAIT_S = 10.0


def _await_hang_up(conn: socket.socket) -> None:
    """After the answer to a stop checkpoint, before the wrapper may end: wait (bounded) for
    the requester to hang up. In a container the wrapper is PID 1, and its end kills every
    process there, a ``pods/exec`` requester still printing the answer included (it hangs up
    by exiting, so it is gone by then). Local requesters hang up at once."""
    try:
        conn.settimeout(HANG_UP_WAIT_S)
        while conn.recv(4096):
            pass
    except OSError:  # timed out, or the peer reset: either way, no longer waited for
        pass


class Supervisor:
    def __init__(self, settings: Settings, spec: RunSpec) -> None:
        self.settings = settings
        self.spec = spec
        # Set on a standby that got its order: restore that checkpoint the way it says.
        self.order: handoff.HandoffOrder | None = None
        self.handed_off = False  # a source that gave its workload to a standby
        self._order_received_at: float | None = None
        self._staged_links: Path | None = None
        self._links_slot: staging.Slot | None = None  # when they are in the tmpfs area
        self._marks: dict[str, float] = {}
        self._sock_ino: int | None = None
        self.name = spec.name
        self.store = CheckpointStore(
            settings.checkpoint_dir,
            keep=settings.store.keep_per_workload,
            keep_on_request=settings.store.keep_on_request,
            key=settings.store_key_path,
            group=settings.store.group,
        )
        self.registry = WorkloadRegistry(Database(settings.state_db))
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.sock_path = settings.run_dir / f"{self.name}.sock"
        self.progress_path = settings.run_dir / f"{self.name}.progress.json"
        self.engine = engine.get(spec.engine)
        # A stable path the engine may own (the cooperative engine's checkpoint directory).
        self.coop_link = settings.run_dir / f"{self.name}.checkpoint-dir"
        self.payload: payload.Payload | None = None
        self.pipes: payload.Pipes | None = None
        self.stopping = False
        self.terminating = False
        # Clear while a checkpoint runs: a terminate waits for it, since killing the payload
        # in the middle of a dump can leave CRIU waiting on it for good.
        self._no_dump = threading.Event()
        self._no_dump.set()
        self._dump_since: float | None = None  # monotonic start of the checkpoint under way
        # Set by a terminate that waited for a dump in vain: the dump is given up (CRIU
        # stopped, the tree resumed) so that the kill goes on (``DumpRequest.abort``).
        self._abort_dump = threading.Event()
        self._turns = threading.Lock()  # a request's start against its withdrawal
        self.last_checkpoint: str | None = None
        self.restore_info: dict[str, Any] = {}
        # What the restore did to the workload's files (rewound / kept), for the caller.
        self.restored_files: list[dict[str, Any]] = []
        self._lock_fd = -1
        self._server: socket.socket | None = None
        self._answers = threading.Condition()
        self._pending_answers = 0
        self._closing = False
        self.term_reason: str | None = None  # set once a termination signal is handled
        self.term_signal: str | None = None
        self._term_deadline = 0.0
        self._last_ckpt_s: float | None = None  # wall time of this wrapper's last checkpoint
        self._out: payload.RotatingOutput | None = None

    # -- start --------------------------------------------------------------------------------

    def mark(self, what: str) -> None:
        """A moment of a standby's takeover (seconds since its order), for its report."""
        if self._order_received_at is not None:
            self._marks[what] = round(time.time() - self._order_received_at, 4)

    def take_order(self, order: handoff.HandoffOrder) -> None:
        """A standby's order arrived: restore exactly that checkpoint, the way it says. Staged
        images are hard-linked at once (the source publishes, and so renames, them soon);
        if they are gone already, the published checkpoint is restored instead."""
        self._order_received_at = time.time()
        if order.staged is not None:
            try:
                self._staged_links = self._link_staged(Path(order.staged))
            except (OSError, errors.ClawpointError) as exc:
                log.warning("wrapper.staged_images_gone", workload=self.name, error=str(exc))
                order = order.model_copy(update={"staged": None})
        self.order = order
        self.spec = self.spec.model_copy(update={"restore_from": order.checkpoint})

    def _link_staged(self, staged: Path) -> Path:
        """Hard links to the staged images, beside them (the same filesystem): they survive
        the source's publish, or its abort. In the tmpfs area ``staging.link`` checks them
        (private to our uid, so nobody else wrote them); refused, they raise and the
        published checkpoint is restored instead."""
        root = self.store.root.resolve()
        if staging.contains(self.settings.migration.staging_dir, staged):
            self._links_slot = staging.link(
                self.settings.migration.staging_dir, staged, str(self.spec.standby)
            )
            return self._links_slot.path
        if staged.resolve().is_relative_to(root):
            links = root / ".staged" / f"{self.name}-{self.spec.standby}"
        else:
            raise errors.InvalidInput(f"staged images {staged} are neither in the store nor staged")
        shutil.rmtree(links, ignore_errors=True)
        links.mkdir(parents=True)
        for f in staged.iterdir():
            if f.is_file():
                os.link(f, links / f.name)
        return links

    def acquire(self, wait_s: float = 0.0) -> None:
        """Take the workload's lock (waiting up to ``wait_s``: a standby whose source is
        releasing it) and fence any orphaned payload of the name."""
        ensure_dirs(self.settings)
        fd = os.open(self.settings.run_dir / f"{self.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                if time.monotonic() < deadline:
                    time.sleep(0.002)
                    continue
                os.close(fd)
                ident = fence.read_identity(self.settings, self.name)
                raise errors.Conflict(
                    f"workload {self.name} already has a running wrapper "
                    f"(pid {ident.get('wrapper_pid', '?')})",
                    hint="checkpoint-and-stop or terminate it first, or pick another name",
                ) from exc
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
        env["CLAWPOINT_PROGRESS_FILE"] = str(self.progress_path)
        env.pop(cooperative.ENV_RESTORE_DIR, None)  # never inherited from our own caller
        env.update(self.engine.payload_env(self.coop_link))
        env.update(restored or {})
        return env

    def start(self) -> None:
        payload.become_subreaper()
        if self.order is None:  # a standby did it while it waited
            self.store.cleanup_partial()
        self.engine.require(self.settings.checkpoint)
        if self.spec.start_mode == "fresh":
            self._start_fresh()
            message = "started fresh on request: no checkpoint was restored"
        elif self.order is not None and self.order.staged is not None:
            message = self._restore_staged(self.order)
        elif self.spec.restore_from:
            message = self._restore_exactly(self.spec.restore_from)
        else:
            message = self._restore_newest_good()
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
                name=self.name,
                node=self.spec.node,
                state=WorkloadState.RUNNING,
                engine=self.spec.engine,
                pid=self.payload.pid,
                wrapper_pid=os.getpid(),
                socket=str(self.sock_path),
                command=self.spec.command,
                cwd=self.spec.cwd,
                labels=self.spec.labels,
                checkpoint_every=self.spec.checkpoint_every,
                last_checkpoint=self.last_checkpoint,
                message=message,
                started_at=utcnow(),
            )
        )

    def _restore_exactly(self, cid: str) -> str:
        """Restore ``cid`` and nothing else: a corrupt one fails, no other is substituted."""
        self.store.get(cid)  # NotFound for a wrong id, before anything
        try:
            self._start_from(cid)
        except errors.UntrustedCheckpoint as exc:
            self._close_pipes()
            self._audit_untrusted(cid, exc)
            raise errors.UntrustedCheckpoint(
                f"{exc.message}; nothing was started and no other checkpoint was restored in "
                "its place",
                hint=exc.hint,
                details={"checkpoint": cid, **exc.details},
            ) from exc
        except errors.CorruptCheckpoint as exc:
            self._close_pipes()
            raise errors.CorruptCheckpoint(
                f"checkpoint {cid} is corrupt; nothing was started and no other checkpoint "
                f"was restored in its place ({exc.message})",
                hint=f"restore another checkpoint of {self.name} (list them with 'clawpoint "
                f"checkpoints local:{self.name}'), or resume it from its newest good one",
                details={"checkpoint": cid},
            ) from exc
        self.last_checkpoint = cid
        return f"restored from {cid}"

    def _restore_staged(self, order: handoff.HandoffOrder) -> str:
        """Restore a handoff's staged images (their links) and run the workload at once."""
        assert self._staged_links is not None
        lineage, seq = parse_checkpoint_id(order.checkpoint)
        info = CheckpointInfo(id=order.checkpoint, lineage=lineage, seq=seq,
                              engine=self.spec.engine, node=self.spec.node, created_at=utcnow(),
                              size_bytes=0, extra={"pipes": order.pipes})  # fmt: skip
        self.pipes = payload.Pipes(self._output())
        new = [self.pipes.out_w, self.pipes.err_w]
        mark = _stamp(self.progress_path)
        self.mark("restoring")
        lazy = order.mode == "post-copy"
        restored = ops.restore_staged(
            self.engine, self._staged_links, work_dir=self.settings.run_dir / f"{self.name}.restore",
            cfg=self.settings.checkpoint, info=info, lazy=lazy,
            inherit_pipes={ino: fd for ino, fd in zip(order.pipes, new, strict=False)},
        )  # fmt: skip
        assert restored.pid is not None
        self.payload = payload.restored(restored.pid)
        self.pipes.start()
        self.last_checkpoint = order.checkpoint
        self._note_handoff(order, restored, mark)
        links, slot, pid = self._staged_links, self._links_slot, restored.pid

        def drop_links() -> None:  # once nothing reads them: after the last lazy page
            if lazy:
                try:
                    lazy_pages.wait_done(pid)
                except errors.ClawpointError as exc:
                    log.warning("wrapper.lazy_restore_failed", error=exc.message)
            if slot is not None:
                slot.remove()
            else:
                shutil.rmtree(links, ignore_errors=True)

        threading.Thread(target=drop_links, daemon=True, name="staged-links").start()
        return f"restored from {order.checkpoint} (handed over, {order.mode})"

    def _note_handoff(
        self, order: handoff.HandoffOrder, restored: Any, mark: list[int] | None
    ) -> None:
        self.restore_info = {"from": order.checkpoint, "timings": restored.timings,
                             "progress_mark": mark}  # fmt: skip
        threading.Thread(
            target=self._note_first_progress, args=(mark,), daemon=True, name="first-progress"
        ).start()
        self.restore_info["handoff"] = {
            "mode": order.mode,
            "staged": order.staged is not None,
            "sent_at": order.sent_at,
            "received_at": self._order_received_at,
            "resumed_at": restored.timings.get("resumed_at"),
            "marks": self._marks,
        }

    def _restore_newest_good(self) -> str:
        """The newest checkpoint that verifies; a fresh start only for a brand-new lineage.
        Untrusted checkpoints are skipped (and audited), never restored, never deleted."""
        untrusted: list[str] = []
        for info in self.store.list(self.name):
            if info.status is CheckpointStatus.UNTRUSTED:
                self._audit_untrusted(info.id, info.extra.get("untrusted_reason", ""))
                untrusted.append(info.id)
                continue
            if info.status is CheckpointStatus.CORRUPT:
                continue
            try:
                self._start_from(info.id)
            except errors.UntrustedCheckpoint as exc:
                self._audit_untrusted(info.id, exc)
                untrusted.append(info.id)
                self._close_pipes()
                continue
            except errors.CorruptCheckpoint as exc:
                log.warning("wrapper.corrupt_checkpoint_skipped", id=info.id, error=exc.message)
                self._close_pipes()
                continue
            self.last_checkpoint = info.id
            return f"restored from {info.id}"
        published = self.store.published_ids(self.name)
        if published or self.spec.start_mode == "restore":
            what = (
                f"none of the {len(published)} checkpoint(s) of {self.name} verifies"
                if published
                else f"{self.name} has no checkpoint"
            )
            if untrusted:
                what += f" ({len(untrusted)} untrusted: {', '.join(untrusted)})"
            raise (errors.UntrustedCheckpoint if untrusted else errors.CorruptCheckpoint)(
                f"{what}; nothing was started (its images were left as they are)",
                hint=(
                    "an untrusted checkpoint you wrote before checkpoints were signed can be "
                    "re-signed ('clawpoint checkpoints --reseal ID') if nobody else could write "
                    "to it; otherwise "
                    if untrusted
                    else ""
                )
                + "restore a specific checkpoint if one is good; or have a person start it "
                "from scratch ('clawpoint resume WORKLOAD --fresh', 'failover WORKLOAD --fresh', "
                "or 'clawpoint run --fresh --name NAME -- CMD'), which loses its progress",
                details={"workload": self.name, "checkpoints": published, "untrusted": untrusted},
            )
        self._start_fresh()
        return "started fresh (no checkpoint yet)"

    def _audit_untrusted(self, cid: str, why: errors.ClawpointError | str) -> None:
        """Record in the audit log that a restore met (and skipped or refused) an untrusted
        checkpoint: someone may have planted or altered it. Best effort, like the log line."""
        reason = why.message if isinstance(why, errors.ClawpointError) else why
        log.warning("wrapper.untrusted_checkpoint_refused", id=cid, reason=reason)
        try:
            AuditLog(Database(self.settings.state_db)).append(
                "checkpoint.untrusted",
                principal=f"wrapper:{self.name}",
                subject=f"local:{cid}",
                data={"action": "restore", "outcome": "refused", "reason": reason},
            )
        except Exception as exc:  # noqa: BLE001 (the refusal stands whether or not it is recorded)
            log.warning("wrapper.audit_failed", error=str(exc))

    def _start_fresh(self, restored: dict[str, str] | None = None) -> None:
        if self.pipes is None:  # a restore that restarts the command made them already
            self.pipes = payload.Pipes(self._output())
        self.payload = payload.start_fresh(
            self.spec.command,
            pipes=self.pipes,
            env=self._env(restored),
            cwd=self.spec.cwd,
            pid_namespace=self.engine.needs_pid_namespace,
        )
        self.pipes.start()

    def _start_from(self, cid: str) -> None:
        info = self.store.get(cid)
        self.pipes = payload.Pipes(self._output())
        old = info.extra.get("pipes") or []
        new = [self.pipes.out_w, self.pipes.err_w]
        order = self.order if self.order is not None and self.order.checkpoint == cid else None
        # The progress file as it was before the restore: the first report after it is the
        # restored program's (the caller's restore watch compares it with the checkpoint's).
        mark = _stamp(self.progress_path)
        self.mark("restoring")
        restored = ops.restore_verified(
            self.store,
            self.engine,
            cid,
            work_dir=self.settings.run_dir / f"{self.name}.restore",
            cfg=self.settings.checkpoint,
            inherit_pipes={int(ino): fd for ino, fd in zip(old, new, strict=False)},
            lazy=order is not None and order.mode == "post-copy",
            resume_early=order is not None,
        )
        if restored.pid is None:  # the engine restarts the command, which reloads its state
            self._start_fresh(restored.env)
            return
        if order is not None:
            self._note_handoff(order, restored, mark)
        else:
            self.restore_info = {"from": cid, "timings": restored.timings}
        if restored.files:
            self.restore_info["files"] = restored.files
            self.restored_files = restored.files
        self.payload = payload.restored(restored.pid)
        self.pipes.start()

    def _note_first_progress(self, mark: list[int] | None, timeout_s: float = 30.0) -> None:
        """Record the restored program's first progress report (its own view of the pause,
        with the report the checkpoint holds); polled finely, as later reports replace it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            now = _stamp(self.progress_path)
            if now is not None and now != mark:
                report = payload.progress_of(self.progress_path)
                if report is not None:
                    self.restore_info["first_progress"] = report
                    return
            time.sleep(0.002)

    def _output(self) -> payload.RotatingOutput | None:
        """logs/NAME.out for a detached wrapper (one per wrapper, shared by its attempts)."""
        if self.spec.output != "file":
            return None
        if self._out is None:
            cfg = self.settings.wrapper
            self._out = payload.RotatingOutput(
                output_path(self.settings, self.name),
                max_bytes=int(cfg.out_max_mib * 2**20),
                keep=cfg.out_keep,
            )
        return self._out

    def _close_pipes(self) -> None:
        if self.pipes is not None:
            self.pipes.close()
            self.pipes = None

    # -- control ------------------------------------------------------------------------------

    def serve(self) -> None:
        self.sock_path.unlink(missing_ok=True)  # stale: we hold the name's lock
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with control.short_address(self.sock_path) as addr:
            server.bind(addr)
        os.chmod(self.sock_path, 0o600)
        self._sock_ino = os.stat(self.sock_path).st_ino
        server.listen(8)
        self._server = server
        threading.Thread(target=self._accept, daemon=True, name="control").start()

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rwb") as f:

            def send(msg: dict[str, Any]) -> None:
                f.write(json.dumps(msg, default=str).encode() + b"\n")
                f.flush()

            try:
                line = f.readline()  # first, so that a refused client reads its answer
                refused = control.refuse_stranger(conn)
                if refused is not None:  # another user: whatever the socket's modes allowed
                    send({"error": refused.to_dict()})
                    return
                request = json.loads(line or b"{}")
                with self._answering():
                    self._dispatch(request, send)
                    if request.get("op") == "checkpoint" and request.get("stop"):
                        _await_hang_up(conn)
            except (OSError, ValueError) as exc:
                log.warning("control.bad_connection", error=str(exc))

    def _dispatch(self, request: dict[str, Any], send: Any) -> None:
        op = request.get("op")
        if op == "status":
            send({"result": self.status()})
        elif op == "checkpoint":
            reply: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
            with self._answers:  # against refuse_pending: queued before it, or refused
                if self._closing:
                    send({"error": self._ended_error().to_dict()})
                    return
                job = _Job("checkpoint", stop=bool(request.get("stop")), reply=reply)
                if request.get("by") == "agent":
                    job.extra["by_agent"] = True
                if job.stop and isinstance(request.get("handoff"), dict):
                    job.extra["handoff"] = request["handoff"]
                self.jobs.put(job)
            if not self._await_turn(job):
                send({"error": self._busy_error().to_dict()})
                return
            while True:
                msg = reply.get()
                if "progress" not in msg:
                    if _test_fault("CLAWPOINT_TEST_DROP_REPLY"):
                        log.warning("control.test_hook_dropped_reply", op=op)
                        return
                    _test_fault("CLAWPOINT_TEST_REPLY_DELAY_S")
                send(msg)
                if "progress" not in msg:
                    break
        elif op == "terminate":
            dump_wait = request.get("dump_wait_s")
            self.terminate(
                float(request.get("timeout_s", 30)),
                dump_wait_s=None if dump_wait is None else float(dump_wait),
            )
            if _test_fault("CLAWPOINT_TEST_DROP_REPLY"):
                log.warning("control.test_hook_dropped_reply", op=op)
                return
            send({"result": {"terminated": True}})
        else:
            send({"error": errors.InvalidInput(f"unknown op {op!r}").to_dict()})

    def _await_turn(self, job: _Job) -> bool:
        """Wait, at most ``[checkpoint] queue_wait_s``, for the main loop to start ``job``
        (a checkpoint under way goes first); False: withdrawn, it will never run."""
        if job.started.wait(self.settings.checkpoint.queue_wait_s):
            return True
        with self._turns:
            job.withdrawn = not job.started.is_set()
            return not job.withdrawn

    def _take(self, job: _Job) -> bool:
        """The main loop starts a requested checkpoint unless its requester gave up."""
        with self._turns:
            if job.withdrawn:
                log.info("wrapper.request_withdrawn", workload=self.name, stop=job.stop)
                return False
            job.started.set()
            return True

    def _busy_error(self) -> errors.ClawpointError:
        since = self._dump_since
        under_way = f" (under way for {time.monotonic() - since:.0f} s)" if since else ""
        waited = self.settings.checkpoint.queue_wait_s
        return errors.Conflict(
            f"workload {self.name} is busy: a checkpoint already under way{under_way} did not "
            f"finish within {waited:.0f} s, so this request was withdrawn and nothing was done",
            hint="try again once it has finished (a dump is stopped after its timeout, "
            "[checkpoint] dump_timeout_s); a person can kill the workload meanwhile",
            details={"workload": self.name, "waited_s": waited},
        )

    @contextmanager
    def _answering(self) -> Iterator[None]:
        """Counts requests being answered: the wrapper does not exit before they are."""
        with self._answers:
            self._pending_answers += 1
        try:
            yield
        finally:
            with self._answers:
                self._pending_answers -= 1
                self._answers.notify_all()

    def _ended_error(self) -> errors.ClawpointError:
        return errors.Conflict(
            f"workload {self.name} ended before the checkpoint could be taken",
            hint="its newest checkpoint and its state are in the workload and checkpoint lists",
        )

    def refuse_pending(self) -> None:
        """The main loop is over: answer every request still queued (it will never run)."""
        with self._answers:
            self._closing = True
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                return
            if job.reply is not None:
                job.reply.put({"error": self._ended_error().to_dict()})

    def wait_for_answers(self, timeout_s: float = 30.0) -> None:
        """Block until every request read so far has had its answer written.

        A stop-checkpoint ends the payload, which ends the main loop, while the control
        thread may still be writing the result: exiting first would lose an answer that says
        "published", and the caller would report a failure that did not happen."""
        with self._answers:
            if not self._answers.wait_for(lambda: self._pending_answers == 0, timeout_s):
                log.warning("wrapper.unanswered_requests", count=self._pending_answers)

    def status(self) -> dict[str, Any]:
        p = self.payload
        return {
            "name": self.name,
            "engine": self.spec.engine,
            "pid": p.pid if p else None,
            "wrapper_pid": os.getpid(),
            "running": bool(p and not p.exited.is_set()),
            "last_checkpoint": self.last_checkpoint,
            "progress": payload.progress_of(self.progress_path),
            "restore": self.restore_info,
        }

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
                info, said = self._stage_and_hand_over(p, handoff_to)
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
        if not self.handed_off:
            self.registry.update(
                self.name, state=state, last_checkpoint=info.id, message=f"checkpointed {info.id}"
            )
        try:  # after the handoff: retention is not part of the pause
            deleted = self.store.apply_retention(self.name, fresh=info.id)
        except errors.ClawpointError as exc:  # the checkpoint itself is published and good
            log.warning("wrapper.retention_failed", workload=self.name, error=exc.message)
            deleted = []
        log.info("wrapper.checkpointed", id=info.id, stop=stop, deleted=deleted, **info.timings)
        result = info.model_dump(mode="json")
        if said is not None:
            result["handoff"] = said
        if reply is not None:
            reply.put({"result": result})

    def _standby_socket(self, to: dict[str, Any]) -> tuple[Any, str | None]:
        """(path, None) for a standby of this workload, or (None, why not)."""
        path = self.settings.run_dir / os.path.basename(str(to.get("socket", "")))
        if not path.name.startswith(f"{self.name}.standby-"):
            return None, f"not sent: {path.name} is no standby of {self.name}"
        return path, None

    def _stage_and_hand_over(
        self, p: payload.Payload, to: dict[str, Any]
    ) -> tuple[CheckpointInfo, str]:
        """A stop-checkpoint that gives the workload to the standby at ``to["socket"]``
        (``core.wrapper.handoff``). The pause holds only the dump: the order goes out while
        the tree is still frozen (no standby: it is published and ended as usual, never
        lost); then the tree is ended, reaped (one copy), our last registry row written and
        the lock released for the standby, which restores the staged images at once; the
        checkpoint is hashed, synced and published after that. Returns it and "sent" or
        why not (the start step then launches a wrapper the plain way)."""
        mode = to.get("mode") or "stop-and-copy"
        path, refused = self._standby_socket(to)
        inodes = list(self.pipes.inodes) if self.pipes is not None else []
        staged = ops.stage(
            self.store, self.engine, lineage=self.name, pid=p.pid, node=self.spec.node,
            cfg=self.settings.checkpoint, pipes=inodes,
            extra={"command": self.spec.command, "progress": payload.progress_of(self.progress_path)},
            staging_dir=self.settings.migration.staging_dir, abort=self._abort_dump,
        )  # fmt: skip
        said = refused
        if path is not None and staged.carries_files:
            # Only a published checkpoint puts the workload's files back: publish first
            # (still frozen), then hand the published one over.
            return self._publish_then_hand_over(p, staged, path, mode)
        if said is None:
            order = handoff.HandoffOrder(
                checkpoint=staged.pending.id, mode=mode, staged=str(staged.pending.images_dir),
                pipes=inodes,
            )  # fmt: skip
            try:
                handoff.send(path, order)
            except errors.ClawpointError as exc:
                said = f"not sent: {exc.message}"
        if said is not None:
            log.warning("wrapper.handoff_not_sent", workload=self.name, why=said)
            try:
                info = ops.publish_staged(self.store, staged)
            except BaseException:
                self.engine.resume(p.pid)  # the dump froze it: let it go on, never lose it
                raise
            self.engine.end(p.pid, p.exited)
            return info, said
        self.engine.end(p.pid, p.exited)
        if not p.exited.wait(10.0):  # the standby waits for our lock meanwhile
            log.error("wrapper.payload_not_reaped", workload=self.name, pid=p.pid)
        self.registry.update(
            self.name, state=WorkloadState.STOPPED, last_checkpoint=staged.pending.id,
            message=f"handed over to a standby ({mode})",
        )  # fmt: skip
        self.handed_off = True
        self._release_lock()
        log.info(
            "wrapper.handoff_sent", workload=self.name, checkpoint=staged.pending.id, mode=mode
        )
        if _test_fault("CLAWPOINT_TEST_DIE_AFTER_HANDOFF"):  # the fault matrix's source death
            os.kill(os.getpid(), signal.SIGKILL)
        self._await_takeover(timeout_s=15.0)
        return ops.publish_staged(self.store, staged), "sent"

    def _publish_then_hand_over(
        self, p: payload.Payload, staged: ops.Staged, path: Path, mode: str
    ) -> tuple[CheckpointInfo, str]:
        """A handoff of a checkpoint that carries files: published while the tree is still
        frozen (on failure the tree goes on), then the tree ended and the published
        checkpoint handed over (the standby restores and verifies it the usual way)."""
        try:
            info = ops.publish_staged(self.store, staged)
        except BaseException:
            self.engine.resume(p.pid)  # the dump froze it: let it go on, never lose it
            raise
        self.engine.end(p.pid, p.exited)
        if not p.exited.wait(10.0):
            return info, "not sent: the payload had not exited 10 s after its stop-checkpoint"
        self.registry.update(
            self.name, state=WorkloadState.STOPPED, last_checkpoint=info.id,
            message=f"handed over to a standby ({mode}, published first: it carries files)",
        )  # fmt: skip
        self._release_lock()
        try:
            handoff.send(path, handoff.HandoffOrder(checkpoint=info.id, mode=mode))
        except errors.ClawpointError as exc:
            return info, f"not sent: {exc.message}"  # the start step launches a wrapper
        self.handed_off = True
        log.info("wrapper.handoff_sent", workload=self.name, checkpoint=info.id, mode=mode)
        return info, "sent"

    def _await_takeover(self, timeout_s: float) -> None:
        """Let the standby restore before hashing the images: on a machine with few cores
        the hashing would slow the restore, which is part of the workload's pause."""
        deadline = time.monotonic() + timeout_s
        holder_seen = False
        while time.monotonic() < deadline:
            row = self.registry.get(self.name)
            if row is not None and row.wrapper_pid not in (None, os.getpid()):
                return
            holder = fence.lock_holder(self.settings, self.name)
            if holder is not None and holder != os.getpid():
                holder_seen = True
            elif holder_seen:
                return  # the standby took the lock and died: publish for whoever restores next
            time.sleep(0.005)

    def _checkpoint(
        self,
        p: payload.Payload,
        *,
        stop: bool,
        progress: Any,
        on_request: bool = False,
        by_agent: bool = False,
    ) -> CheckpointInfo:
        extra: dict[str, Any] = {
            "command": self.spec.command,
            "progress": payload.progress_of(self.progress_path),
        }
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
        )

    # -- main loop ----------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: object) -> None:
        if signum in (signal.SIGUSR1, signal.SIGUSR2):
            self.jobs.put(_Job("checkpoint", stop=signum == signal.SIGUSR2))
            return
        p = self.payload
        if p is None or self.term_signal is not None:
            return  # not started yet (run() stops it), or already being terminated
        self.term_signal = signal.Signals(signum).name
        self._term_deadline = time.monotonic() + self.settings.wrapper.term_grace_s
        # The main thread may be busy (a checkpoint): the job waits its turn, the watchdog
        # does not. SimpleQueue.put and starting a thread are safe in a signal handler.
        self.jobs.put(_Job("term"))
        threading.Thread(target=self._term_watchdog, args=(p,), daemon=True).start()

    # -- termination ----------------------------------------------------------------------------

    def _term_watchdog(self, p: payload.Payload) -> None:
        """At the deadline, stop the payload whatever is in progress (a slow checkpoint)."""
        if p.exited.wait(max(0.0, self._term_deadline - time.monotonic())):
            return
        if self.term_reason is None:
            self.term_reason = (
                f"terminated without checkpoint: none finished within the "
                f"{self.settings.wrapper.term_grace_s:g}s grace budget"
            )
        self._stop_payload(p)

    def _stop_payload(self, p: payload.Payload) -> None:
        """Really stop it: SIGTERM to its process group (the namespace init ignores it without
        a handler; its other processes may not), then SIGKILL of the tree."""
        try:
            target = os.getpgid(p.pid)
            if target == p.pid:
                os.killpg(target, signal.SIGTERM)
            else:  # shares a group with us (cooperative): only the payload itself
                os.kill(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        if not p.exited.wait(self.settings.wrapper.term_kill_after_s):
            engine.kill_tree(p.pid)
            p.exited.wait(10)

    def _checkpoint_estimate_s(self, p: payload.Payload) -> float | None:
        """How long a stop checkpoint is expected to take: the last one's duration (this
        wrapper's, else the lineage's newest recorded total), with a margin; None if unknown."""
        last = self._last_ckpt_s
        if last is None:
            newest = self.store.list(self.name)[:1]  # newest first
            # Its manifest holds the phases (the total is only known after it is written):
            # the longest phase is a lower bound, which the margin below covers.
            phases = [float(v) for i in newest for k, v in i.timings.items() if k.endswith("_s")]
            last = max(phases) if phases else None
        return None if last is None else last * 1.5 + 0.5

    def _handle_term(self) -> None:
        p = self.payload
        if p is None or p.exited.is_set():
            return
        cfg = self.settings.wrapper
        left = self._term_deadline - time.monotonic()
        why: str | None = None
        if not cfg.term_checkpoint:
            why = "checkpoint on termination is off ([wrapper] term_checkpoint = false)"
        else:
            estimate = self._checkpoint_estimate_s(p)
            if estimate is not None and estimate > left:
                why = (
                    f"a checkpoint takes about {estimate:.1f}s and only {max(left, 0):.1f}s of "
                    f"the {cfg.term_grace_s:g}s grace budget was left"
                )
        if why is None:
            before = self.last_checkpoint
            self.checkpoint(stop=True, reply=None)
            if self.last_checkpoint != before and self.last_checkpoint is not None:
                if self.term_reason is None:
                    self.term_reason = f"terminated, checkpoint {self.last_checkpoint} saved"
            else:
                why = "the checkpoint failed (see the wrapper log)"
        if why is not None and self.term_reason is None:
            self.term_reason = f"terminated without checkpoint: {why}"
        if not p.exited.is_set():
            self._stop_payload(p)

    def _record_termination(self) -> int:
        reason = self.term_reason or "terminated without checkpoint: the workload ended first"
        saved = not reason.startswith("terminated without")
        self.registry.update(
            self.name,
            state=WorkloadState.STOPPED,
            message=reason,
            exit_status=f"terminated by {self.term_signal}",
        )
        log.warning(
            "wrapper.terminated", workload=self.name, signal=self.term_signal, reason=reason
        )
        try:
            AuditLog(Database(self.settings.state_db)).append(
                "terminated",
                principal=f"signal:{self.term_signal}",
                subject=f"local:{self.name}",
                data={"reason": reason, "checkpoint": self.last_checkpoint if saved else None},
            )
        except Exception as exc:  # noqa: BLE001 (the audit is best effort here: we are going)
            log.warning("wrapper.audit_failed", error=str(exc))
        if saved:
            return 0
        return 128 + int(signal.Signals[self.term_signal or "SIGTERM"])

    def loop(self) -> int:
        assert self.payload is not None
        p = self.payload

        def waiter() -> None:
            self.jobs.put(_Job("exit", code=p.wait()))

        threading.Thread(target=waiter, daemon=True, name="payload-wait").start()
        every = self.spec.checkpoint_every
        due = time.monotonic() + every if every else None
        while True:
            timeout = max(0.0, due - time.monotonic()) if due is not None else None
            try:
                job = self.jobs.get(timeout=timeout)
            except queue.Empty:
                job = _Job("periodic")
            if job.kind == "exit":
                return self._finish(job.code)
            if job.kind == "term":
                self._handle_term()
                continue
            if job.kind == "checkpoint" and not self._take(job):
                continue  # its requester was told it was withdrawn
            if job.kind == "periodic" or job.kind == "checkpoint":
                # Cleared before ``terminating`` is read: a terminate either sees this dump
                # and waits for it, or this loop sees the terminate and skips a periodic one.
                self._no_dump.clear()
                self._abort_dump.clear()
                self._dump_since = time.monotonic()
                try:
                    if not (job.kind == "periodic" and self.terminating):
                        self.checkpoint(
                            stop=job.stop,
                            reply=job.reply,
                            on_request=job.kind == "checkpoint" and not job.stop,
                            handoff_to=job.extra.get("handoff"),
                            by_agent=bool(job.extra.get("by_agent")),
                        )
                finally:
                    self._dump_since = None
                    self._no_dump.set()
                if every:
                    due = time.monotonic() + every

    def _finish(self, code: int) -> int:
        if self.pipes is not None:
            self.pipes.drain()
        if self.term_signal is not None:
            return self._record_termination()
        if self.handed_off:
            # The standby owns the workload's row now: writing it would undo its RUNNING.
            log.info("wrapper.handed_off", workload=self.name, checkpoint=self.last_checkpoint)
            return 0
        # Each end replaces the message: what it said while the payload ran (a restore's or a
        # checkpoint's news) is stale once it has ended.
        if self.stopping:
            self.registry.update(
                self.name,
                state=WorkloadState.STOPPED,
                exit_status=None,
                message=f"stopped at checkpoint {self.last_checkpoint}",
            )
            log.info("wrapper.stopped", workload=self.name, checkpoint=self.last_checkpoint)
            return 0
        if self.terminating:
            # Ended on request: COMPLETED, so nothing (failover) brings it back by itself.
            status = f"terminated on request ({'exit ' + str(code) if code >= 0 else 'killed'})"
            self.registry.update(
                self.name, state=WorkloadState.COMPLETED, exit_status=status, message=status
            )
            return 0
        if code == 0:
            self.registry.update(
                self.name, state=WorkloadState.COMPLETED, exit_status="exit 0", message="completed"
            )
            return 0
        status = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
        self.registry.update(
            self.name, state=WorkloadState.FAILED, exit_status=status, message=f"ended: {status}"
        )
        log.warning("wrapper.payload_failed", workload=self.name, status=status)
        return 128 - code if code < 0 else code

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
        if self._server is not None:
            self._server.close()
            # Only our own socket: after a handoff the path is the new wrapper's.
            try:
                if os.stat(self.sock_path).st_ino == self._sock_ino:
                    self.sock_path.unlink()
            except OSError:
                pass
        self._release_lock()

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def _stamp(path: Any) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_mtime_ns]


def _await_order(sup: Supervisor) -> handoff.HandoffOrder | None:
    """A standby's wait (see ``core.wrapper.handoff``): everything that can be done before
    the order is done before it, so that it is not part of the workload's pause."""
    settings, spec = sup.settings, sup.spec
    assert spec.standby is not None
    sup.engine.require(settings.checkpoint)  # ``criu check`` (cached): now, not in the pause
    sup.store.cleanup_partial()
    sup.registry.get(spec.name)  # opens the state database
    standby = handoff.Standby(handoff.standby_path(settings, spec.name, spec.standby))
    log.info(
        "wrapper.standby", workload=spec.name, node=spec.node, timeout_s=spec.standby_timeout_s
    )
    try:
        order = standby.wait(spec.standby_timeout_s)
    finally:
        standby.close()
    if order is None:
        log.info("wrapper.standby_expired", workload=spec.name)
    return order


def run(settings: Settings, spec: RunSpec) -> int:
    """Run ``spec`` in the foreground under the wrapper; returns the payload's exit code.
    A standby spec waits for its order first, and exits 0 without one."""
    # Staged images of a wrapper that was killed are freed by the next wrapper of the uid,
    # whatever it does (not only by a later handoff); nearly free when there are none.
    staging.sweep(settings.migration.staging_dir)
    sup = Supervisor(settings, spec)
    if spec.standby is not None:
        order = _await_order(sup)
        if order is None:
            return 0
        sup.take_order(order)
    sup.acquire(wait_s=10.0 if sup.order is not None else 0.0)
    sup.mark("acquired")
    if sup.order is not None and _test_fault("CLAWPOINT_TEST_DIE_IN_TAKEOVER"):
        os.kill(os.getpid(), signal.SIGKILL)  # the fault matrix's target dying mid-restore
    handled = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)
    previous = {s: signal.signal(s, sup._on_signal) for s in handled}
    try:
        sup.serve()  # before start: RUNNING in the registry means the socket answers
        sup.mark("serving")
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
        sup.refuse_pending()
        sup.wait_for_answers()
        sup.close()
