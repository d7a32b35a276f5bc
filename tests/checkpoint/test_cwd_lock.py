"""Dumps of tasks that share a working directory take turns (``core.checkpoint.cwd_lock``):
CRIU's parasite makes ``proc.crtools`` in the task's cwd, and two at once collide (EEXIST)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.checkpoint import cwd_lock


@pytest.fixture
def sleepers(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    shared, other = tmp_path / "shared", tmp_path / "other"
    shared.mkdir()
    other.mkdir()
    procs = [subprocess.Popen(["sleep", "60"], cwd=d) for d in (shared, shared, other)]
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_dumps_in_one_directory_take_turns(sleepers: list[subprocess.Popen[bytes]]) -> None:
    first, second, elsewhere = sleepers
    waited: dict[str, float] = {}

    def dump(name: str, pid: int) -> None:
        with cwd_lock.dump_slot(pid, timeout_s=30) as w:
            waited[name] = w

    with cwd_lock.dump_slot(first.pid, timeout_s=30) as w0:
        assert w0 < 1
        same = threading.Thread(target=dump, args=("same", second.pid))
        apart = threading.Thread(target=dump, args=("apart", elsewhere.pid))
        same.start()
        apart.start()
        apart.join(5)
        assert waited.get("apart", 99) < 1  # another directory: no wait
        time.sleep(0.5)
        assert "same" not in waited  # the same directory: waits for the first dump
    same.join(5)
    assert 0.4 < waited["same"] < 5


def test_a_busy_directory_is_given_up_after_the_timeout(
    sleepers: list[subprocess.Popen[bytes]],
) -> None:
    first, second, _ = sleepers
    with cwd_lock.dump_slot(first.pid, timeout_s=30):
        t0 = time.monotonic()
        with cwd_lock.dump_slot(second.pid, timeout_s=0.3) as waited:
            assert 0.3 <= waited < 2 and time.monotonic() - t0 < 2


def test_a_gone_task_is_not_waited_for() -> None:
    with cwd_lock.dump_slot(2**22 + 12345, timeout_s=30) as waited:
        assert waited == 0.0


def test_a_directory_a_killed_dump_left_is_removed(tmp_path: Path) -> None:
    """A dump killed mid-way leaves ``proc.crtools`` in the task's cwd; later dumps would all
    fail on it (EEXIST). Only an empty one (CRIU's) is removed; anything else stays."""
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen(["sleep", "60"], cwd=work)
    try:
        (work / cwd_lock.PARASITE_DIR).mkdir()
        with cwd_lock.dump_slot(proc.pid, timeout_s=5):
            assert not (work / cwd_lock.PARASITE_DIR).exists()
        # Not CRIU's: a user's directory with content, or a file, is never touched.
        (work / cwd_lock.PARASITE_DIR).mkdir()
        (work / cwd_lock.PARASITE_DIR / "mine").write_text("keep")
        with cwd_lock.dump_slot(proc.pid, timeout_s=5):
            assert (work / cwd_lock.PARASITE_DIR / "mine").read_text() == "keep"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a proc needs root")
def test_a_proc_left_mounted_by_a_killed_parasite_is_detached_and_removed(tmp_path: Path) -> None:
    work = tmp_path / "work"
    left = work / cwd_lock.PARASITE_DIR
    left.mkdir(parents=True)
    subprocess.run(["mount", "-t", "proc", "proc", str(left)], check=True)
    proc = subprocess.Popen(["sleep", "60"], cwd=work)
    try:
        with cwd_lock.dump_slot(proc.pid, timeout_s=5):
            assert not left.exists()
    finally:
        proc.kill()
        proc.wait()
        if left.exists():
            subprocess.run(["umount", "-l", str(left)], check=False)
