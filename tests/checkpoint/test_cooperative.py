"""The cooperative engine through the wrapper (no root or CRIU needed)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

from core import errors
from core.config import Settings
from core.model import WorkloadState
from core.store.store import CheckpointStore
from core.wrapper.control import ControlClient
from core.wrapper.launch import launch_detached
from core.wrapper.spec import RunSpec
from core.wrapper.supervisor import run
from tests.checkpoint.conftest import counter_spec, progress_step, registry, wait_for

pytestmark = pytest.mark.usefixtures("cleanup_workloads")


def test_cooperative_round_trip(settings: Settings) -> None:
    spec = counter_spec(settings, "k1", engine="cooperative", mb=20)
    rec = launch_detached(settings, spec)
    wait_for(lambda: progress_step(settings, "k1") >= 10, what="counting")
    info = ControlClient(Path(str(rec.socket))).checkpoint(stop=True)
    saved = json.loads(
        (CheckpointStore(settings.checkpoint_dir).images_dir(info.id) / "counter.json").read_text()
    )
    assert saved["counter"] >= 10 and {f.name for f in info.files} >= {"COMPLETE", "counter.json"}
    wait_for(lambda: registry(settings).require("k1").state is WorkloadState.STOPPED,
             what="STOPPED")  # fmt: skip
    rec2 = launch_detached(settings, spec)
    assert rec2.last_checkpoint == info.id
    wait_for(lambda: progress_step(settings, "k1") > saved["counter"], what="resumed")
    ControlClient(Path(str(rec2.socket))).terminate(timeout_s=30)
    log = (settings.log_dir / "k1.log").read_text()
    assert f"counter start {saved['counter']}" in log and "STATE CHECK FAILED" not in log


def test_cooperative_timeout_names_dir_and_marker(settings: Settings) -> None:
    settings.checkpoint.cooperative_timeout_s = 1.0
    spec = RunSpec(name="k2", engine="cooperative", home=str(settings.home),
                   command=[sys.executable, "-c",
                            "import signal,time\nsignal.signal(signal.SIGUSR1, lambda *a: None)\n"
                            "time.sleep(30)"])  # fmt: skip
    result: dict[str, int] = {}
    t = threading.Thread(target=lambda: result.update(rc=run(settings, spec)))
    t.start()
    wait_for(lambda: (settings.run_dir / "k2.sock").exists(), what="socket")
    client = ControlClient(settings.run_dir / "k2.sock")
    with pytest.raises(errors.CheckpointError, match="COMPLETE") as exc_info:
        client.checkpoint(stop=False)
    assert "images" in exc_info.value.message and exc_info.value.hint
    assert CheckpointStore(settings.checkpoint_dir).list("k2") == []
    client.terminate(timeout_s=30)
    t.join(30)
    assert result["rc"] != 0 or registry(settings).require("k2").state is WorkloadState.STOPPED


def test_bad_spec_is_refused() -> None:
    with pytest.raises(errors.InvalidInput, match="invalid workload name"):
        RunSpec(name="../x", command=["true"], home="/tmp")
    with pytest.raises(ValueError):
        RunSpec(name="x", command=[], home="/tmp")
