"""Post-copy restore: CRIU's ``lazy-pages`` daemon feeds a restored tree its memory.

A plain ``criu restore`` copies every page into the new process before it can run, which is
most of a restore's time for a large workload. With ``--lazy-pages`` CRIU restores the tree
without its anonymous memory and registers it with userfaultfd; a ``criu lazy-pages`` daemon
serves each first touch of a page from the images and copies the rest in the background,
then exits. The tree runs as soon as CRIU returns.

Here the daemon reads the images of a published checkpoint on this host (memory is faulted
in from the checkpoint, not from the source process: CRIU's ``dump --lazy-pages`` page
server fails on this kernel, "page-pipe: tee: Operation not permitted", so a checkpoint is
always complete before the source is gone, which is also the safer order).

Safety: a tree whose daemon dies before it copied everything would block on, or read zeros
from, the pages it never got. So the daemon is watched: if it ends with an error, the tree is
killed (its wrapper then records it failed, and it is restored again from the same, intact
checkpoint). A dump waits for the daemon to finish first (``wait_done``).

Limits: needs userfaultfd for non-cooperative use (``criu check --feature uffd-noncoop``;
``supported``); one daemon per restored tree; this process's trees only.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from core import errors, logs
from core.checkpoint import engine, nsinit
from core.polling import poll_until

log = logs.get_logger(__name__)

_SOCKET = "lazy-pages.socket"
_daemons: dict[int, LazyDaemon] = {}
_lock = threading.Lock()


def _feature(criu_path: str, feature: str) -> bool:
    exe = shutil.which(criu_path)
    if exe is None:
        return False
    try:
        done = subprocess.run(  # noqa: S603 (argv list)
            [exe, "check", "--feature", feature], capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@functools.lru_cache(maxsize=4)
def supported(criu_path: str = "criu") -> bool:
    """Can CRIU restore lazily here (userfaultfd for a non-cooperative process)?

    Not without privilege: the restored task registers its memory with a userfaultfd that
    handles kernel faults, which the kernel grants only with CAP_SYS_PTRACE in the initial
    user namespace or ``vm.unprivileged_userfaultfd = 1`` (fs/userfaultfd.c), and an ordinary
    user's CRIU has neither; such a move restores stop-and-copy instead."""
    if not nsinit.privileged():
        return False
    return _feature(criu_path, "uffd-noncoop")


@functools.lru_cache(maxsize=4)
def dirty_tracking(criu_path: str = "criu") -> bool:
    """Does the kernel track dirty pages (soft-dirty), which iterative pre-copy needs?"""
    return _feature(criu_path, "mem_dirty_track")


class LazyDaemon:
    """One ``criu lazy-pages`` process serving one restored tree."""

    def __init__(self, proc: subprocess.Popen[bytes], start_s: float, logfile: Path) -> None:
        self.proc = proc
        self.start_s = start_s
        self.logfile = logfile
        self.done = threading.Event()
        self.copied_s: float | None = None  # from the tree's restore to the last page
        self.failed: str | None = None

    def adopt(self, pid: int) -> None:
        """Watch the daemon for the tree rooted at ``pid`` (restored just now)."""
        t0 = time.perf_counter()
        with _lock:
            _daemons[pid] = self

        def watch() -> None:
            code = self.proc.wait()
            self.copied_s = time.perf_counter() - t0
            if code != 0:
                self.failed = f"criu lazy-pages exited {code} (see {self.logfile})"
                log.error("criu.lazy_pages_failed", pid=pid, error=self.failed)
                engine.kill_tree(pid)  # never let it run on memory it does not have
            else:
                log.info("criu.lazy_pages_done", pid=pid, copied_s=round(self.copied_s, 3))
            self.done.set()

        threading.Thread(target=watch, name=f"lazy-pages-{pid}", daemon=True).start()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.done.set()


def start(
    exe: str, images_dir: Path, work_dir: Path, *, env: Mapping[str, str] | None = None
) -> LazyDaemon:
    """Start the daemon on ``images_dir`` and wait until it listens (its socket in
    ``work_dir``, where ``criu restore --lazy-pages -W work_dir`` looks for it)."""
    sock = work_dir / _SOCKET
    sock.unlink(missing_ok=True)  # a daemon killed earlier leaves its socket behind
    logfile = work_dir / "criu-lazy-pages.log"
    argv = [exe, "lazy-pages", "-D", str(images_dir), "-W", str(work_dir), "-o", str(logfile)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(  # noqa: S603 (argv list)
            [*argv, "-v2"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=None if env is None else dict(env),
        )
    except OSError as exc:
        raise errors.CheckpointError(
            f"criu lazy-pages did not start: {exc}",
            hint="set [migration] mode = 'stop-and-copy' to restore without it",
        ) from exc
    left = t0 + 10.0 - time.perf_counter()
    poll_until(lambda: sock.exists() or proc.poll() is not None, timeout_s=left, every_s=0.001)
    if not sock.exists():
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        raise errors.CheckpointError(
            f"criu lazy-pages did not come up (exit {proc.returncode}); see {logfile}",
            hint="set [migration] mode = 'stop-and-copy' to restore without it; the "
            "checkpoint is unchanged",
        )
    return LazyDaemon(proc, time.perf_counter() - t0, logfile)


def wait_done(pid: int, timeout_s: float = 600.0) -> None:
    """Before dumping ``pid``: let a post-copy restore of it finish copying its memory."""
    with _lock:
        daemon = _daemons.get(pid)
    if daemon is None:
        return
    if not daemon.done.wait(timeout_s):
        raise errors.CheckpointError(
            f"pid {pid} is still receiving its memory from a post-copy restore after "
            f"{timeout_s:.0f} s; not checkpointing it half-restored",
            hint=f"see {daemon.logfile}; retry once it is done",
        )
    with _lock:
        _daemons.pop(pid, None)
    if daemon.failed:
        raise errors.CheckpointError(
            f"the post-copy restore of pid {pid} failed: {daemon.failed}",
            hint="its tree was killed; restore it again from its checkpoint",
        )
