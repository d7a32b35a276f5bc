"""What every matrix program shares: progress lines and the progress protocol, and failing
loudly. Each program prints ``progress N`` as it goes and, when its own invariant breaks,
``FAIL <what>`` and exits 3."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import NoReturn

_PROGRESS = os.environ.get("CLAWPOINT_PROGRESS_FILE")


def report(step: int, every: int = 1) -> None:
    """Step ``step`` passed its check: tell the wrapper (atomically) and, every ``every``
    steps, the log."""
    if _PROGRESS:
        path = Path(_PROGRESS)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"step": step, "ts": time.time()}))
        os.replace(tmp, path)
    if step % every == 0:
        print(f"progress {step}", flush=True)


def fail(what: str) -> NoReturn:
    print(f"FAIL {what}", flush=True)
    sys.stdout.flush()
    os._exit(3)


def start_ticks() -> int:
    """This process's start time (clock ticks since boot): a restored process is a new
    kernel task, so the value changes across a CRIU restore while memory stays the same."""
    stat = Path("/proc/self/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])
