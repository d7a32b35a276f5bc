"""stdin as a program finds it. ``devnull``: stdin (the wrapper's /dev/null) gives EOF at
every read. ``pipe``: a child process writes numbered lines into a pipe that becomes the
parent's stdin (as in ``producer | consumer`` inside the workload); every line must arrive
once, in order."""

from __future__ import annotations

import os
import sys
import time

from _selfcheck import fail, report

mode = sys.argv[1]
if mode == "pipe":
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        n = 0
        while True:
            os.write(w, b"line %d\n" % n)
            n += 1
            time.sleep(0.01)
    os.close(w)
    os.dup2(r, 0)
    os.close(r)
    sys.stdin = os.fdopen(0, "r", buffering=1)
step = 0
expect = 0
while True:
    if mode == "devnull":
        if os.read(0, 100) != b"":
            fail("stdin: /dev/null gave data")
    else:
        line = sys.stdin.readline()
        if line != f"line {expect}\n":
            fail(f"stdin: got {line!r}, expected line {expect}")
        expect += 1
    step += 1
    report(step, every=10)
    if mode == "devnull":
        time.sleep(0.02)
