"""An inotify watch whose queue holds one event at every checkpoint (``backlog``: the
event of the file it made is never read) or none (``drained``: read at once); then it only
reports progress."""

from __future__ import annotations

import ctypes
import os
import sys
import time

from _selfcheck import fail, report

libc = ctypes.CDLL(None, use_errno=True)
IN_CREATE = 0x100

mode, watched = sys.argv[1], sys.argv[2]
ifd = libc.inotify_init1(os.O_NONBLOCK)
if ifd < 0 or libc.inotify_add_watch(ifd, watched.encode(), IN_CREATE) < 0:
    fail(f"inotify: errno {ctypes.get_errno()}")
open(os.path.join(watched, "made"), "w").close()  # noqa: SIM115
if mode == "drained":
    time.sleep(0.1)
    if not os.read(ifd, 4096):
        fail("inotify: no event for the file made")
step = 0
while True:
    step += 1
    report(step, every=10)
    time.sleep(0.05)
