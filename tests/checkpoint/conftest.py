"""Fixtures for checkpoint tests: a per-test CLAWPOINT_HOME and helpers to run the counter."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core.checkpoint.criu import criu_status
from core.config import Settings, load_settings
from core.state.db import Database
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.wrapper.spec import RunSpec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    home = tmp_path / "h"  # short: Unix socket paths are limited to 107 bytes
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return load_settings(home)


@pytest.fixture
def need_criu() -> None:
    status = criu_status()
    if not status.available:
        pytest.skip(f"CRIU unavailable: {status.reason}")


def counter_spec(settings: Settings, name: str, *, engine: str = "criu", mb: int = 200,
                 step_s: float = 0.02, **kw: object) -> RunSpec:  # fmt: skip
    cmd = [sys.executable, "-m", "core.workloads.counter", "--state-mb", str(mb),
           "--step-seconds", str(step_s)]  # fmt: skip
    return RunSpec.model_validate(
        {
            "name": name,
            "engine": engine,
            "command": cmd,
            "home": str(settings.home),
            "cwd": str(ROOT),
            **kw,
        }
    )


def registry(settings: Settings) -> WorkloadRegistry:
    return WorkloadRegistry(Database(settings.state_db))


def progress_step(settings: Settings, name: str) -> int:
    try:
        return int(json.loads((settings.run_dir / f"{name}.progress.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return -1


def wait_for(cond: Callable[[], bool], *, timeout_s: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def cleanup_workloads(settings: Settings) -> Iterator[list[WorkloadRecord]]:
    """Records appended here get their wrapper and payload killed at teardown."""
    recs: list[WorkloadRecord] = []
    yield recs
    import signal

    for rec in registry(settings).list():
        for pid in (rec.wrapper_pid, rec.pid):
            if pid and pid != os.getpid() and alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
