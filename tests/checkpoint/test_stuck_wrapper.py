"""A wrapper that does not come up in time is not left a mystery: ``kill -QUIT`` writes its
threads' stacks to its log (``core.wrapper.__main__``), and the launcher's error carries them."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from core import errors
from core.specs import RunSpec
from core.wrapper import launch
from tests.checkpoint.conftest import Harness, counter_cmd

pytestmark = pytest.mark.criu  # the wrapper under test checkpoints with CRIU


def test_sigquit_writes_the_stacks_and_changes_nothing(harness: Harness) -> None:
    h = harness
    rec = h.launch("quit", counter_cmd(1))
    assert rec.wrapper_pid is not None
    assert launch._catches(rec.wrapper_pid, signal.SIGQUIT)
    subprocess.run(["kill", "-QUIT", str(rec.wrapper_pid)], check=True)
    # faulthandler writes thread by thread: wait for the supervisor's frame, not the first line
    # (the log read between two threads' stacks once failed CI).
    h.wait_for("the supervisor's stack in the log", lambda: "supervisor.py" in h.log_text())
    assert "Thread 0x" in h.log_text()
    time.sleep(0.3)
    assert h.client("quit").status()["running"]  # it goes on


def test_the_launchers_timeout_error_carries_the_stacks(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = harness

    def never_reported(check: Callable[[], Any], *, timeout_s: float, every_s: float) -> None:
        # The wrapper comes up meanwhile; the launcher acts as if it never reported RUNNING.
        h.wait_for("the wrapper", lambda: h.registry.get("late") is not None)
        time.sleep(0.5)

    monkeypatch.setattr(launch, "poll_until", never_reported)
    spec = RunSpec(name="late", command=counter_cmd(1), home=str(h.settings.home))
    h.started.append("late")
    with pytest.raises(errors.OperationFailed) as failed:
        launch.launch_detached(h.settings, spec, wait_s=5)
    assert "did not report RUNNING" in failed.value.message
    assert "Thread 0x" in failed.value.message, failed.value.message
