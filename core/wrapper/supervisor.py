"""The wrapper's supervisor: run a payload checkpointable, serve requests, restore on start.

``run(settings, spec)`` is the foreground wrapper. It:
- takes the flock ``<run_dir>/NAME.lock`` (a second wrapper for the same name gets Conflict);
- restores ``spec.restore_from`` or the newest checkpoint of the lineage that verifies, or
  starts the command fresh; with CRIU, fresh means ``unshare --pid --fork setsid CMD`` so
  the payload is the init of its own PID namespace (restorable anywhere);
- owns the payload's stdout/stderr pipes and copies them to its own;
- serves checkpoint requests, one at a time: SIGUSR1 (leave running), SIGUSR2 (stop),
  the control socket ``<run_dir>/NAME.sock`` (JSON lines, see control.py), and the periodic
  timer ``checkpoint_every``; applies retention after each publish;
- records the workload in the registry (RUNNING, STOPPED, FAILED, COMPLETED);
- forwards SIGTERM/SIGINT to the payload (SIGKILL after a grace period: a PID-namespace
  init ignores signals it has no handler for) and exits when the payload does.

Limits: Linux only; the CRIU engine needs root. PDEATHSIG protects only the direct child
(the cooperative payload, or ``unshare``): a CRIU payload must not carry PDEATHSIG itself,
because CRIU restores it and ``criu restore -d`` exiting would then kill the restored tree.
So a CRIU payload can outlive a SIGKILLed wrapper, and ``fence()`` must run before anyone
restarts the workload elsewhere.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from core import errors
from core.backends.base import ProgressFn
from core.checkpoint import cooperative, criu
from core.config import Settings, ensure_dirs
from core.model import CheckpointInfo, WorkloadState, utcnow
from core.state.db import Database
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.store.store import CheckpointStore
from core.wrapper import control, fence
from core.wrapper.spec import RunSpec

log = structlog.get_logger(__name__)

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
TERM_GRACE_S = 10.0


def _prctl(option: int, arg: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class _Request:
    op: str
    args: dict[str, Any] = field(default_factory=dict)
    replies: queue.Queue[dict[str, Any]] | None = None


class Supervisor:
    def __init__(self, settings: Settings, spec: RunSpec) -> None:
        self.settings = settings
        self.spec = spec
        self.name = spec.name
        self.store = CheckpointStore(settings.checkpoint_dir, keep=settings.store.keep_per_workload)
        self.registry = WorkloadRegistry(Database(settings.state_db))
        self.run_dir = settings.run_dir
        self.sock_path = self.run_dir / f"{self.name}.sock"
        self.progress_path = self.run_dir / f"{self.name}.progress.json"
        self.coop_link = self.run_dir / f"{self.name}.checkpoint-dir"
        self.requests: queue.Queue[_Request] = queue.Queue()
        self.pid: int | None = None  # payload host pid (namespace init)
        self._wait_pid: int | None = None  # what we waitpid() on (unshare, or restored root)
        self._popen: subprocess.Popen[bytes] | None = None
        self._stopping = False  # a checkpoint-and-stop or terminate is ending the payload
        self._exit: int | None = None  # raw wait status
        self._last_checkpoint: str | None = None
        self._lock_fd: int | None = None
        self._pipes: dict[str, tuple[int, int]] = {}
        self._copiers: list[threading.Thread] = []

    # -- setup ------------------------------------------------------------------------------

    def _take_lock(self) -> None:
        path = fence.lock_path(self.run_dir, self.name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            rec = self.registry.get(self.name)
            raise errors.Conflict(
                f"workload {self.name} already has a running wrapper"
                + (f" (pid {rec.wrapper_pid})" if rec and rec.wrapper_pid else ""),
                hint="checkpoint-and-stop it first, or pick another name",
            ) from exc
        self._lock_fd = fd

    def _env(self, restore_dir: Path | None) -> dict[str, str]:
        env = dict(os.environ)
        env["CLAWPOINT_WORKLOAD"] = self.name
        env["CLAWPOINT_PROGRESS_FILE"] = str(self.progress_path)
        env.pop(cooperative.ENV_RESTORE_DIR, None)
        if self.spec.engine == "cooperative":
            env[cooperative.ENV_CHECKPOINT_DIR] = str(self.coop_link)
            if restore_dir is not None:
                env[cooperative.ENV_RESTORE_DIR] = str(restore_dir)
        return env

    def _open_pipes(self) -> None:
        for stream in ("stdout", "stderr"):
            r, w = os.pipe()
            self._pipes[stream] = (r, w)
            target = 1 if stream == "stdout" else 2
            t = threading.Thread(
                target=_copy, args=(r, target), name=f"copy-{stream}", daemon=True
            )
            t.start()
            self._copiers.append(t)

    def _start_fresh(self, restore_dir: Path | None) -> None:
        argv = list(self.spec.command)
        if self.spec.engine == "criu":
            argv = ["unshare", "--pid", "--fork", "setsid", *argv]
        try:
            self._popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._pipes["stdout"][1],
                stderr=self._pipes["stderr"][1],
                cwd=self.spec.cwd,
                env=self._env(restore_dir),
                preexec_fn=_die_with_parent,
                start_new_session=self.spec.engine != "criu",
            )
        except OSError as exc:
            raise errors.InvalidInput(
                f"cannot start {self.spec.command[0]!r}: {exc}",
                hint="check the command exists and is executable, and the cwd exists",
            ) from exc
        self._wait_pid = self._popen.pid
        self.pid = self._popen.pid if self.spec.engine != "criu" else self._ns_init()

    def _ns_init(self) -> int:
        """The host pid of the namespace init that unshare forks (the payload)."""
        assert self._popen is not None
        ppid = self._popen.pid
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                kids = Path(f"/proc/{ppid}/task/{ppid}/children").read_text().split()
            except OSError:
                kids = []
            if kids:
                pid = int(kids[0])
                # wait until setsid has exec'd the command (its environment is the payload's)
                if fence.is_payload_of(pid, self.name):
                    return pid
            if self._popen.poll() is not None:
                break
            time.sleep(0.005)
        raise errors.OperationFailed(
            f"the payload of {self.name} did not start (unshare exited {self._popen.poll()})",
            hint="check that 'unshare --pid' works here (needs root) and the command exists",
        )

    def _restore_criu(self, info: CheckpointInfo) -> None:
        images = self.store.images_dir(info.id)
        pipes = {k: int(v) for k, v in dict(info.extra.get("pipes", {})).items()}
        fds = {k: w for k, (_, w) in self._pipes.items()}
        log_path = self.run_dir / f"{self.name}.restore.log"
        result = criu.restore(
            images,
            pipes=pipes,
            fds=fds,
            log_path=log_path,
            verify=lambda: self.store.verify(info.id),
            criu_path=self.settings.checkpoint.criu_path,
        )
        self.pid = self._wait_pid = result.pid
        log.info("wrapper.restored", workload=self.name, checkpoint=info.id, **result.timings)

    def _start(self) -> str | None:
        """Restore or start; returns the checkpoint id restored from (None: fresh)."""
        if self.spec.restore_from:
            cands = [self.store.get(self.spec.restore_from)]
            if cands[0].lineage != self.name:
                raise errors.InvalidInput(
                    f"checkpoint {cands[0].id} belongs to {cands[0].lineage}, not {self.name}",
                    hint="restore a checkpoint of the same workload name",
                )
        else:
            cands = self.store.candidates(self.name)
        for cand in cands:
            if cand.engine != self.spec.engine:
                raise errors.InvalidInput(
                    f"checkpoint {cand.id} was made by the {cand.engine} engine, "
                    f"but this run uses {self.spec.engine}",
                    hint=f"run with --engine {cand.engine}",
                )
            try:
                if self.spec.engine == "criu":
                    self._restore_criu(cand)
                else:
                    self.store.verify(cand.id)
                    self._start_fresh(self.store.images_dir(cand.id))
                return cand.id
            except errors.CorruptCheckpoint as exc:
                self.store.mark_corrupt(cand.id, exc.message)
                if self.spec.restore_from:
                    raise
                log.warning("wrapper.skip_corrupt", checkpoint=cand.id, error=exc.message)
        self._start_fresh(None)
        return None

    # -- checkpoints ------------------------------------------------------------------------

    def checkpoint(self, *, stop: bool, progress: ProgressFn) -> CheckpointInfo:
        if self.pid is None or self._exit is not None:
            raise errors.Conflict(
                f"workload {self.name} is not running", hint="start it with 'clawpoint run'"
            )
        t0 = time.monotonic()
        engine = self.spec.engine
        pending = self.store.begin(self.name, engine=engine, node=self.spec.node)
        self.registry.update(self.name, state=WorkloadState.CHECKPOINTING)
        progress(0, None, f"checkpointing {self.name} with {engine}")
        try:
            if engine == "criu":
                if stop:
                    self._stopping = True
                result = criu.dump(
                    self.pid,
                    pending.images_dir,
                    leave_running=not stop,
                    log_path=pending.tmp_dir / "criu-dump.log",
                    criu_path=self.settings.checkpoint.criu_path,
                )
                pending.digests = result.digests
                timings, extra = result.timings, result.extra
            else:
                sig = cooperative.parse_signal(self.settings.checkpoint.cooperative_signal)
                timings = cooperative.request(
                    self.pid,
                    pending.images_dir,
                    link=self.coop_link,
                    sig=sig,
                    timeout_s=self.settings.checkpoint.cooperative_timeout_s,
                    alive=lambda: self._exit is None,
                )
                extra = {}
            progress(1, None, "publishing")
            timings["engine_total_s"] = time.monotonic() - t0
            info = self.store.publish(pending, timings=timings, leave_running=not stop, extra=extra)
        except BaseException:
            self._stopping = False
            self.store.abort(pending)
            if self._exit is None:
                self.registry.update(self.name, state=WorkloadState.RUNNING)
            raise
        self._last_checkpoint = info.id
        self.registry.update(
            self.name,
            last_checkpoint=info.id,
            state=WorkloadState.STOPPED if stop else WorkloadState.RUNNING,
        )
        if stop and engine == "cooperative":
            self._stopping = True
            self._terminate(sig=signal.SIGKILL)
        self.store.apply_retention(self.name)
        progress(2, 2, f"checkpoint {info.id} published")
        return info

    # -- payload life -----------------------------------------------------------------------

    def _terminate(self, *, sig: int = signal.SIGTERM, grace_s: float = TERM_GRACE_S) -> None:
        if self.pid is None:
            return
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while self._exit is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if self._exit is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                return

    def _waiter(self) -> None:
        assert self._wait_pid is not None
        while True:
            try:
                _, status = os.waitpid(self._wait_pid, 0)
            except InterruptedError:
                continue
            except ChildProcessError:
                status = 0
            break
        self._exit = status
        self.requests.put(_Request("exited"))

    def _status(self) -> dict[str, Any]:
        progress: Any = None
        try:
            import json

            progress = json.loads(self.progress_path.read_text())
        except (OSError, ValueError):
            progress = None
        return {
            "name": self.name,
            "pid": self.pid,
            "wrapper_pid": os.getpid(),
            "engine": self.spec.engine,
            "last_checkpoint": self._last_checkpoint,
            "running": self._exit is None,
            "progress": progress,
        }

    def _handle(self, req: _Request) -> None:
        replies = req.replies

        def progress(done: float, total: float | None, message: str) -> None:
            if replies is not None:
                replies.put({"event": "progress", "done": done, "total": total, "message": message})

        try:
            if req.op == "checkpoint":
                info = self.checkpoint(stop=bool(req.args.get("stop")), progress=progress)
                result: Any = info.model_dump(mode="json")
            elif req.op == "status":
                result = self._status()
            elif req.op == "terminate":
                self._stopping = True
                threading.Thread(target=self._terminate, daemon=True).start()
                result = {"terminating": True}
            else:
                raise errors.InvalidInput(
                    f"unknown control op {req.op!r}", hint="use checkpoint, status or terminate"
                )
            if replies is not None:
                replies.put({"result": result})
        except errors.ClawpointError as exc:
            log.error("wrapper.request_failed", op=req.op, error=str(exc))
            if replies is not None:
                replies.put({"error": {"type": type(exc).__name__, **exc.to_dict()}})

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGUSR1, lambda s, f: self.requests.put(_Request("checkpoint")))
        signal.signal(
            signal.SIGUSR2, lambda s, f: self.requests.put(_Request("checkpoint", {"stop": True}))
        )
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda s, f: self.requests.put(_Request("terminate")))

    def run(self) -> int:
        ensure_dirs(self.settings)
        self._take_lock()
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        self.store.cleanup_partial()
        self._open_pipes()
        server = control.ControlServer(self.sock_path, self.requests_put)
        try:
            restored = self._start()
            self._last_checkpoint = restored
            for _, w in self._pipes.values():
                os.close(w)  # the payload (or the restored tree) holds its own copies now
            self.registry.upsert(
                WorkloadRecord(
                    name=self.name,
                    node=self.spec.node,
                    state=WorkloadState.RUNNING,
                    engine=self.spec.engine,
                    pid=self.pid,
                    wrapper_pid=os.getpid(),
                    socket=str(self.sock_path),
                    command=self.spec.command,
                    cwd=self.spec.cwd,
                    labels=self.spec.labels,
                    checkpoint_every=self.spec.checkpoint_every,
                    last_checkpoint=restored,
                    started_at=utcnow(),
                    message=f"restored from {restored}" if restored else "started fresh",
                )
            )
            server.start()
            self._install_signals()
            threading.Thread(target=self._waiter, name="waiter", daemon=True).start()
            log.info("wrapper.running", workload=self.name, pid=self.pid, restored=restored)
            return self._loop()
        finally:
            server.close()
            self.coop_link.unlink(missing_ok=True)
            if self._lock_fd is not None:
                os.close(self._lock_fd)

    def requests_put(self, op: str, args: dict[str, Any], replies: queue.Queue[Any]) -> None:
        self.requests.put(_Request(op, args, replies))

    def _loop(self) -> int:
        every = self.spec.checkpoint_every
        next_due = time.monotonic() + every if every else None
        while True:
            timeout = max(0.0, next_due - time.monotonic()) if next_due else None
            try:
                req = self.requests.get(timeout=timeout)
            except queue.Empty:
                req = _Request("checkpoint")
                next_due = time.monotonic() + every if every else None
            if req.op == "exited":
                return self._finish()
            if self._exit is not None and req.op == "checkpoint":
                continue
            self._handle(req)

    def _finish(self) -> int:
        status = self._exit if self._exit is not None else 0
        code = os.waitstatus_to_exitcode(status)
        if self._stopping and self._last_checkpoint:
            state, exit_status, rc = WorkloadState.STOPPED, None, 0
        elif code == 0:
            state, exit_status, rc = WorkloadState.COMPLETED, "exit 0", 0
        else:
            exit_status = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            state, rc = WorkloadState.FAILED, (128 - code if code < 0 else code)
            if self._stopping:  # terminated on request: not a failure of the payload
                state = WorkloadState.STOPPED
        self.registry.update(self.name, state=state, exit_status=exit_status)
        log.info("wrapper.exit", workload=self.name, state=state.value, exit_status=exit_status)
        for t in self._copiers:  # drain the payload's output before we go
            t.join(timeout=2.0)
        return rc


def _copy(src: int, dst: int) -> None:
    """Copy a payload pipe to one of our fds until every writer has closed it."""
    while True:
        try:
            data = os.read(src, 65536)
        except OSError:
            return
        if not data:
            os.close(src)
            return
        try:
            os.write(dst, data)
        except OSError:
            continue  # our own stdout went away; keep draining so the payload never blocks


def run(settings: Settings, spec: RunSpec) -> int:
    """Run ``spec`` in the foreground; returns the wrapper's exit code (the payload's)."""
    return Supervisor(settings, spec).run()
