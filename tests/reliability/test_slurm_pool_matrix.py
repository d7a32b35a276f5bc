"""The fault matrix of a Slurm pool under power saving: the installed ``clawpoint`` is
SIGKILLed before and after a step of ``scale_pool`` on the loopback cluster's partition
``elastic`` (n4, n5: CLOUD nodes whose ResumeProgram starts a node's slurmd and whose
SuspendProgram stops it; ``scripts/slurm-cluster.sh``), and the next clawpoint command
reconciles (``core.backends.slurm.pools``' recover functions):

- the execution the kill left running is finished (succeeded), with exactly one recovery
  entry in the audit log, and the chain verifies;
- the pool ends at the size asked: a grown node answers (its slurmd runs), a released one is
  powered down (its slurmd gone), and no node of the pool is left drained.

Operations: grow 0 -> 1 (power up n4 and wait until it answers) and shrink 1 -> 0 (an idle
node: drained, powered down, waited for). The shrink's saving of work is the drain's and
preempt's, whose kill points the job matrix covers (tests/reliability/test_slurm_matrix.py).
CI kills once (after the shrink's power-down is asked for, the longest wait left to the
restarted clawpoint); ``CLAWPOINT_FAULT_MATRIX=full`` kills before and after every step.
Every elastic node is powered down again afterwards, as the other Slurm tests expect.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.backends.slurm import SlurmBackend
from core.config import Settings, load_settings
from core.model import Action
from core.service.facade import Service, bootstrap
from tests.reliability.conftest import Record
from tests.reliability.test_fault_matrix import (
    FULL,
    PERSON,
    audit_of,
    clawpoint,
    latest_execution,
    settled,
)
from tests.slurm.conftest import ROOT
from tests.slurm.test_pools import CONFIG, ELASTIC, _power_down_all, _slurmd_running

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(3600 if FULL else 600)]

POOL = "slurm:elastic"
OPERATIONS = {"grow": 1, "shrink": 0}  # operation -> the size asked
FAST = ("shrink", "power_down", "after")


@pytest.fixture
def pool_service(tmp_path: Path, slurm_env: dict[str, str]) -> Iterator[Service]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(CONFIG)
    service = bootstrap(load_settings(home))
    backend = service.backend("slurm")
    assert isinstance(backend, SlurmBackend)
    _power_down_all(backend)
    yield service
    _power_down_all(backend)


def env(settings: Settings, **extra: str) -> dict[str, str]:
    """The commands' environment: the test's (the cluster's variables, set by the fixture)
    with this home, and ``extra``."""
    return {**os.environ, "CLAWPOINT_HOME": str(settings.home), "PYTHONPATH": str(ROOT), **extra}


def _size_now(service: Service) -> int:
    return {p.id: p for p in service.pools("slurm")}[POOL].size


def _to(service: Service, size: int) -> None:
    """The pool at ``size`` before a kill (a person's confirmed scale, not under test)."""
    if _size_now(service) != size:
        done = service.act(Action.SCALE_POOL, POOL, {"size": size}, principal=PERSON,
                           confirmed=True)  # fmt: skip
        assert done.status == "executed", done.message


def _points(service: Service, operation: str) -> list[tuple[str, str]]:
    size = OPERATIONS[operation]
    _to(service, 1 - size)
    names = [s.name for s in service.plan(Action.SCALE_POOL, POOL, {"size": size}).steps]
    if not FULL:
        return [(n, FAST[2]) for n in names if n.startswith(FAST[1])][:1]
    return [(n, when) for n in names for when in ("before", "after")]


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_killed_at_a_pool_step_is_reconciled(
    pool_service: Service, operation: str, record: Record
) -> None:
    if not FULL and operation != FAST[0]:
        pytest.skip("Slurm pools: CI runs the shrink kill only (CLAWPOINT_FAULT_MATRIX=full: all)")
    service, size = pool_service, OPERATIONS[operation]
    points = _points(service, operation)
    assert points, "the plan has no step to kill at"
    for step_name, when in points:
        _to(service, 1 - size)
        proc = subprocess.run(
            [*clawpoint(), "pools", "scale", POOL, "--size", str(size), "--yes", "--json"],
            env=env(service.settings, CLAWPOINT_TEST_KILL_AT=f"scale_pool:{step_name}:{when}"),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == -signal.SIGKILL, (
            f"never reached {when} {step_name}: exit {proc.returncode} {proc.stdout} {proc.stderr}"
        )
        killed = latest_execution(service, POOL)
        assert killed["status"] == "running", (step_name, when, killed)
        again = subprocess.run(
            [*clawpoint(), "pools", "--backend", "slurm", "--json"],
            env=env(service.settings), capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        after = settled(service, POOL)
        assert after["id"] == killed["id"] and after["status"] == "succeeded", (
            step_name,
            when,
            after,
        )
        assert audit_of(service, after["id"]) == [("recovery", "succeeded")]
        assert service.audit.verify().ok
        assert _size_now(service) == size, (step_name, when)
        up = [n for n in ELASTIC if _slurmd_running(n)]
        assert len(up) == size, (step_name, when, up)
        record(f"scale_pool {operation}", step_name, when,
               f"succeeded; pool at {size} node(s), slurmd running on {', '.join(up) or 'none'}",
               "recovery audited once; chain verifies; pool size; slurmd state", "slurm")  # fmt: skip
