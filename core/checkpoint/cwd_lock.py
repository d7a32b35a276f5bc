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

Limits: it orders clawpoint's own dumps (any tenant: the lock is on the directory's inode,
open to whoever can read ``/proc/PID/cwd``); a CRIU run by something else is not ordered.
A task whose cwd cannot be opened (gone, no permission) is dumped without the lock.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import structlog

log = structlog.get_logger(__name__)

POLL_S = 0.02


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
        yield time.monotonic() - t0
    finally:
        if held:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
