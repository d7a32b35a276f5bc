"""A restore stopped mid-way (its images failed verification) never hangs the wrapper
(``core.checkpoint.criu_restore._end_half_restored``): tasks CRIU left may hold its output pipes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from core.checkpoint import criu_restore

# A stand-in for a killed CRIU: it leaves a task behind that holds its stdout and is not our
# child (so it cannot be found and killed as one), as a half-restored task forked after our
# look at /proc would.
_LEAVES_A_HOLDER = (
    "import subprocess, sys, time\n"
    "h = subprocess.Popen(['sleep', '120'], stdout=sys.stdout, stderr=sys.stderr)\n"
    "print(h.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def test_leftovers_holding_the_pipes_are_not_waited_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(criu_restore, "REAP_S", 1.0)
    before = criu_restore._children()
    proc = subprocess.Popen(
        [sys.executable, "-c", _LEAVES_A_HOLDER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    holder = int(proc.stdout.readline())
    proc.kill()
    t0 = time.monotonic()
    criu_restore._end_half_restored(proc, before)
    assert time.monotonic() - t0 < 10
    assert proc.returncode is not None
    os.kill(holder, signal.SIGKILL)
