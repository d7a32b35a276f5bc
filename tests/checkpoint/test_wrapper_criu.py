"""The wrapper with real CRIU: stop + resume, crash recovery, busy PIDs, corrupt images."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from core import errors
from core.model import CheckpointStatus, WorkloadState
from core.store.store import CheckpointStore
from tests.checkpoint.conftest import Harness, counter_cmd

pytestmark = pytest.mark.criu


def _store(h: Harness) -> CheckpointStore:
    return CheckpointStore(
        h.settings.checkpoint_dir,
        keep=h.settings.store.keep_per_workload,
        key=h.settings.store_key_path,
    )


def test_checkpoint_stop_resume_and_crash_recovery(harness: Harness) -> None:
    h = harness
    first = h.launch("big", counter_cmd(200))
    h.wait_step("big", 5)
    info = h.client("big").checkpoint(stop=False)
    assert info.leave_running and info.size_bytes > 200 * 2**20
    assert "frozen_s" in info.timings and "criu_dump_s" in info.timings
    at_ckpt = h.wait_step("big", 1)
    h.wait_step("big", at_ckpt + 5)  # it keeps running after a leave-running checkpoint

    stop = h.client("big").checkpoint(stop=True)
    saved_step = int(stop.extra["progress"]["step"])
    h.wait_state("big", WorkloadState.STOPPED)

    second = h.launch("big", counter_cmd(200))
    assert second.message == f"restored from {stop.id}" and second.pid != first.pid
    resumed = h.wait_step("big", saved_step)
    assert resumed >= saved_step  # never from zero

    # SIGKILL the payload: the wrapper records FAILED; a new wrapper restores the last one.
    last = h.client("big").checkpoint(stop=False)
    assert second.pid is not None
    os.kill(second.pid, signal.SIGKILL)
    record = h.wait_state("big", WorkloadState.FAILED)
    assert record.exit_status == "signal SIGKILL"
    third = h.launch("big", counter_cmd(200))
    assert third.message == f"restored from {last.id}"
    h.wait_step("big", int(last.extra["progress"]["step"]) + 3)
    assert "STATE CHECK FAILED" not in h.log_text()


def _occupy_pid(target: int) -> int:
    """Start a sleeper whose host pid is exactly ``target`` (via ns_last_pid).

    Other processes on a busy machine (the suite's other workers, Slurm) fork between our
    write to ns_last_pid and our fork, so one try often misses: keep trying for a while, and
    while another process happens to hold ``target``, wait for it to go.
    """
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.exists(f"/proc/{target}"):
            time.sleep(0.05)
            continue
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(target - 1))
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            time.sleep(120)
            os._exit(0)
        if pid == target:
            return pid
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    raise AssertionError(f"could not obtain pid {target} in 30 s")


def test_restore_while_original_pid_is_taken(harness: Harness) -> None:
    h = harness
    first = h.launch("pidbusy", counter_cmd(16))
    h.wait_step("pidbusy", 3)
    stop = h.client("pidbusy").checkpoint(stop=True)
    h.wait_state("pidbusy", WorkloadState.STOPPED)
    assert first.pid is not None
    holder = _occupy_pid(first.pid)
    try:
        second = h.launch("pidbusy", counter_cmd(16))
        # The original pid is held by another live process during and after the restore.
        with open(f"/proc/{holder}/stat") as f:
            assert f.read().split()[2] in "SR"
        assert second.pid != holder and second.message == f"restored from {stop.id}"
        h.wait_step("pidbusy", int(stop.extra["progress"]["step"]) + 3)
    finally:
        os.kill(holder, signal.SIGKILL)
        os.waitpid(holder, 0)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_image_is_refused_never_substituted(harness: Harness, damage: str) -> None:
    h = harness
    h.launch("cor", counter_cmd(16))
    h.wait_step("cor", 3)
    good = h.client("cor").checkpoint(stop=False)
    h.wait_step("cor", int(good.extra["progress"]["step"]) + 3)
    bad = h.client("cor").checkpoint(stop=True)
    h.wait_state("cor", WorkloadState.STOPPED)
    store = _store(h)
    pages = next(store.images_dir(bad.id).glob("pages-*.img"))
    if damage == "truncate":
        os.truncate(pages, pages.stat().st_size // 2)
    else:
        with open(pages, "r+b") as f:
            f.seek(pages.stat().st_size // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0xFF]))
    # Asked for exactly the bad one: refused, and no other one is restored in its place.
    with pytest.raises(errors.CorruptCheckpoint) as refused:
        h.launch("cor", counter_cmd(16), restore_from=bad.id)
    assert bad.id in refused.value.message and "no other checkpoint" in refused.value.message
    assert _payloads_of(h.settings.home, "cor") == set()
    # The newest good one instead is a separate, explicit choice.
    again = h.launch("cor", counter_cmd(16))
    assert again.message == f"restored from {good.id}"
    assert store.get(bad.id).status is CheckpointStatus.CORRUPT
    assert "does not match" in store.get(bad.id).extra["corrupt_reason"] or damage == "truncate"
    h.wait_step("cor", int(good.extra["progress"]["step"]) + 3)
    assert "STATE CHECK FAILED" not in h.log_text()
    # The refused restore left nothing behind: one payload of this workload runs, the new one.
    assert _payloads_of(h.settings.home, "cor") == {again.pid}


def _payloads_of(home: Path, name: str) -> set[int | None]:
    """Host pids of live processes started as workload ``name`` of this CLAWPOINT_HOME."""
    wanted = {f"CLAWPOINT_WORKLOAD={name}".encode(), f"CLAWPOINT_HOME={home}".encode()}
    found: set[int | None] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = set((entry / "environ").read_bytes().split(b"\0"))
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if wanted <= env and state != "Z":
            found.add(int(entry.name))
    return found


def test_a_parasite_directory_left_by_a_killed_dump_does_not_block_checkpoints(
    harness: Harness, tmp_path: Path
) -> None:
    """CRIU's parasite makes ``proc.crtools`` in the task's cwd and removes it at the end; a
    dump killed in between leaves it, and every later dump failed with EEXIST."""
    h = harness
    work = tmp_path / "work"
    work.mkdir()
    h.launch("stale", counter_cmd(4), cwd=str(work))
    h.wait_step("stale", 2)
    (work / "proc.crtools").mkdir()  # as a killed dump leaves it
    done = h.client("stale").checkpoint(stop=False)
    assert done.id == "stale@1"
    assert not (work / "proc.crtools").exists()
