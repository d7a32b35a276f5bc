"""A program whose own check fails shortly after it is restored (or that stays healthy).

``restore_canary.py MODE``: it counts, reporting progress; it notices a restore by its
process start time changing (memory is restored, the kernel task is new). Then, by MODE:
``crash`` waits 1 s and fails its check (exit 3); ``at-once`` fails it at once;
``regress`` goes back to step 0 and keeps running, as a program restarted from scratch
would; ``healthy`` goes on.
"""

from __future__ import annotations

import sys
import time

from _selfcheck import fail, report, start_ticks

mode = sys.argv[1]
born = start_ticks()
step = 0
restored_at: float | None = None
while True:
    if restored_at is None and start_ticks() != born:
        restored_at = time.monotonic()
        print(f"restored at step {step}", flush=True)
        if mode == "regress":
            step = 0
        if mode == "at-once":
            fail(f"canary: restored state rejected at once at step {step}")
    if mode == "crash" and restored_at is not None and time.monotonic() - restored_at > 1:
        fail(f"canary: restored state rejected at step {step}")
    step += 1
    report(step, every=10)
    time.sleep(0.02)
