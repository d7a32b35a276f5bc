"""``core.processes``: the one answer to "is it alive, is it still the one we mean"."""

from __future__ import annotations

import os
import subprocess

from core import processes


def test_a_live_process_its_start_and_a_zombie() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        start = processes.start_time(child.pid)
        assert start is not None
        assert processes.alive(child.pid)
        assert processes.same_process(child.pid, start)
        assert not processes.same_process(child.pid, start + 1)  # a pid given to another
    finally:
        child.kill()
    # Killed, not yet reaped: a zombie is not alive, nor the process we meant.
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
    assert not processes.alive(child.pid)
    assert not processes.same_process(child.pid, start)
    child.wait()
    assert not processes.alive(child.pid)
    assert processes.start_time(child.pid) is None


def test_nothing_and_a_process_we_may_not_signal() -> None:
    assert not processes.alive(None) and not processes.alive(0)
    assert processes.start_time(None) is None
    assert not processes.same_process(None, 1)
    assert processes.alive(1)  # init: alive whether or not we may signal it
