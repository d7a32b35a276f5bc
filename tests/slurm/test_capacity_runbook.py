"""The capacity-planner runbook grows a Slurm pool for a job waiting in its partition.

One job is submitted held to the loopback cluster's ``elastic`` partition, whose CLOUD nodes
n4 and n5 are powered down (held, so Slurm does not power a node up for it itself). A person
runs ``clawpoint runbook run capacity-planner`` (the installed command) with
``min_wait_minutes=0``: the run reads the pool and its queue and plans growing it to one
node, which adds 2.00/h, more than the person's ``[capacity] max_added_per_hour`` of 1.00,
so the run waits for the person's confirmation and nothing powers up. Confirmed
(``runbook continue RUN --yes``), n4 powers up for real (its slurmd starts) and the pool is
at size 1. The job is cancelled and every elastic node powered down again afterwards, so
the other Slurm tests see n1..n3 only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core.backends.slurm import SlurmBackend
from tests.slurm.conftest import sh
from tests.slurm.test_pools import ELASTIC, _cli, _power_down_all, _slurmd_running

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]

CONFIG = """
[local]
enabled = false
[slurm]
enabled = true
retry_total_s = 2.0
command_timeout_s = 10.0
[slurm.pools.elastic]
price_per_hour = 2.0
[capacity]
max_added_per_hour = 1.0
"""


@pytest.fixture
def held_job(backend: SlurmBackend, slurm_env: dict[str, str]) -> Iterator[str]:
    _power_down_all(backend)
    job = ""
    try:
        out = sh("sbatch", "--parsable", "--hold", "--partition=elastic",
                 "--job-name=clawpoint-capacity-runbook", "--wrap=sleep 1")  # fmt: skip
        job = out.strip().split(";")[0]
        yield job
    finally:
        if job:
            sh("scancel", job, check=False)
        _power_down_all(backend)


def test_runbook_grows_the_pool_for_waiting_work_after_the_person_confirms_the_cost(
    held_job: str, elastic_free: None, slurm_env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(CONFIG)

    def cli(*args: str) -> tuple[int, object, str]:
        return _cli(home, slurm_env, *args)

    code, run, said = cli("runbook", "run", "capacity-planner", "--param", "pool=slurm:elastic",
                          "--param", "min_wait_minutes=0", "--json")  # fmt: skip
    assert code == 0 and isinstance(run, dict), said  # the cost passes the cap: a person decides
    assert (run["status"], run["current"]) == ("waiting_approval", "grow-gate"), run
    [pool] = [s["output"] for s in run["steps"] if s["id"] == "pool"]
    assert (pool["size"], pool["pending"], pool["grow_to"]) == (0, 1, 1), pool
    assert (pool["added_per_hour"], pool["cap_per_hour"]) == (2.0, 1.0), pool
    assert "partition elastic" in pool["reason"], pool
    assert not any(_slurmd_running(n) for n in ELASTIC)  # nothing powered up meanwhile

    code, run, said = cli("runbook", "continue", run["id"], "--yes", "--json")
    assert code == 0 and isinstance(run, dict) and run["status"] == "succeeded", said
    [gate] = [s["output"] for s in run["steps"] if s["id"] == "grow-gate"]
    assert gate["result"]["status"] == "executed", gate
    assert _slurmd_running("n4") and not _slurmd_running("n5")
    code, pools, said = cli("pools", "--json")
    assert code == 0 and isinstance(pools, list), said
    assert [(p["id"], p["size"], p["released"]) for p in pools] == [("slurm:elastic", 1, ["n5"])]


@pytest.fixture
def elastic_free(slurm_env: dict[str, str]) -> None:
    """Only this test's job is in the elastic partition (another would count as waiting)."""
    others = sh("squeue", "--noheader", "--partition=elastic", "--format=%j").split()
    assert set(others) <= {"clawpoint-capacity-runbook"}, others
