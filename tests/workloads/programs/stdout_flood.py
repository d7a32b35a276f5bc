"""Heavy stdout: numbered lines as fast as the pipe takes them, about 2 MB/s. The test reads
the log: no number may be missing, and one may repeat only as a failover's replay."""

from __future__ import annotations

import sys
import time

from _selfcheck import report

pad = "x" * 90
n = 0
step = 0
out = sys.stdout
while True:
    out.write("".join(f"line {i} {pad}\n" for i in range(n, n + 200)))
    out.flush()
    n += 200
    step += 1
    report(step, every=10)
    time.sleep(0.01)
