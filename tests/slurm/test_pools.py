"""A Slurm pool under power saving, driven through the installed ``clawpoint``.

The loopback cluster's partition ``elastic`` holds n4 and n5, CLOUD nodes that start powered
down (scripts/slurm-cluster.sh: its ResumeProgram starts a node's slurmd, its
SuspendProgram stops it). With ``[slurm.pools.elastic]`` configured:

- ``pools`` lists it at size 0 with both nodes released, and ``nodes`` does not list them
  (powered down is capacity given back, not a failed node);
- growing to 1 powers n4 up for real (its slurmd starts) and is safe within the cost cap;
- shrinking to 0 under a wrapped, self-verifying counter is a person's call (exit 6,
  nothing changed); confirmed, the counter is checkpointed and held and n4 is powered down
  (its slurmd gone); grown again, the counter resumes from its checkpoint and counts on
  with its state intact;
- shrinking 2 -> 1 with a counter on each node hands the released node's counter to a
  standby job on the node that stays (a live move, as a drain's), leaves the other alone,
  and powers the released node down.

Every node is powered down again afterwards, so the other Slurm tests see n1..n3 only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.backends.slurm import SbatchSpec, SlurmBackend, submit
from tests.slurm.conftest import CLUSTER_DIR, ROOT, sh
from tests.slurm.test_e2e import assert_resumed, progress, wait_step

pytestmark = [pytest.mark.slurm, pytest.mark.criu, pytest.mark.timeout(400)]

CLAWPOINT = Path(sys.executable).parent / "clawpoint"
ELASTIC = ("n4", "n5")
CONFIG = """
[local]
enabled = false
[slurm]
enabled = true
retry_total_s = 2.0
command_timeout_s = 10.0
[slurm.pools.elastic]
price_per_hour = 2.0
"""


def _slurmd_running(node: str) -> bool:
    pidfile = CLUSTER_DIR / "run" / f"slurmd-{node}.pid"
    try:
        os.kill(int(pidfile.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


def _power_down_all(backend: SlurmBackend) -> None:
    """Every elastic node powered down, as the cluster starts (and as other tests expect)."""
    for node in ELASTIC:
        if not backend.power_state(node).released:
            sh("scontrol", "update", f"nodename={node}", "state=POWER_DOWN", check=False)
    for node in ELASTIC:
        backend.wait_until(f"{node} powered down", 90,
                           lambda n=node: backend.power_state(n).powered_down)  # fmt: skip


@pytest.fixture
def elastic(backend: SlurmBackend, slurm_env: dict[str, str]) -> Iterator[SlurmBackend]:
    _power_down_all(backend)
    yield backend
    sh("scancel", "--partition=elastic", check=False)
    _power_down_all(backend)


def _cli(home: Path, env: dict[str, str], *args: str) -> tuple[int, Any, str]:
    full = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
    full.update(env, CLAWPOINT_HOME=str(home), COLUMNS="250")
    proc = subprocess.run([str(CLAWPOINT), *args], env=full, cwd=ROOT, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    try:
        out: Any = json.loads(proc.stdout)
    except ValueError:
        out = None
    return proc.returncode, out, proc.stdout + proc.stderr


Cli = Callable[..., tuple[int, Any, str]]


@pytest.fixture
def cli(slurm_env: dict[str, str], tmp_path: Path) -> Cli:
    """The installed clawpoint in a Slurm-only home with the elastic pool configured."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(CONFIG)
    return lambda *args: _cli(home, slurm_env, *args)


def counter(elastic: SlurmBackend, lineage: str, **fields: Any) -> str:
    """A self-verifying 16 MiB counter submitted to the elastic partition: its job id."""
    spec = SbatchSpec(
        lineage=lineage, partition="elastic",
        command=[sys.executable, "-m", "core.workloads.counter", "--state-mb", "16"],
        output=str(CLUSTER_DIR / "log" / f"{lineage}.out"), workdir=str(ROOT), **fields,
    )  # fmt: skip
    return submit(spec, elastic.cfg, elastic.transport).job_id


