"""A daemon's habit: stderr pointed at /dev/null (nginx points fd 2 at its error log), stdout
kept. After a restore only this program held the old stderr pipe's write end, so the new
wrapper's stderr pipe reaches end-of-file at once; every later checkpoint must still work.
The program checks that fd 2 stays /dev/null and that its step count never goes back."""

from __future__ import annotations

import os
import time

from _selfcheck import fail, report

null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 2)
os.close(null)
devnull = os.stat(os.devnull)
step = 0
while True:
    st = os.fstat(2)
    if (st.st_dev, st.st_ino) != (devnull.st_dev, devnull.st_ino):
        fail("quiet-stderr: fd 2 is no longer /dev/null")
    os.write(2, b"into the void\n")
    step += 1
    report(step, every=10)
    time.sleep(0.02)
