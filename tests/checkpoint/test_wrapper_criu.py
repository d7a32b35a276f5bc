"""Real CRIU through the wrapper: a 200 MB self-verifying counter is checkpointed and restored."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from core import errors
from core.config import Settings
from core.model import WorkloadState
from core.state.workloads import WorkloadRecord
from core.store.store import CheckpointStore
from core.wrapper import fence
from core.wrapper.control import ControlClient
from core.wrapper.launch import launch_detached
from tests.checkpoint.conftest import alive, counter_spec, progress_step, registry, wait_for

pytestmark = [pytest.mark.criu, pytest.mark.usefixtures("need_criu", "cleanup_workloads")]


def _log(settings: Settings, name: str) -> str:
    return (settings.log_dir / f"{name}.log").read_text(errors="replace")


def _advance(settings: Settings, name: str, by: int = 10) -> int:
    start = progress_step(settings, name)
    wait_for(lambda: progress_step(settings, name) >= start + by, what=f"{name} to count")
    return progress_step(settings, name)


def test_leave_running_stop_and_resume(settings: Settings) -> None:
    spec = counter_spec(settings, "c1")
    rec = launch_detached(settings, spec)
    client = ControlClient(Path(str(rec.socket)))
    _advance(settings, "c1")
    events: list[str] = []
    info = client.checkpoint(stop=False, progress=lambda d, t, m: events.append(m))
    assert info.size_bytes > 200 << 20 and events[-1].endswith("published")
    assert info.timings["criu_frozen_time_s"] > 0
    _advance(settings, "c1")  # still running after a leave-running checkpoint
    assert alive(int(str(rec.pid)))

    stop = client.checkpoint(stop=True)
    at_stop = progress_step(settings, "c1")
    wait_for(lambda: registry(settings).require("c1").state is WorkloadState.STOPPED,
             what="STOPPED")  # fmt: skip
    assert not alive(int(str(rec.pid)))

    rec2 = launch_detached(settings, spec)
    assert rec2.last_checkpoint == stop.id and rec2.message == f"restored from {stop.id}"
    after = _advance(settings, "c1")
    assert after > at_stop  # resumed, never from zero
    status = ControlClient(Path(str(rec2.socket))).status()
    assert status["progress"]["step"] >= at_stop
    ControlClient(Path(str(rec2.socket))).terminate(timeout_s=30)
    log = _log(settings, "c1")
    assert "STATE CHECK FAILED" not in log
    assert log.count("counter start 0") == 1  # the restored copy did not start over


def test_second_wrapper_conflicts_and_kill_then_restore(settings: Settings) -> None:
    spec = counter_spec(settings, "c2", mb=50)
    rec = launch_detached(settings, spec)
    with pytest.raises(errors.OperationFailed, match="already has a running wrapper"):
        launch_detached(settings, spec, wait_s=20)
    client = ControlClient(Path(str(rec.socket)))
    _advance(settings, "c2")
    info = client.checkpoint(stop=False)
    at_ckpt = progress_step(settings, "c2")
    os.kill(int(str(rec.pid)), signal.SIGKILL)  # the payload dies: the wrapper records FAILED
    wait_for(lambda: registry(settings).require("c2").state is WorkloadState.FAILED,
             what="FAILED")  # fmt: skip
    assert registry(settings).require("c2").exit_status is not None
    rec2 = launch_detached(settings, spec)
    assert rec2.last_checkpoint == info.id
    assert _advance(settings, "c2") >= at_ckpt
    with pytest.raises(errors.Conflict):
        fence.fence(rec2)  # its wrapper is alive: fencing refuses
    ControlClient(Path(str(rec2.socket))).terminate(timeout_s=30)
    with pytest.raises(errors.Conflict, match="not running"):
        ControlClient(Path(str(rec2.socket))).status()


def test_restore_while_original_pid_is_taken(settings: Settings) -> None:
    spec = counter_spec(settings, "c3", mb=20)
    rec = launch_detached(settings, spec)
    _advance(settings, "c3")
    ControlClient(Path(str(rec.socket))).checkpoint(stop=True)
    original = int(str(rec.pid))
    wait_for(lambda: not alive(original), what="payload gone")
    # Occupy the original host pid with another process.
    squatter = None
    for _ in range(50):
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(original - 1))
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        if pid == original:
            squatter = pid
            break
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert squatter == original, "could not occupy the original pid"
    try:
        rec2 = launch_detached(settings, spec)
        assert rec2.pid != original and alive(squatter)
        _advance(settings, "c3")
        ControlClient(Path(str(rec2.socket))).terminate(timeout_s=30)
    finally:
        os.kill(squatter, signal.SIGKILL)
        os.waitpid(squatter, 0)


def test_corrupt_newest_falls_back_to_previous(settings: Settings) -> None:
    spec = counter_spec(settings, "c4", mb=20)
    rec = launch_detached(settings, spec)
    client = ControlClient(Path(str(rec.socket)))
    _advance(settings, "c4")
    good = client.checkpoint(stop=False)
    _advance(settings, "c4")
    bad = client.checkpoint(stop=True)
    wait_for(lambda: registry(settings).require("c4").state is WorkloadState.STOPPED,
             what="STOPPED")  # fmt: skip
    store = CheckpointStore(settings.checkpoint_dir)
    pages = max(store.images_dir(bad.id).glob("pages-*.img"), key=lambda p: p.stat().st_size)
    with open(pages, "r+b") as f:  # flip bytes in the middle, same size
        f.seek(pages.stat().st_size // 2)
        f.write(b"\xff" * 64)
    rec2 = launch_detached(settings, spec)
    assert rec2.last_checkpoint == good.id
    assert store.get(bad.id).status.value == "corrupt"
    _advance(settings, "c4")
    ControlClient(Path(str(rec2.socket))).terminate(timeout_s=30)
    assert "STATE CHECK FAILED" not in _log(settings, "c4")
    # explicitly asking for the corrupt one is refused with a clear message
    spec_bad = counter_spec(settings, "c4", mb=20, restore_from=bad.id)
    with pytest.raises(errors.OperationFailed, match="corrupt"):
        launch_detached(settings, spec_bad, wait_s=30)


def test_fence_kills_orphaned_payload(settings: Settings) -> None:
    rec = launch_detached(settings, counter_spec(settings, "c5", mb=10))
    _advance(settings, "c5", by=3)
    os.kill(int(str(rec.wrapper_pid)), signal.SIGKILL)
    wait_for(lambda: not fence.wrapper_alive(settings.run_dir / "c5.lock"), what="wrapper gone")
    record: WorkloadRecord = registry(settings).require("c5")
    if record.pid and alive(record.pid):
        assert fence.fence(record) is True
    assert not alive(int(str(rec.pid)))
