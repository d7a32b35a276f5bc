"""Starting the payload: fresh in its own PID namespace, or restored by CRIU; its output pipes.

The wrapper owns the payload's stdout/stderr pipes and copies them (threads) to its own
stdout/stderr, or for a detached wrapper to ``logs/NAME.out`` (rotated by size; the
wrapper's own lines stay in ``logs/NAME.log``), so no regular file the payload writes can
grow behind CRIU's back. A fresh CRIU
payload runs as ``python -I -S nsinit.py CMD`` (``core/checkpoint/nsinit.py``): CMD is the init
of a new PID namespace (a session leader inside it), and dies with that starter, which ends
the way CMD ended (so a SIGKILL is recorded as one) and gets SIGKILL when the wrapper dies
(parent-death signal), so a payload never outlives its wrapper unmanaged. Cooperative payloads run directly (no root needed).

Limits: Linux only. Parent-death signals are tied to the *thread* that spawned the child,
so payloads must be started from the wrapper's main thread.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from core import errors
from core.checkpoint import engine, nsinit
from core.config import Settings
from core.polling import poll_until
from core.specs import RunSpec, default_init
from core.wrapper.spec import output_path

_PR_SET_PDEATHSIG = 1
_NSINIT = Path(nsinit.__file__).resolve()
_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> None:
    """Orphans of our descendants (a restored tree) are reparented to us, so we can wait."""
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _then(join: Callable[[], None]) -> Callable[[], None]:
    def both() -> None:
        _die_with_parent()
        join()

    return both


class RotatingOutput:
    """The payload's stdout and stderr, appended to ``path`` and rotated by size.

    When a write would take the file past ``max_bytes`` it is renamed ``path.1`` (``.1`` to
    ``.2``, ..., the oldest beyond ``keep`` deleted) and a new one started. The cut falls
    after a newline, so lines stay whole: a file may exceed ``max_bytes`` by the rest of the
    line it ends with, up to twice ``max_bytes`` (longer lines are split).
    Only the wrapper writes these files (the payload writes to a pipe the wrapper reads), so
    rotation never touches a file in a checkpoint image. Thread-safe (both pumps write)."""

    def __init__(self, path: Path, *, max_bytes: int, keep: int) -> None:
        self.path = path
        self.max_bytes = max(1, max_bytes)
        self.keep = max(1, keep)
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = os.fstat(self._fd).st_size
        self._open_line = False  # the last byte written was not a newline

    @classmethod
    def of(cls, settings: Settings, name: str) -> RotatingOutput:
        """A detached wrapper's logs/NAME.out, rotated as ``[wrapper]`` says."""
        cfg = settings.wrapper
        return cls(output_path(settings, name), max_bytes=int(cfg.out_max_mib * 2**20),
                   keep=cfg.out_keep)  # fmt: skip

    def write(self, data: bytes) -> None:
        with self._lock:
            while data:
                room = max(0, self.max_bytes - self._size)
                if len(data) <= room:
                    self._write(data)
                    return
                cut = data.rfind(b"\n", 0, room) + 1
                if not cut and self._open_line:  # finish the line this file ends with first
                    nl = data.find(b"\n") + 1
                    end = nl or len(data)
                    if self._size + end <= 2 * self.max_bytes:
                        self._write(data[:end])
                        data = data[end:]
                        if nl:
                            self._rotate()
                        continue
                if not cut and not self._size:
                    cut = room  # one line longer than a whole file: it has to be split
                if cut:
                    self._write(data[:cut])
                    data = data[cut:]
                self._rotate()

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            self._size += n
            view = view[n:]
        self._open_line = not data.endswith(b"\n")

    def _rotate(self) -> None:
        os.close(self._fd)
        for i in range(self.keep, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            newer = self.path.with_name(f"{self.path.name}.{i - 1}") if i > 1 else self.path
            if newer.exists():
                os.replace(newer, older)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = 0
        self._open_line = False

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class Pipes:
    """stdout/stderr pipes for one payload incarnation, pumped to our own fds (1 and 2), or
    to ``output`` (a detached wrapper: logs/NAME.out)."""

    def __init__(self, output: RotatingOutput | None = None) -> None:
        self.out_r, self.out_w = os.pipe()
        self.err_r, self.err_w = os.pipe()
        self.output = output
        self._targets = ((self.out_r, 1), (self.err_r, 2))
        self._threads: list[threading.Thread] = []
        # Read once, now: a pump closes its read end at end-of-file (a restored program that
        # pointed stdout or stderr elsewhere never held this incarnation's write end), and a
        # later fstat would fail (EBADF) or, once the number is reused, describe another file.
        self._inodes = (os.fstat(self.out_r).st_ino, os.fstat(self.err_r).st_ino)

    @property
    def inodes(self) -> tuple[int, int]:
        """The pipes' inodes (what a dump declares external), valid for the object's life."""
        return self._inodes

    def start(self) -> None:
        """Close our write ends (the payload holds its own) and pump the read ends."""
        for fd in (self.out_w, self.err_w):
            os.close(fd)
        self.out_w = self.err_w = -1
        for src, dst in self._targets:
            t = threading.Thread(
                target=_pump, args=(src, dst, self.output), daemon=True, name=f"pump-{dst}"
            )
            t.start()
            self._threads.append(t)

    def close(self) -> None:
        for fd in (self.out_w, self.err_w):
            if fd >= 0:
                os.close(fd)
        self.out_w = self.err_w = -1

    def drain(self, timeout_s: float = 5.0) -> None:
        for t in self._threads:
            t.join(timeout_s)


def _pump(src: int, dst: int, output: RotatingOutput | None) -> None:
    try:
        while True:
            data = os.read(src, 1 << 16)
            if not data:
                break
            if output is not None:
                output.write(data)
                continue
            view = memoryview(data)
            while view:
                view = view[os.write(dst, view) :]
    except OSError:
        pass
    finally:
        os.close(src)


class Payload:
    """A running payload: its host pid and how to wait for it."""

    def __init__(self, pid: int, proc: subprocess.Popen[bytes] | None) -> None:
        self.pid = pid
        self.proc = proc  # the starter (criu) or the command itself (cooperative); None if restored
        self.exited = threading.Event()
        self.returncode: int | None = None

    def wait(self) -> int:
        """Block until the payload exits; returns its code (negative: killed by that signal)."""
        if self.proc is not None:
            code = self.proc.wait()
        else:
            try:
                _, status = os.waitpid(self.pid, 0)
                code = os.waitstatus_to_exitcode(status)
            except ChildProcessError:
                code = -signal.SIGKILL  # reaped elsewhere: it is gone, cause unknown
        self.returncode = code
        self.exited.set()
        return code


def how_it_starts(spec: RunSpec) -> RunSpec:
    """``spec`` with its ``init`` and ``user_namespace`` decided here, on the node it runs on,
    where it leaves them open: our init for a command that runs as another user
    (``specs.default_init``), and a user namespace of its own too on a host whose root cannot
    read such a process's limits otherwise (no CAP_SYS_RESOURCE); its dropped processes had
    no host privilege to lose. The wrapper records both, kept on every fresh start."""
    drops = default_init(spec.command)
    init = spec.init if spec.init is not None else drops
    own = spec.user_namespace
    own = own if own is not None else drops and nsinit.lacks_sys_resource()
    return spec.model_copy(update={"init": init, "user_namespace": own})


def start_fresh(
    command: list[str],
    *,
    pipes: Pipes,
    env: dict[str, str],
    cwd: str | None,
    pid_namespace: bool,
    init: bool = False,
    user_namespace: bool = False,
    join: Callable[[], None] | None = None,
) -> Payload:
    """Start ``command``; ``join`` (``cgroup_limits``) runs in the child before exec, so the
    payload is in its cgroup before it runs (its children inherit that). ``init``: our init
    is the namespace's first process and runs ``command`` as its child (nsinit ``--init``);
    ``user_namespace``: root's payload in a user namespace of its own (nsinit ``--userns``)."""
    argv = list(command)
    if pid_namespace:
        how = [*(["--init"] if init else []), *(["--userns"] if user_namespace else [])]
        argv = [sys.executable, "-I", "-S", str(_NSINIT), *how, *argv]
    if cwd is not None and not os.path.isdir(cwd):
        raise errors.InvalidInput(
            f"cannot start {command[0]!r} from scratch: its working directory {cwd} is gone",
            hint="a fresh start runs in the directory it was first run from: re-create it, or "
            "start the workload again with 'clawpoint run' from an existing directory "
            "(restores from a checkpoint do not need it)",
            details={"cwd": cwd},
        )
    try:
        proc = subprocess.Popen(  # noqa: S603 (argv list from the validated spec)
            argv,
            stdin=subprocess.DEVNULL,
            stdout=pipes.out_w,
            stderr=pipes.err_w,
            env=env,
            cwd=cwd,
            # Only a prctl and, with limits, a write to cgroup.procs: safe between fork and exec.
            preexec_fn=_die_with_parent if join is None else _then(join),
        )
    except OSError as exc:
        raise errors.InvalidInput(
            f"cannot start {command[0]!r}: {exc}",
            hint="check the command and its working directory exist and are executable",
        ) from exc
    if not pid_namespace:
        return Payload(proc.pid, proc)
    # The namespace init is the starter's only child: wait until it exists.

    def started() -> Payload | str | None:
        # In the namespace, not the starter's helper that maps a user namespace's ids.
        kids = [k for k in engine.children(proc.pid) if _in_other_pid_namespace(k, proc.pid)]
        if kids:
            return Payload(kids[0], proc)
        if proc.poll() is None:
            return None
        # Gone before we saw it: either the command ended at once (``sh -c 'exit 7'``:
        # the starter exits with its status, which the wrapper reports as the payload's),
        # or the namespace could not be made. Only a probe tells them apart.
        return Payload(proc.pid, proc) if _pid_namespaces_work() else "no namespace"

    found = poll_until(started, timeout_s=10, every_s=0.005)
    if isinstance(found, Payload):
        return found
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    raise errors.EngineUnavailable(
        "the workload could not start in its own PID namespace",
        hint="check that this kernel allows PID namespaces (unshare --pid --fork true, as root), "
        "or use the cooperative engine",
    )


def _in_other_pid_namespace(pid: int, than: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink(f"/proc/{than}/ns/pid")
    except OSError:
        return False


def _pid_namespaces_work() -> bool:
    try:
        done = subprocess.run(  # noqa: S603 (our own interpreter and starter, fixed argv)
            [sys.executable, "-I", "-S", str(_NSINIT), "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def restored(pid: int) -> Payload:
    return Payload(pid, None)
