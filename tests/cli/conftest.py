"""The installed ``clawpoint`` console script, run as a user runs it: a subprocess per call.

``cli`` gives each test a fresh ``CLAWPOINT_HOME`` (and nothing else of the caller's
environment but ``PATH``, ``HOME``, ``LANG`` and ``PYTHONPATH``, which lets a second checkout
sharing the venv test its own code); ``cli(*args)`` runs the script next to this
interpreter (``.venv/bin/clawpoint``, the one ``make venv`` installs) and returns its exit
code and output. Workloads a test starts are killed afterwards through the service.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.config import load_settings
from core.model import Action, Principal, PrincipalKind, WorkloadState
from core.service.facade import bootstrap
from tests.service_reads import workload_row

ROOT = Path(__file__).resolve().parents[2]
CLAWPOINT = Path(sys.executable).parent / "clawpoint"
PERSON = Principal(id="tester", kind=PrincipalKind.PERSON)


@dataclass
class Result:
    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def __str__(self) -> str:  # what an assertion failure shows
        return f"clawpoint {' '.join(self.args)} -> {self.code}\n{self.stdout}\n{self.stderr}"

    def json(self) -> Any:
        return json.loads(self.stdout)


@dataclass
class Cli:
    home: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
        # Wide, so rich does not wrap the messages the tests look for.
        env.update(CLAWPOINT_HOME=str(self.home), COLUMNS="250")
        env.update(self.extra_env)
        env.update(extra)  # a test's own value wins (COLUMNS="60": a narrow terminal)
        return env

    def config(self, text: str) -> Path:
        path = self.home / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def __call__(self, *args: str, timeout: float = 180, **env: str) -> Result:
        proc = subprocess.run(
            [str(CLAWPOINT), *args],
            env=self.env(**env),
            cwd=ROOT,
            stdin=subprocess.DEVNULL,  # not a terminal: nothing may wait for an answer
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        result = Result(args, proc.returncode, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr + proc.stdout, str(result)
        return result

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(CLAWPOINT), *args], env=self.env(), cwd=ROOT, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def start(self, name: str, *command: str, node: str = "node-b") -> str:
        """Run ``command`` detached under the cooperative engine; returns the workload id."""
        r = self("run", "--engine", "cooperative", "--name", name, "--node", node, "--detach",
                 "--", *command)  # fmt: skip
        assert r.code == 0, str(r)
        return f"local:{name}"

    def start_counter(self, name: str, *, node: str = "node-b") -> str:
        """A small cooperative counter, detached; returns its id once it makes progress."""
        ref = self.start(name, sys.executable, "-m", "core.workloads.counter", "--state-mb", "1",
                         "--step-seconds", "0.05", node=node)  # fmt: skip
        progress = self.home / "run" / f"{name}.progress.json"
        deadline = time.monotonic() + 60
        while not _step_above(progress, 1):
            assert time.monotonic() < deadline, f"{name} made no progress"
            time.sleep(0.05)
        return ref

    def workload(self, ref: str) -> dict[str, Any]:
        """Its row of ``clawpoint workloads --json``, read in-process (tests/service_reads.py:
        checks and polls that would otherwise start an interpreter each; the command itself
        is tested as a subprocess in test_bad_input and test_exit_codes)."""
        return workload_row(self.home, ref, by="id")


def _step_above(progress: Path, above: int) -> bool:
    try:
        return int(json.loads(progress.read_text())["step"]) > above
    except (OSError, ValueError, KeyError):
        return False


def interrupt(proc: subprocess.Popen[str], ready: Path) -> tuple[int, str]:
    """Send SIGINT (Ctrl-C) once ``ready`` exists; the exit code and stderr."""
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{ready} never appeared"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGQUIT)  # the command prints its threads' stacks, goes on
        time.sleep(2)
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"no exit within 60 s of SIGINT; its stacks:\n{err}") from None
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"exited {proc.returncode}, but something it started still holds its output"
        ) from None
    return proc.returncode, err


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    assert CLAWPOINT.exists(), f"{CLAWPOINT} is not installed: run 'make venv'"
    c = Cli(tmp_path / "home")
    yield c
    if not (c.home / "state.db").exists():
        return
    try:
        service = bootstrap(load_settings(c.home))
    except errors.ClawpointError:  # a deliberately broken config: nothing was started
        return
    for w in service.workloads("local"):  # never leave a workload behind
        if w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING):
            try:
                service.act(Action.KILL, w.id, {}, principal=PERSON, confirmed=True)
            except errors.ClawpointError:
                pass
