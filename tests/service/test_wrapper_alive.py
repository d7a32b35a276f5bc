"""``fence.wrapper_alive``, which every read of a running local workload asks: a live
wrapper's recorded identity answers without listing /proc/locks (a lock on every file lock
in the system, milliseconds on a busy machine); the lock still answers for a wrapper that
has not recorded its identity yet, and nothing alive answers no."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import Settings, load_settings
from core.state.workloads import WorkloadRecord
from core.wrapper import fence


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    s = load_settings(tmp_path)
    s.run_dir.mkdir(parents=True, exist_ok=True)
    return s


@pytest.fixture
def other() -> Iterator[subprocess.Popen[bytes]]:
    """Another live process, to stand for the wrapper."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def _listing_locks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    listed: list[str] = []
    real = fence.lock_holder

    def spy(settings: Settings, name: str) -> int | None:
        listed.append(name)
        return real(settings, name)

    monkeypatch.setattr(fence, "lock_holder", spy)
    return listed


def test_a_recorded_live_wrapper_answers_without_listing_locks(
    settings: Settings, other: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    fence.write_identity(settings, "w", wrapper=other.pid, payload=None)
    listed = _listing_locks(monkeypatch)
    assert fence.wrapper_alive(settings, WorkloadRecord(name="w"))
    assert listed == []


def test_a_wrapper_holding_the_lock_before_recording_itself_is_alive(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = settings.run_dir / "w.lock"
    script = (
        "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
        "fcntl.flock(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", script, str(lock)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
        listed = _listing_locks(monkeypatch)
        assert fence.wrapper_alive(settings, WorkloadRecord(name="w"))
        assert listed == ["w"]
    finally:
        holder.kill()
        holder.wait()


def test_no_live_wrapper_is_not_alive(settings: Settings, other: subprocess.Popen[bytes]) -> None:
    fence.write_identity(settings, "w", wrapper=other.pid, payload=None)
    other.kill()
    other.wait()
    assert not fence.wrapper_alive(settings, WorkloadRecord(name="w"))
    with open(settings.run_dir / "w.lock", "a") as f:  # held by this process only
        fcntl.flock(f, fcntl.LOCK_EX)
        assert not fence.wrapper_alive(settings, WorkloadRecord(name="w"))
