"""Starting the payload: fresh in its own PID namespace, or restored by CRIU; its output pipes.

The wrapper owns the payload's stdout/stderr pipes and copies them to its own stdout/stderr
(threads), so no regular file the payload writes can grow behind CRIU's back. A fresh CRIU
payload runs as ``unshare --pid --fork --kill-child setsid CMD``: CMD is the init of a new
PID namespace (a session leader inside it), and dies with ``unshare``; ``unshare`` itself
gets SIGKILL when the wrapper dies (parent-death signal), so a payload never outlives its
wrapper unmanaged. Cooperative payloads run directly (no root needed).

Limits: Linux only. Parent-death signals are tied to the *thread* that spawned the child,
so payloads must be started from the wrapper's main thread.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from core import errors
from core.checkpoint import engine

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_libc = ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> None:
    """Orphans of our descendants (a restored tree) are reparented to us, so we can wait."""
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _die_with_parent() -> None:  # runs in the child between fork and exec
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Pipes:
    """stdout/stderr pipes for one payload incarnation, pumped to our own fds."""

    def __init__(self, out_fd: int = 1, err_fd: int = 2) -> None:
        self.out_r, self.out_w = os.pipe()
        self.err_r, self.err_w = os.pipe()
        self._targets = ((self.out_r, out_fd), (self.err_r, err_fd))
        self._threads: list[threading.Thread] = []

    @property
    def inodes(self) -> tuple[int, int]:
        return os.fstat(self.out_r).st_ino, os.fstat(self.err_r).st_ino

    def start(self) -> None:
        """Close our write ends (the payload holds its own) and pump the read ends."""
        for fd in (self.out_w, self.err_w):
            os.close(fd)
        self.out_w = self.err_w = -1
        for src, dst in self._targets:
            t = threading.Thread(target=_pump, args=(src, dst), daemon=True, name=f"pump-{dst}")
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


def _pump(src: int, dst: int) -> None:
    try:
        while True:
            data = os.read(src, 1 << 16)
            if not data:
                break
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
        self.proc = proc  # unshare (criu) or the command itself (cooperative); None if restored
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


def start_fresh(
    command: list[str],
    *,
    pipes: Pipes,
    env: dict[str, str],
    cwd: str | None,
    pid_namespace: bool,
) -> Payload:
    argv = list(command)
    if pid_namespace:
        unshare, setsid = shutil.which("unshare"), shutil.which("setsid")
        if unshare is None or setsid is None:
            raise errors.EngineUnavailable(
                "the criu engine needs 'unshare' and 'setsid' (util-linux) to run the workload "
                "in its own PID namespace",
                hint="apt-get install util-linux, or use the cooperative engine",
            )
        argv = [unshare, "--pid", "--fork", "--kill-child", setsid, *argv]
    try:
        proc = subprocess.Popen(  # noqa: S603 (argv list from the validated spec)
            argv,
            stdin=subprocess.DEVNULL,
            stdout=pipes.out_w,
            stderr=pipes.err_w,
            env=env,
            cwd=cwd,
            preexec_fn=_die_with_parent,  # only a prctl: safe between fork and exec
        )
    except OSError as exc:
        raise errors.InvalidInput(
            f"cannot start {command[0]!r}: {exc}",
            hint="check the command and its working directory exist and are executable",
        ) from exc
    if not pid_namespace:
        return Payload(proc.pid, proc)
    # The namespace init is unshare's only child: wait until it exists.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = engine.children(proc.pid)
        if kids:
            return Payload(kids[0], proc)
        if proc.poll() is not None:
            # Gone before we saw it: either the command ended at once (``sh -c 'exit 7'``:
            # unshare exits with its status, which the wrapper reports as the payload's), or
            # unshare itself could not make the namespace. Only a probe tells them apart.
            if _pid_namespaces_work(argv[0]):  # argv[0] is unshare here
                return Payload(proc.pid, proc)
            break
        time.sleep(0.005)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    raise errors.EngineUnavailable(
        f"the workload could not start in its own PID namespace ({' '.join(argv[:4])} ...)",
        hint="check that this kernel allows PID namespaces (unshare --pid --fork true), "
        "or use the cooperative engine",
    )


def _pid_namespaces_work(unshare: str) -> bool:
    try:
        done = subprocess.run(  # noqa: S603 (absolute path from shutil.which, fixed argv)
            [unshare, "--pid", "--fork", "true"],
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


def progress_of(path: Path) -> dict[str, object] | None:
    """The payload's last progress report (the progress protocol), if any."""
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
