"""Fixtures for the checkpoint tests: a private CLAWPOINT_HOME per test, and wrapper helpers."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.checkpoint.criu import criu_status
from core.config import Settings, load_settings
from core.model import WorkloadState
from core.specs import RunSpec
from core.state.db import Database
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.wrapper import fence
from core.wrapper.control import ControlClient
from core.wrapper.launch import launch_detached


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    status = criu_status()
    if status.available:
        return
    skip = pytest.mark.skip(reason=f"CRIU unavailable: {status.reason}")
    for item in items:
        if "criu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("CLAWPOINT_HOME", str(h))
    return h


@pytest.fixture
def settings(home: Path) -> Settings:
    return load_settings(home)


def counter_cmd(mb: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "core.workloads.counter", "--state-mb", str(mb), *extra]


class Harness:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.registry = WorkloadRegistry(Database(settings.state_db))
        self.started: list[str] = []

    def launch(self, name: str, command: list[str], **kw: Any) -> WorkloadRecord:
        spec = RunSpec(name=name, command=command, home=str(self.settings.home), **kw)
        self.started.append(name)
        return launch_detached(self.settings, spec, wait_s=60)

    def client(self, name: str) -> ControlClient:
        return ControlClient(self.settings.run_dir / f"{name}.sock")

    def progress(self, name: str) -> int:
        prog = self.client(name).status().get("progress") or {}
        return int(prog.get("step", -1))

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; log:\n{self.log_text()}")

    def wait_step(self, name: str, at_least: int) -> int:
        got = [-1]

        def ok() -> bool:
            got[0] = self.progress(name)
            return got[0] >= at_least

        self.wait_for(f"{name} to reach step {at_least}", ok)
        return got[0]

    def wait_state(self, name: str, state: WorkloadState) -> WorkloadRecord:
        self.wait_for(
            f"{name} to be {state.value}",
            lambda: (r := self.registry.get(name)) is not None and r.state is state,
        )
        record = self.registry.get(name)
        assert record is not None
        return record

    def log_text(self) -> str:
        logs = self.settings.log_dir
        # The wrappers' lines (NAME.log) and the payloads' output (NAME.out, rotated NAME.out.N).
        files = sorted([*logs.glob("*.log"), *logs.glob("*.out"), *logs.glob("*.out.*")])
        return "\n".join(p.read_text(errors="replace") for p in files)

    def cleanup(self) -> None:
        for name in self.started:
            record = self.registry.get(name)
            if record is None:
                continue
            try:
                self.client(name).terminate(timeout_s=3)
            except errors.ClawpointError:
                pass
            fence.fence(self.settings, record)


@pytest.fixture
def harness(settings: Settings) -> Iterator[Harness]:
    h = Harness(settings)
    yield h
    h.cleanup()
