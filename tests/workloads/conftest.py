"""Fixtures for the program-shape tests: the installed ``clawpoint`` as a subprocess in a
private CLAWPOINT_HOME, real CRIU, and the self-checking programs under ``programs/``."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.checkpoint.criu import criu_status
from core.config import load_settings
from core.state.db import Database
from core.state.workloads import WorkloadRegistry
from core.wrapper import fence
from core.wrapper.control import ControlClient
from core.wrapper.spec import output_files
from tests.service_reads import workload_row

CLI = Path(sys.executable).with_name("clawpoint")
PROGRAMS = Path(__file__).resolve().parent / "programs"
_PROGRESS = re.compile(r"^progress (\d+)$", re.M)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    status = criu_status()
    if status.available:
        return
    skip = pytest.mark.skip(reason=f"CRIU unavailable: {status.reason}")
    for item in items:
        if "criu" in item.keywords:
            item.add_marker(skip)


class Cli:
    """``clawpoint`` as a user runs it, in a private CLAWPOINT_HOME."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWPOINT_")}
        self.env["CLAWPOINT_HOME"] = str(home)

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(  # noqa: S603 (argv list, our own console script)
            [str(CLI), *args], capture_output=True, text=True, env=self.env, timeout=300,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if ok:
            assert proc.returncode == 0, (
                f"clawpoint {args} -> {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def config(self, text: str) -> None:
        (self.home / "config.toml").write_text(textwrap.dedent(text))

    def workload(self, name: str) -> dict[str, Any]:
        """Its row of ``clawpoint workloads --json``, read in-process (tests/service_reads.py:
        the checks and polls here would otherwise start an interpreter each)."""
        return workload_row(self.home, name)

    def wait_state(self, name: str, state: str, timeout_s: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            w = self.workload(name)
            if w["state"] == state:
                return w
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} never became {state}: {w}\n{self.log(name)}")
            time.sleep(0.2)

    def log(self, name: str) -> str:
        """The wrapper's lines (NAME.log), then the payload's output (NAME.out and its rotated
        files, oldest first, so its lines stay in order)."""
        settings = load_settings(self.home)
        files = [settings.log_dir / f"{name}.log", *output_files(settings, name)]
        return "\n".join(p.read_text(errors="replace") for p in files if p.exists())

    def progress(self, name: str) -> int:
        """The highest ``progress N`` the program printed so far (-1: none)."""
        return max((int(n) for n in _PROGRESS.findall(self.log(name))), default=-1)

    def wait_progress(self, name: str, above: int, timeout_s: float = 90) -> int:
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.log(name)
            assert "FAIL " not in text, f"{name} failed its own check:\n{text[-3000:]}"
            got = max((int(n) for n in _PROGRESS.findall(text)), default=-1)
            if got > above:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} made no progress past {above}:\n{text[-3000:]}")
            time.sleep(0.2)

    def kill_payload(self, name: str) -> None:
        pid = self.workload(name)["pid"]
        assert isinstance(pid, int)
        os.kill(pid, signal.SIGKILL)
        self.wait_state(name, "failed")


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    home = tmp_path / "home"
    home.mkdir()
    c = Cli(home)
    yield c
    settings = load_settings(home)  # never leave a workload behind
    registry = WorkloadRegistry(Database(settings.state_db))
    for record in registry.list():
        # A periodic checkpoint under way may finish first (killing a payload in the middle
        # of its dump can leave CRIU waiting on it); the payloads here ignore SIGTERM, so a
        # short grace before SIGKILL.
        with contextlib.suppress(errors.ClawpointError):
            ControlClient(settings.run_dir / f"{record.name}.sock").terminate(
                timeout_s=3, dump_wait_s=60
            )
        if record.wrapper_pid and fence.wrapper_alive(settings, record):
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.wrapper_pid, signal.SIGKILL)
        fence.fence(settings, record)
