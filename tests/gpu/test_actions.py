"""suspend_gpu / resume_gpu as a user runs them: the installed command line on a workload
under the wrapper, against the fake driver (this machine has no GPU and no NVML)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.actions import CATALOGUE
from core.checkpoint.cuda_driver import ProcessState, load
from core.model import Action, RiskClass
from tests.gpu.conftest import GIB, FakeCuda

CLAWPOINT = Path(sys.executable).parent / "clawpoint"


class Cli:
    def __init__(self, home: Path, env: dict[str, str]) -> None:
        base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
        self.env = {**base, "CLAWPOINT_HOME": str(home), "COLUMNS": "250", **env}

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(CLAWPOINT), *args], capture_output=True, text=True, timeout=120, env=self.env
        )

    def json(self, *args: str) -> Any:
        r = self(*args, "--json")
        assert r.returncode == 0, f"{args}: {r.stdout}\n{r.stderr}"
        return json.loads(r.stdout)


@pytest.fixture
def cli(tmp_path: Path, fake_cuda: FakeCuda) -> Iterator[Cli]:
    c = Cli(tmp_path / "home", fake_cuda.env)
    yield c
    c("kill", "local:g", "--yes")


def _workload_pid(cli: Cli) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = [w for w in cli.json("workloads") if w["name"] == "g"]
        if rows and rows[0]["state"] == "running" and rows[0].get("pid"):
            return int(rows[0]["pid"])
        time.sleep(0.2)
    raise AssertionError("the workload did not start")


def test_catalogue_has_both_gpu_actions_as_disruptive() -> None:
    for action in (Action.SUSPEND_GPU, Action.RESUME_GPU):
        spec = CATALOGUE[action]
        assert spec.risk({}) is RiskClass.DISRUPTIVE and spec.mcp_tool == action.value


def test_suspend_and_resume_a_workloads_gpu_from_the_command_line(
    cli: Cli, fake_cuda: FakeCuda
) -> None:
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    r = cli("run", "--detach", "--engine", "cooperative", "--name", "g", "--", *sleeper)
    assert r.returncode == 0, r.stderr
    pid = _workload_pid(cli)
    fake_cuda.add(pid, 8 * GIB)

    plan = cli.json("suspend-gpu", "local:g", "--dry-run")
    assert "suspend_gpu" in json.dumps(plan)
    assert load().state(pid) is ProcessState.RUNNING  # a dry run changes nothing

    out = cli.json("suspend-gpu", "local:g", "--yes", "--reason", "urgent job needs the GPU")
    assert out["status"] == "executed", out
    step = out["execution"]["steps"][0]["output"]
    assert step["pids"] == [pid] and step["reports"][0]["state_after"] == "checkpointed"
    assert "NVML" in step["reports"][0]["nvml"]  # no NVML here: said, not guessed
    assert load().state(pid) is ProcessState.CHECKPOINTED
    assert fake_cuda.device_bytes(pid) == 0
    w = next(w for w in cli.json("workloads") if w["name"] == "g")
    assert w["state"] == "running" and "GPU suspended" in w["message"]

    again = cli("suspend-gpu", "local:g", "--yes", "--json")
    assert again.returncode != 0 and "checkpointed" in again.stdout + again.stderr

    back = cli.json("resume-gpu", "local:g", "--yes")
    assert back["status"] == "executed", back
    assert load().state(pid) is ProcessState.RUNNING and fake_cuda.device_bytes(pid) == 8 * GIB


def test_suspend_without_a_driver_is_refused_with_the_reason(cli: Cli, tmp_path: Path) -> None:
    cli.env["CLAWPOINT_LIBCUDA"] = str(tmp_path / "none" / "libcuda.so.1")
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    assert (
        cli("run", "--detach", "--engine", "cooperative", "--name", "g", "--", *sleeper).returncode
        == 0
    )
    _workload_pid(cli)
    r = cli("suspend-gpu", "local:g", "--yes", "--json")
    assert r.returncode != 0
    assert "no NVIDIA driver library" in r.stdout + r.stderr
