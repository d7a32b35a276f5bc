"""eventfd, timerfd and inotify in one event loop, each checked every step.

- eventfd: the counter written must be the counter read back.
- timerfd: periodic (50 ms). CRIU sometimes restores a periodic timerfd disarmed; as an
  event loop would, a timer that stays silent for 1 s is re-armed (and says so) rather than
  waited on forever. It must then fire again.
- inotify: a watched private directory; each file created there must produce exactly its
  IN_CREATE event, in order. CRIU carries the watches but drops the events queued at the
  dump (criu/fsnotify.c warns "inotify events will be dropped"; checkpoint-restore/criu#48):
  a program restored must rescan what it watches. So this one, when it finds itself
  restored (a new kernel task: ``start_ticks``), forgets the events of the files it made
  before (and accepts them should they come after all); every file made after the restore
  must still produce its event, in order.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import struct
import sys
import time

from _selfcheck import fail, report, start_ticks

libc = ctypes.CDLL(None, use_errno=True)
IN_CREATE = 0x100
CLOCK_MONOTONIC = 1


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", Timespec), ("it_value", Timespec)]


def arm(tfd: int) -> None:
    spec = Itimerspec(Timespec(0, 50_000_000), Timespec(0, 50_000_000))
    if libc.timerfd_settime(tfd, 0, ctypes.byref(spec), None) != 0:
        fail(f"timerfd_settime: errno {ctypes.get_errno()}")


watched = sys.argv[1]
efd = os.eventfd(0, os.EFD_NONBLOCK)
tfd = libc.timerfd_create(CLOCK_MONOTONIC, os.O_NONBLOCK)
ifd = libc.inotify_init1(os.O_NONBLOCK)
if min(tfd, ifd) < 0:
    fail(f"timerfd/inotify: errno {ctypes.get_errno()}")
arm(tfd)
if libc.inotify_add_watch(ifd, watched.encode(), IN_CREATE) < 0:
    fail(f"inotify_add_watch: errno {ctypes.get_errno()}")

step = 0
last_tick = time.monotonic()
pending: list[str] = []
lost: set[str] = set()  # made before a restore: their events may have been dropped
born = start_ticks()
while True:
    if start_ticks() != born:
        born = start_ticks()
        if pending:
            print(f"restored: {len(pending)} queued inotify event(s) may be lost", flush=True)
        for made in pending:
            os.unlink(os.path.join(watched, made))
        lost.update(pending)
        pending.clear()
    os.eventfd_write(efd, step + 1)
    if os.eventfd_read(efd) != step + 1:
        fail(f"eventfd: wrong counter at step {step}")
    name = f"f{step}"
    open(os.path.join(watched, name), "w").close()  # noqa: SIM115
    pending.append(name)
    ready, _, _ = select.select([tfd, ifd], [], [], 0.2)
    if tfd in ready:
        try:
            os.read(tfd, 8)
            last_tick = time.monotonic()
        except BlockingIOError:
            pass
    elif time.monotonic() - last_tick > 1.0:
        print(f"timerfd silent for 1 s at step {step}: re-armed", flush=True)
        arm(tfd)
        last_tick = time.monotonic()
    try:
        buf = os.read(ifd, 65536)
    except BlockingIOError:
        buf = b""
    off = 0
    while off < len(buf):
        _wd, mask, _cookie, length = struct.unpack_from("iIII", buf, off)
        got = buf[off + 16 : off + 16 + length].rstrip(b"\0").decode()
        off += 16 + length
        if got in lost and mask & IN_CREATE:
            lost.discard(got)
        elif not pending or got != pending[0] or not mask & IN_CREATE:
            fail(f"inotify: event {got!r} but expected {pending[:1]}")
        else:
            pending.pop(0)
        with contextlib.suppress(FileNotFoundError):  # a lost one's file is gone already
            os.unlink(os.path.join(watched, got))
    if len(pending) > 20:
        fail(f"inotify: {len(pending)} creations without an event")
    step += 1
    report(step, every=10)
    time.sleep(0.02)
