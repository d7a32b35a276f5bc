"""The cooperative engine through the wrapper (no CRIU, no root needed) and its timeout."""

from __future__ import annotations

import signal
import sys

import pytest

from core import errors
from core.checkpoint import cooperative
from core.config import load_settings
from core.model import WorkloadState
from tests.checkpoint.conftest import Harness, counter_cmd


def test_cooperative_round_trip(harness: Harness) -> None:
    h = harness
    h.launch("coop", counter_cmd(8), engine="cooperative")
    h.wait_step("coop", 5)
    info = h.client("coop").checkpoint(stop=True)
    assert info.engine == "cooperative" and {"state.json", "COMPLETE"} <= {
        f.name for f in info.files
    }
    h.wait_state("coop", WorkloadState.STOPPED)
    again = h.launch("coop", counter_cmd(8), engine="cooperative")
    assert again.message == f"restored from {info.id}"
    saved = int(info.extra["progress"]["step"])
    assert h.wait_step("coop", saved) >= saved
    h.wait_for("the resume line", lambda: "resumed from step" in h.log_text())
    assert "STATE CHECK FAILED" not in h.log_text()


def test_cooperative_timeout_names_dir_and_marker(harness: Harness) -> None:
    (harness.settings.home / "config.toml").write_text(
        "[checkpoint]\ncooperative_timeout_s = 0.5\n"
    )
    harness.settings = load_settings(harness.settings.home)
    # The app handles the signal but never writes the marker (a handler that does nothing).
    ignore = "import signal,time; signal.signal(signal.SIGUSR1, lambda *a: None); time.sleep(60)"
    harness.launch("deaf", [sys.executable, "-c", ignore], engine="cooperative")
    pid = harness.registry.require("deaf").pid
    assert pid is not None
    harness.wait_for("the handler", lambda: bool(cooperative.handles_signal(pid, signal.SIGUSR1)))
    with pytest.raises(errors.CheckpointError) as exc:
        harness.client("deaf").checkpoint(stop=False)
    assert "COMPLETE" in exc.value.message and "deaf" in exc.value.message
    assert "CLAWPOINT_CHECKPOINT_DIR" in exc.value.hint
    assert harness.registry.require("deaf").state is WorkloadState.RUNNING
    assert harness.registry.require("deaf").last_checkpoint is None


def test_app_without_a_handler_is_not_killed_by_a_request(harness: Harness) -> None:
    """SIGUSR1's default action terminates: a request to an app that cannot handle it
    (yet) is refused instead of killing the workload."""
    harness.launch(
        "nohandler", [sys.executable, "-c", "import time; time.sleep(60)"], engine="cooperative"
    )
    with pytest.raises(errors.CheckpointError) as exc:
        harness.client("nohandler").checkpoint(stop=False)
    assert "no handler for SIGUSR1" in exc.value.message
    assert harness.registry.require("nohandler").state is WorkloadState.RUNNING
