"""Reports progress the protocol's way (a temporary file, then a rename over the report) and,
at step HOLD, waits between the two until DIR/go exists (DIR/held says it waits there).

A checkpoint taken then holds a program whose next act is the rename. Every restore of it
must find the temporary file again, though the program's later run renamed it away; one
that does not prints FAIL and exits 3. Usage: ``held_report.py DIR HOLD``."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from _selfcheck import fail

work, hold = Path(sys.argv[1]), int(sys.argv[2])
report = Path(os.environ["CLAWPOINT_PROGRESS_FILE"])
step = 0
while True:
    step += 1
    temp = report.with_name(f".{report.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps({"step": step, "ts": time.time()}))
    if step == hold:
        (work / "held").touch()
        while not (work / "go").exists():
            time.sleep(0.05)
    try:
        os.replace(temp, report)
    except FileNotFoundError:
        fail(f"the temporary report of step {step} is gone")
    print(f"progress {step}", flush=True)
    time.sleep(0.1)
