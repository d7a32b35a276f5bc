"""Fixtures for service-level tests: a fresh CLAWPOINT_HOME and a bootstrapped service."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import errors
from core.checkpoint.criu import criu_status
from core.config import Settings, load_settings
from core.model import Action, Principal, PrincipalKind, WorkloadState
from core.service.facade import Service, bootstrap
from core.specs import RunSpec
from core.wrapper.spec import output_files

ROOT = Path(__file__).resolve().parents[2]
PERSON = Principal(id="tester", kind=PrincipalKind.PERSON)
AGENT = Principal(id="mcp:test", kind=PrincipalKind.AGENT)


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    home = tmp_path / "h"
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return load_settings(home)


@pytest.fixture
def service(settings: Settings) -> Iterator[Service]:
    svc = bootstrap(settings)
    yield svc
    for w in svc.workloads("local"):  # never leave a workload behind
        if w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING):
            try:
                svc.act(Action.KILL, w.id, {}, principal=PERSON, confirmed=True)
            except errors.ClawpointError:
                pass


@pytest.fixture
def need_criu() -> None:
    status = criu_status()
    if not status.available:
        pytest.skip(f"CRIU unavailable here: {status.reason}")


def counter(settings: Settings, name: str, *, mb: int = 200, node: str = "node-a",
            every: float | None = None, engine: str = "criu") -> RunSpec:  # fmt: skip
    return RunSpec.model_validate({
        "name": name, "node": node, "engine": engine, "checkpoint_every": every,
        "command": [sys.executable, "-m", "core.workloads.counter", "--state-mb", str(mb),
                    "--step-seconds", "0.02"],
        "cwd": str(ROOT), "home": str(settings.home),
    })  # fmt: skip


def step(settings: Settings, name: str) -> int:
    try:
        return int(json.loads((settings.run_dir / f"{name}.progress.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return -1


def wait_step(settings: Settings, name: str, above: int, timeout_s: float = 90) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = step(settings, name)
        if s > above:
            return s
        time.sleep(0.05)
    raise AssertionError(f"{name} made no progress past step {above}")


def log_text(settings: Settings, name: str) -> str:
    """The wrapper's lines (NAME.log), then the payload's output (NAME.out*, oldest first)."""
    paths = [settings.log_dir / f"{name}.log", *output_files(settings, name)]
    return "".join(p.read_text(errors="replace") for p in paths if p.exists())
