"""Inventory and queue depth against a real Slurm cluster, checked against squeue/sinfo."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest

from core import errors
from core.backends.slurm import SlurmBackend, SlurmConfig
from core.model import NodeHealth, WorkloadState
from tests.slurm.conftest import CLUSTER_DIR, restart_cluster, sh, stop_daemon

pytestmark = pytest.mark.slurm
T = TypeVar("T")
U = TypeVar("U")


def submit(name: str, *opts: str) -> str:
    out = sh(
        "sbatch",
        "--parsable",
        f"--job-name={name}",
        "-o",
        "/dev/null",
        *opts,
        "--wrap",
        "sleep 600",
    )
    return out.strip().split(";")[0]


def fill_cluster(name: str) -> list[str]:
    """Every CPU busy, then pending jobs in both partitions (some asking for GPUs)."""
    ids = [submit(name, "-p", "debug", "-n2", "-w", n) for n in ("n1", "n2", "n3")]
    ids += [submit(name, "-p", "debug", "-n1") for _ in range(2)]
    ids += [submit(name, "-p", "gpu", "--gres=gpu:1"), submit(name, "-p", "gpu", "--gres=gpu:2")]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait for the scheduler to place the first three
        running = sh("squeue", "-h", f"--name={name}", "-t", "R", "-o", "%i").split()
        if len(running) == 3:
            break
        time.sleep(0.5)
    return ids


def squeue_view(name: str) -> dict[str, tuple[str, str, str]]:
    out = sh("squeue", "-h", f"--name={name}", "-o", "%i|%T|%r|%P")
    rows = (line.split("|") for line in out.splitlines() if line)
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def stable(read: Callable[[], T], compute: Callable[[], U]) -> tuple[T, U]:
    """(read(), compute()) taken while read() did not change (the scheduler moves on)."""
    for _ in range(20):
        before = read()
        result = compute()
        if read() == before:
            return before, result
        time.sleep(0.5)
    raise AssertionError("the queue never held still")


def pending_counts() -> dict[str, dict[str, int]]:
    """Pending jobs by partition and reason, counted from squeue --json."""
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for job in json.loads(sh("squeue", "--json"))["jobs"]:
        state = job["job_state"]
        state = state[0] if isinstance(state, list) else state
        if state == "PENDING":
            counts[job["partition"]][job["state_reason"]] += 1
    return {p: dict(c) for p, c in counts.items()}


def test_jobs_and_queue_depth_match_squeue(backend: SlurmBackend, job_name: str) -> None:
    ids = fill_cluster(job_name)
    view, workloads = stable(lambda: squeue_view(job_name), backend.workloads)
    assert set(view) == set(ids)
    mine = {w.name: w for w in workloads if w.name in view}
    assert set(mine) == set(ids)
    for jid, (state, reason, part) in view.items():
        w = mine[jid]
        assert w.id == f"slurm:{jid}"
        assert w.labels["slurm_state"] == state
        assert w.partition == part
        assert w.labels["wrapped"] == "false"
        if state == "RUNNING":
            assert w.state is WorkloadState.RUNNING and w.node in ("n1", "n2", "n3")
        else:
            assert w.state is WorkloadState.PENDING
            # squeue's %r prints Slurm's description when there is one, else the reason.
            assert reason in (w.labels["reason"], w.message)

    # Queue depth (read through slurmrestd) against squeue's own count (all jobs, any name).
    expected, queue = stable(pending_counts, backend.queue_depth)
    depth = {q.partition: q for q in queue}
    assert set(depth) >= {"debug", "gpu"}
    for part in ("debug", "gpu"):
        assert depth[part].pending == sum(expected[part].values())
        assert depth[part].pending_by_reason == expected[part]
        assert depth[part].oldest_pending_age_s is not None
    assert depth["gpu"].pending_gpus >= 3  # our two gpu jobs ask for 1 + 2
    assert depth["debug"].running >= 3


def test_nodes_match_sinfo(backend: SlurmBackend) -> None:
    out = sh("sinfo", "-h", "-N", "-o", "%N|%P|%c|%m|%G|%t")
    parts: dict[str, set[str]] = collections.defaultdict(set)
    cpus: dict[str, int] = {}
    for line in out.splitlines():
        name, part, cpu, _mem, _gres, state = line.split("|")
        if state.endswith(("~", "%")):
            continue  # powered down (or going): a pool's released capacity, not a node up
        parts[name].add(part.rstrip("*"))
        cpus[name] = int(cpu)
    nodes = {n.name: n for n in backend.nodes()}
    assert set(nodes) == set(parts)
    for name, node in nodes.items():
        assert node.id == f"slurm:{name}"
        assert set(node.partitions) == parts[name]
        assert node.cpus == cpus[name]
    assert nodes["n3"].gpus == 2 and nodes["n1"].gpus == 0
    assert {p.name for p in backend.partitions()} == {"debug", "gpu"}


def test_drained_node_is_reported_with_reason(backend: SlurmBackend) -> None:
    sh("scontrol", "update", "nodename=n2", "state=DRAIN", "reason=inventory test")
    try:
        n2 = backend.get_node("n2")
        assert "drain" in n2.state and not n2.schedulable
        assert n2.health is NodeHealth.DEGRADED
        assert n2.reason == "inventory test"
    finally:
        sh("scontrol", "update", "nodename=n2", "state=RESUME")


def test_tcp_with_jwt(slurm_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    if "CLAWPOINT_SLURM_URL" not in slurm_env:
        pytest.skip("no JWT plugin on this cluster: slurmrestd runs on the unix socket only")
    monkeypatch.delenv("CLAWPOINT_SLURM_SOCKET")
    b = SlurmBackend(SlurmConfig(rest_url=slurm_env["CLAWPOINT_SLURM_URL"]))
    assert b.transport.cfg.rest_socket is None  # really over TCP, with a token from scontrol
    version = b.transport.api_version()
    assert version.startswith("v0.0.")
    assert b.transport.rest("nodes") is not None
    assert {n.name for n in b.nodes()} == {"n1", "n2", "n3"}


def test_commands_json_when_slurmrestd_is_down(backend: SlurmBackend, job_name: str) -> None:
    jid = submit(job_name, "-p", "gpu", "--gres=gpu:2", "--begin=now+1hour")
    stop_daemon(CLUSTER_DIR / "run" / "slurmrestd-unix.pid")
    try:
        assert backend.transport.rest("jobs") is None  # really down
        w = backend.get_workload(jid)
        assert w.state is WorkloadState.PENDING and w.labels["reason"] == "BeginTime"
        assert {n.name for n in backend.nodes()} == {"n1", "n2", "n3"}
        gpu = next(q for q in backend.queue_depth() if q.partition == "gpu")
        assert gpu.pending_by_reason.get("BeginTime", 0) >= 1
    finally:
        restart_cluster()


@pytest.mark.timeout(180)
def test_controller_down_is_backend_unavailable(backend: SlurmBackend) -> None:
    def refused(read: str) -> errors.BackendUnavailable:
        # Each read with a backend of its own, as separate clients would: every one of them
        # waits out Slurm's own retries to reach the controller (about MessageTimeout, 10 s),
        # so the three together take one such wait, not three.
        mine = SlurmBackend(backend.cfg)
        with pytest.raises(errors.BackendUnavailable) as info:
            getattr(mine, read)()
        return info.value

    stop_daemon(CLUSTER_DIR / "run" / "slurmctld.pid")
    try:
        with ThreadPoolExecutor(max_workers=3) as pool:
            found = list(pool.map(refused, ("nodes", "workloads", "queue_depth")))
        for exc in found:
            assert "controller" in str(exc)
            assert exc.hint
    finally:
        restart_cluster()
    assert {n.name for n in backend.nodes()} == {"n1", "n2", "n3"}
