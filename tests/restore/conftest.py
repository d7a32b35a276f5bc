"""A user's view of restores: the installed ``clawpoint`` command as a subprocess, real CRIU,
and the self-checking counter workload, in a private CLAWPOINT_HOME per test."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.checkpoint.criu import criu_status
from core.config import Settings, load_settings
from core.model import CheckpointInfo, WorkloadState
from core.state.db import Database
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.store.store import CheckpointStore
from core.wrapper import fence
from core.wrapper.control import ControlClient
from core.wrapper.spec import output_files

ROOT = Path(__file__).resolve().parents[2]
CLAWPOINT = ROOT / ".venv" / "bin" / "clawpoint"

# A program with no signal handlers: it counts, writes its progress (atomically: no file
# kept open) and prints each step, a line per write(2): print() makes one write per item
# where Python runs unbuffered (PYTHONUNBUFFERED, as in many CI environments), and a
# stop-checkpoint between two of them rightly leaves a line half printed until the resume.
# With "chdir", it leaves its launch directory first (a program that works elsewhere).
PLAIN = """
import json, os, sys, time
if len(sys.argv) > 1 and sys.argv[1] == "chdir":
    os.chdir("/")
p = os.environ["CLAWPOINT_PROGRESS_FILE"]
i = 0
while True:
    i += 1
    with open(p + ".tmp", "w") as f:
        f.write(json.dumps({"step": i}))
    os.replace(p + ".tmp", p)
    os.write(1, f"step {i} {'x' * (200 if 'loud' in sys.argv else 0)}\\n".encode())
    time.sleep(0.02)
"""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    status = criu_status()
    if status.available:
        return
    skip = pytest.mark.skip(reason=f"CRIU unavailable: {status.reason}")
    for item in items:
        if "criu" in item.keywords:
            item.add_marker(skip)


class Cli:
    """Runs the installed console script in one CLAWPOINT_HOME and reads what it left."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.settings: Settings = load_settings(home)
        self.registry = WorkloadRegistry(Database(self.settings.state_db))
        self.store = CheckpointStore(self.settings.checkpoint_dir, key=self.settings.store_key_path)
        self.names: list[str] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWPOINT_")}
        env.update({"CLAWPOINT_HOME": str(self.home), **extra})
        return env

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 240
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603 (our own console script, fixed argv)
            [str(CLAWPOINT), *args],
            capture_output=True,
            text=True,
            env=env or self.env(),
            cwd=ROOT,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def json(self, *args: str) -> Any:
        done = self.run(*args, "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    def start_counter(self, name: str, *, mb: int = 16, **extra_env: str) -> None:
        """``clawpoint run --detach`` the counter; extra_env reaches its wrapper."""
        self.names.append(name)
        done = self.run(
            "run", "--detach", "--name", name, "--node", "node-a", "--engine", "criu", "--",
            sys.executable, "-m", "core.workloads.counter", "--state-mb", str(mb),
            "--step-seconds", "0.02",
            env=self.env(**extra_env),
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr

    def step(self, name: str) -> int:
        try:
            path = self.settings.run_dir / f"{name}.progress.json"
            return int(json.loads(path.read_text())["step"])
        except (OSError, ValueError, KeyError):
            return -1

    def wait_step(self, name: str, above: int, timeout_s: float = 90) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s = self.step(name)
            if s > above:
                return s
            time.sleep(0.05)
        raise AssertionError(f"{name} made no progress past step {above}:\n{self.log(name)}")

    def record(self, name: str) -> WorkloadRecord:
        rec = self.registry.get(name)
        assert rec is not None
        return rec

    def wait_state(self, name: str, state: WorkloadState, timeout_s: float) -> WorkloadRecord:
        """The workload's record once it is in ``state``; fails with its log after
        ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while (rec := self.record(name)).state is not state:
            assert time.monotonic() < deadline, f"not {state.value}: {rec}\n{self.log(name)}"
            time.sleep(0.05)
        return rec

    def alive(self, name: str) -> bool:
        """Whether any process of the workload (its wrapper or its payload) is running."""
        rec = self.record(name)
        return fence.wrapper_alive(self.settings, rec) or fence.payload_alive(self.settings, rec)

    def checkpoints(self, name: str) -> list[CheckpointInfo]:
        return self.store.list(name)

    def image_digests(self, name: str) -> dict[str, str]:
        """sha256 of every image file of every checkpoint of ``name``."""
        out: dict[str, str] = {}
        for info in self.checkpoints(name):
            images = self.store.images_dir(info.id)
            for f in info.files:
                out[f"{info.id}/{f.name}"] = hashlib.sha256(
                    (images / f.name).read_bytes()
                ).hexdigest()
        return out

    def corrupt(self, checkpoint_id: str, *, truncate: bool = False) -> None:
        """Damage the largest image file of a checkpoint: one flipped byte (same size: only
        a digest finds it) or, with ``truncate``, its last byte cut off."""
        info = self.store.get(checkpoint_id)
        big = max(info.files, key=lambda f: f.size)
        path = self.store.images_dir(checkpoint_id) / big.name
        data = bytearray(path.read_bytes())
        if truncate:
            del data[-1]
        else:
            data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))

    def log(self, name: str) -> str:
        """The wrapper's lines (NAME.log), then the payload's output (NAME.out*, oldest first)."""
        paths = [self.settings.log_dir / f"{name}.log", *output_files(self.settings, name)]
        return "".join(p.read_text(errors="replace") for p in paths if p.exists())

    def cleanup(self) -> None:
        for name in self.names:
            rec = self.registry.get(name)
            if rec is None:
                continue
            try:
                ControlClient(self.settings.run_dir / f"{name}.sock").terminate(timeout_s=3)
            except errors.ClawpointError:
                pass
            fence.fence(self.settings, rec)


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    c = Cli(tmp_path / "home")
    yield c
    c.cleanup()