def test_pool_grows_shrinks_with_save_and_grows_back(elastic: SlurmBackend, cli: Cli) -> None:
    code, pools, said = cli("pools", "--json")
    assert code == 0, said
    assert [(p["id"], p["size"], p["max_size"], p["released"]) for p in pools] == [
        ("slurm:elastic", 0, 2, ["n4", "n5"])
    ]
    code, nodes, said = cli("nodes", "--json")
    assert code == 0 and {n["name"] for n in nodes} == {"n1", "n2", "n3"}, said

    code, out, said = cli("pools", "scale", "slurm:elastic", "--size", "1", "--json")
    assert code == 0 and out["status"] == "executed", said
    assert out["plan"]["risk"] == "safe" and out["plan"]["cost_effect"].startswith("+2.00/h")
    assert _slurmd_running("n4") and not _slurmd_running("n5")
    assert "n4" in {n.name for n in elastic.nodes()}

    lineage = f"pool-{os.getpid()}"
    job = counter(elastic, lineage)
    elastic.wait_until("the counter to run on n4", 60,
                       lambda: elastic.get_workload(job).node == "n4")  # fmt: skip
    wait_step(job, 20)

    code, _, said = cli("pools", "scale", "slurm:elastic", "--size", "0")
    assert code == 6 and "disruptive" in said, said  # the counter would move: a person decides
    assert elastic.get_workload(job).node == "n4" and _slurmd_running("n4")

    code, out, said = cli("pools", "scale", "slurm:elastic", "--size", "0", "--yes", "--json")
    assert code == 0 and out["status"] == "executed", said
    steps = {s["name"]: s for s in out["execution"]["steps"]}
    saved = steps[f"job{job}-wait_checkpoint"]["output"]["checkpoint"]
    assert elastic.get_workload(job).state.value == "stopped"  # saved and held
    assert elastic.power_state("n4").powered_down and not _slurmd_running("n4")
    code, pools, said = cli("pools", "--json")
    assert pools[0]["size"] == 0 and pools[0]["released"] == ["n4", "n5"], said

    code, out, said = cli("pools", "scale", "slurm:elastic", "--size", "1", "--json")
    assert code == 0 and out["status"] == "executed", said
    code, out, said = cli("resume", f"slurm:{job}", "--yes", "--json")
    assert code == 0 and out["status"] == "executed", said
    assert elastic.get_workload(job).node == "n4"
    assert_resumed(elastic, lineage, job, saved)


def test_a_shrink_hands_the_released_nodes_jobs_to_standbys_on_the_node_that_stays(
    elastic: SlurmBackend, cli: Cli
) -> None:
    code, out, said = cli("pools", "scale", "slurm:elastic", "--size", "2", "--json")
    assert code == 0 and out["status"] == "executed", said
    jobs: dict[str, tuple[str, str]] = {}  # node -> (job, lineage): a counter on each
    for node in ELASTIC:
        lineage = f"shrink-{node}-{os.getpid()}"
        jobs[node] = (counter(elastic, lineage, nodelist=node), lineage)
    for node, (job, _) in jobs.items():
        elastic.wait_until(f"the counter to run on {node}", 60,
                           lambda j=job, n=node: elastic.get_workload(j).node == n)  # fmt: skip
        wait_step(job, 20)

    code, out, said = cli("pools", "scale", "slurm:elastic", "--size", "1", "--yes", "--json")
    assert code == 0 and out["status"] == "executed", said
    steps = {s["name"]: s["output"] for s in out["execution"]["steps"]}
    [gone] = [n for n in ELASTIC if f"power_down-{n}" in steps]
    [stays] = [n for n in ELASTIC if n != gone]
    job, lineage = jobs[gone]
    took = steps[f"job{job}-takeover"]
    assert (took["how"], took["node"]) == ("handoff", stays) and took["job"] != job, took
    assert elastic.power_state(gone).powered_down and not _slurmd_running(gone)
    other = jobs[stays][0]
    assert elastic.get_workload(other).node == stays  # the node that stays: left alone
    # It counts on in the standby's job (its progress file keeps the first job's id).
    wait_step(job, int(str(progress(job).get("step", 0))) + 20)
    log = (CLUSTER_DIR / "log" / f"{lineage}.out").read_text()
    assert "STATE CHECK FAILED" not in log
