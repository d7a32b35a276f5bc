"""A benchmark workload: holds N MiB and rewrites a fixed share of it per second, checking
what it rewrites, and reports its progress (``step``, ``ts``) every step.

``python bench/dirty_workload.py --mb 1024 --dirty-percent 5 [--step-seconds 0.02]``

Every page's first word holds the step at which the page was last written, and a table
(part of the state) remembers it: before a page is rewritten its word is compared with the
table, and each step also compares 32 pages picked at random across the whole buffer, so
memory that a restore lost or mixed up is caught (``STATE CHECK FAILED``, exit 3). Unlike
``core.workloads.counter``, which touches every page every step, this one touches about
``dirty-percent`` of its pages per second: the access pattern post-copy migration is for.
Limits: single-threaded; synthetic state; speaks only the progress protocol.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from array import array
from pathlib import Path

PAGE = 4096


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--dirty-percent", type=float, default=5.0, help="of all pages, per second")
    ap.add_argument("--step-seconds", type=float, default=0.02)
    args = ap.parse_args(argv)

    pages = args.mb * 256
    buf = bytearray(pages * PAGE)
    words = memoryview(buf).cast("Q")
    written = array("Q", [0]) * pages  # the step each page was last written at
    words[:: PAGE // 8] = written  # touch every page once: all of it is real state
    per_step = max(1, round(pages * args.dirty_percent / 100 * args.step_seconds))
    progress = os.environ.get("CLAWPOINT_PROGRESS_FILE")
    rng = random.Random(7)
    cursor = 0
    step = 0
    print(f"dirty workload: {args.mb} MiB, {per_step} pages per step", flush=True)
    while True:
        step += 1
        for _ in range(per_step):
            word = cursor * (PAGE // 8)
            if words[word] != written[cursor]:
                print(f"STATE CHECK FAILED at step {step}, page {cursor}", flush=True)
                return 3
            words[word] = written[cursor] = step
            cursor = (cursor + 1) % pages
        for page in rng.sample(range(pages), 32):
            if words[page * (PAGE // 8)] != written[page]:
                print(f"STATE CHECK FAILED at step {step}, sampled page {page}", flush=True)
                return 3
        if progress:
            tmp = Path(progress).with_name(f".{Path(progress).name}.tmp")
            tmp.write_text(json.dumps({"step": step, "verified": True, "ts": time.time()}))
            os.replace(tmp, progress)
        time.sleep(args.step_seconds)


if __name__ == "__main__":
    sys.exit(main())
