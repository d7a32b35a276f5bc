"""One dump at a time per working directory: CRIU's parasite borrows the task's cwd.

When the dumped task's ``/proc`` is not its own PID namespace's (a payload in a PID namespace
of its own under the host's ``/proc``, as the wrapper starts it), CRIU's parasite, running
inside the task, makes a directory ``proc.crtools`` *relative to the task's working
directory*, mounts a fresh proc there, opens it, detaches it and removes the directory
(criu/pie/parasite.c, ``get_proc_fd``). Two dumps at once of tasks that share a working
directory race on that name: the second ``mkdir`` fails with EEXIST and its dump fails
("Can't create a directory (-17)"). Several workloads started from one directory (a
checkout, a home) is ordinary, so clawpoint's dumps hold an exclusive ``flock`` on the
task's working directory itself (a directory fd: nothing is written into it).

A dump killed between the parasite's ``mkdir`` and its ``rmdir`` (a dump timeout, CRIU
killed) leaves ``proc.crtools`` behind, and every later dump of a task in that directory
would fail the same way: once the lock is held (so no dump of ours is using it), an empty
``proc.crtools`` is removed, and one with a proc still mounted on it (the parasite died
before its detach) is detached first. Anything else by that name (a non-empty directory, a
file) is left alone: it is not CRIU's, and the dump's own error names it.

Limits: it orders clawpoint's own dumps (any tenant: the lock is on the directory's inode,
open to whoever can read ``/proc/PID/cwd``); a CRIU run by something else is not ordered.
A task whose cwd cannot be opened (gone, no permission) is dumped without the lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager

from core import logs

log = logs.get_logger(__name__)

POLL_S = 0.02
# The name CRIU's parasite uses (criu/pie/parasite.c, ``proc_mountpoint``).
PARASITE_DIR = "proc.crtools"
_MNT_DETACH = 2
_PROC_SUPER_MAGIC = 0x9FA0


@contextmanager
def dump_slot(pid: int, timeout_s: float) -> Iterator[float]:
    """Hold the working directory of ``pid`` for one dump; yields the seconds waited for it.

    Waits at most ``timeout_s`` for another dump in the same directory (then goes on without
    the lock, and the dump may fail on its own, as it would have without this guard)."""
    try:
        fd = os.open(f"/proc/{pid}/cwd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield 0.0
        return
    t0 = time.monotonic()
    held = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() - t0 >= timeout_s:
                    log.warning("criu.cwd_busy", pid=pid, waited_s=round(timeout_s, 1))
                    break
                time.sleep(POLL_S)
        if held:
            clear_stale_parasite_dir(fd, pid)
        yield time.monotonic() - t0
    finally:
        if held:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def clear_stale_parasite_dir(cwd_fd: int, pid: int) -> bool:
    """Remove a ``proc.crtools`` a killed dump left in the directory ``cwd_fd`` (see the
    module doc); True when one was removed. Call only while holding the directory's lock."""
    try:
        st = os.stat(PARASITE_DIR, dir_fd=cwd_fd, follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        return False
    try:
        os.rmdir(PARASITE_DIR, dir_fd=cwd_fd)
    except OSError as exc:
        if exc.errno != errno.EBUSY or not _detach_proc(cwd_fd):
            log.warning("criu.parasite_dir_left", pid=pid, error=str(exc))
            return False
        try:
            os.rmdir(PARASITE_DIR, dir_fd=cwd_fd)
        except OSError as again:
            log.warning("criu.parasite_dir_left", pid=pid, error=str(again))
            return False
    log.warning("criu.parasite_dir_removed", pid=pid, why="left by a dump that was killed")
    return True


def _detach_proc(cwd_fd: int) -> bool:
    """Detach the proc mounted on ``proc.crtools`` (only a proc: never another mount)."""
    import ctypes  # the rare path only: ctypes costs tens of ms to import

    class Statfs(ctypes.Structure):  # struct statfs: f_type first, then 112 bytes on 64-bit
        _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 112)]

    path = f"/proc/self/fd/{cwd_fd}/{PARASITE_DIR}".encode()
    libc = ctypes.CDLL(None, use_errno=True)
    buf = Statfs()
    if libc.statfs(path, ctypes.byref(buf)) != 0 or buf.f_type != _PROC_SUPER_MAGIC:
        return False
    return bool(libc.umount2(path, _MNT_DETACH) == 0)
