"""Work waiting in a Slurm pool's partition: the watch loop proposes growing the pool.

Two jobs are submitted held to the loopback cluster's ``elastic`` partition, whose CLOUD
nodes n4 and n5 are powered down (held, so Slurm does not power a node up for them itself).
Once they have waited past the planner's threshold (``[capacity] grow_after_wait_s``: the
site's setting, 5 s here; its 60 s default is pinned by the rule's unit tests), ``watch
--once --json`` from the installed ``clawpoint`` proposes ``scale_pool`` of ``slurm:elastic``
to 2 nodes (one per pending job), naming the wait and the cost it adds. With ``[capacity]
max_added_per_hour`` at 0 the growth is disruptive, so the pass asks a person (exit 20) and
nothing powers up: the test leaves the nodes as it found them. The jobs are cancelled
afterwards and every elastic node is powered down again, so the other Slurm tests see n1..n3
only.
"""

from __future__ import annotations

import time
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
max_added_per_hour = 0.0
grow_after_wait_s = 5.0
"""
WAIT_S = 7.0  # past grow_after_wait_s, with room for Slurm's whole-second submit times


@pytest.fixture
def held_jobs(backend: SlurmBackend, slurm_env: dict[str, str]) -> Iterator[list[str]]:
    _power_down_all(backend)
    jobs: list[str] = []
    try:
        for _ in range(2):
            out = sh("sbatch", "--parsable", "--hold", "--partition=elastic",
                     "--job-name=clawpoint-capacity-advice", "--wrap=sleep 1")  # fmt: skip
            jobs.append(out.strip().split(";")[0])
        yield jobs
    finally:
        if jobs:
            sh("scancel", *jobs, check=False)
        _power_down_all(backend)


def test_jobs_waiting_in_a_pool_partition_make_watch_propose_growing_it(
    held_jobs: list[str], slurm_env: dict[str, str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(CONFIG)
    time.sleep(WAIT_S)

    code, report, said = _cli(home, slurm_env, "watch", "--once", "--json")
    assert code == 20, said  # a person is asked: the growth costs more than the cap
    [grow] = [p for p in report["proposals"] if p["action"] == "scale_pool"]
    assert (grow["target"], grow["trigger"], grow["params"], grow["risk"]) == (
        "slurm:elastic", "capacity-grow", {"size": 2}, "disruptive",
    ), grow  # fmt: skip
    assert "2 job(s) have waited up to" in grow["reason"], grow
    assert "partition elastic" in grow["reason"] and "+4.00/h (2 x 2.00)" in grow["reason"]
    [asked] = [a for a in report["actions"] if a["target"] == "slurm:elastic"]
    assert asked["status"] == "approval_required" and asked["approval_id"], asked
    assert not any(_slurmd_running(n) for n in ELASTIC)  # nothing powered up
