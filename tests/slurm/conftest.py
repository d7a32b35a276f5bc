"""Fixtures for the Slurm tests: the loopback cluster of scripts/slurm-cluster.sh.

The session fixture brings the cluster up if it is not (and takes it down at the end only if
it started it); tests marked ``slurm`` skip with the reason when that cannot be done (not
root, or the script failed). Each test gets a backend configured from the cluster's env
file and cancels the jobs it submitted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.backends.base import PlanDraft, no_progress
from core.backends.slurm import SlurmBackend, SlurmConfig
from core.service.executor import resolve_args

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-cluster.sh"
CLUSTER_DIR = Path(os.environ.get("CLAWPOINT_SLURM_DIR", "/var/lib/clawpoint-slurm"))


def cluster(
    *args: str, check: bool = False, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=check
    )


def read_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for line in (CLUSTER_DIR / "env").read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        if key:
            env[key] = value
    return env


def sh(*argv: str, check: bool = True) -> str:
    """Run a Slurm command against the test cluster (argv list); return stdout."""
    env = {**os.environ, **read_env()}
    return subprocess.run(
        argv, capture_output=True, text=True, check=check, env=env, timeout=60
    ).stdout


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("the loopback Slurm cluster needs root (it starts slurmctld/slurmd/munged)")
    started = cluster("status").returncode != 0
    if started:
        up = cluster("up")
        if up.returncode != 0:
            pytest.skip(f"scripts/slurm-cluster.sh up failed: {up.stderr.strip()[-500:]}")
    yield read_env()
    if started:
        cluster("down")


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def stop_daemon(pidfile: Path) -> None:
    """Stop the daemon named by a pid file and return once it is gone: SIGTERM, then SIGKILL
    after 30 s. A slurmctld saving its state under load can take longer than 20 s to exit
    and answers RPCs meanwhile; returning before it was gone let a "controller down" test
    see it answer, and the restart after it fail while it still held its port (CI, twice)."""
    pid = int(pidfile.read_text())  # read once: some daemons remove the file as they exit
    os.kill(pid, signal.SIGTERM)
    if not _gone(pid, 30):
        os.kill(pid, signal.SIGKILL)
        assert _gone(pid, 10), f"{pidfile.name}: pid {pid} outlived SIGKILL"


def restart_cluster() -> None:
    """Bring back whatever a test stopped (the script's up is idempotent)."""
    up = cluster("up")
    assert up.returncode == 0, (
        f"slurm-cluster.sh up failed:\n{up.stdout[-2000:]}\n{up.stderr[-2000:]}"
    )


@pytest.fixture
def slurm_env(slurm_cluster: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for key, value in slurm_cluster.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_JWT", raising=False)
    return slurm_cluster


@pytest.fixture
def backend(slurm_env: dict[str, str]) -> SlurmBackend:
    return SlurmBackend(SlurmConfig(enabled=True, retry_total_s=2.0, command_timeout_s=10.0))


@pytest.fixture
def job_name(request: pytest.FixtureRequest, slurm_env: dict[str, str]) -> Iterator[str]:
    """A unique job name for this test; its jobs are cancelled afterwards."""
    safe = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]
    name = f"t-{safe}-{os.getpid()}"
    yield name
    subprocess.run(
        ["scancel", f"--name={name}"], env={**os.environ, **slurm_env}, check=False, timeout=60
    )


def execute(backend: SlurmBackend, draft: PlanDraft) -> dict[str, dict[str, Any]]:
    """Run a plan's steps in order, filling ``$STEP.FIELD`` args as the service's executor does."""
    outputs: dict[str, dict[str, Any]] = {}
    for step in draft.steps:
        outputs[step.name] = backend.run_step(
            step.op, resolve_args(step.args, outputs), no_progress
        )
    return outputs
