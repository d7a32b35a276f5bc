"""Version-independent parsing and the sbatch script (no cluster needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core import errors
from core.backends.slurm import SbatchSpec, SlurmConfig, render_sbatch
from core.backends.slurm.inventory import gpus_in, queue_depth, to_node, to_workload
from core.model import NodeHealth, WorkloadState

# Shapes as 23.02+ (data parser v0.0.40-42) prints them: lists of states, number objects.
NODE_V40 = {
    "name": "g1",
    "state": ["IDLE", "DRAIN"],
    "reason": "bad fan",
    "cpus": 64,
    "real_memory": 512000,
    "gres": "gpu:h100:8(S:0-1)",
    "features": ["gpu", "ib"],
    "partitions": ["gpu"],
}
JOB_V40 = {
    "job_id": 42,
    "job_state": ["PENDING"],
    "state_reason": "Resources",
    "partition": "gpu",
    "submit_time": {"set": True, "infinite": False, "number": 1_700_000_000},
    "start_time": {"set": True, "infinite": False, "number": 0},
    "tres_per_node": "gres/gpu:4",
    "node_count": {"set": True, "infinite": False, "number": 2},
    "cpus": {"set": True, "infinite": False, "number": 8},
    "requeue": True,
    "comment": "clawpoint:train-7",
    "name": "clawpoint-train-7",
    "restart_cnt": 1,
}


def test_node_v40_shape() -> None:
    n = to_node(NODE_V40, [])
    assert n.id == "slurm:g1" and n.gpus == 8 and n.cpus == 64 and n.memory_mb == 512000
    assert n.state == "idle+drain" and not n.schedulable and n.health is NodeHealth.DEGRADED
    assert n.reason == "bad fan" and n.labels["features"] == "gpu,ib"


def test_node_v38_shape_down_flag() -> None:
    n = to_node({"name": "n1", "state": "idle", "state_flags": ["NOT_RESPONDING"]}, [])
    assert n.health is NodeHealth.DOWN and "not_responding" in n.state


def test_job_v40_shape_and_queue_depth() -> None:
    w = to_workload(JOB_V40, "clawpoint")
    assert w.id == "slurm:42" and w.state is WorkloadState.PENDING and w.gpus == 4
    assert w.labels["lineage"] == "train-7" and w.labels["wrapped"] == "true"
    now = datetime.fromtimestamp(1_700_000_100, UTC)
    (q,) = queue_depth([JOB_V40], ["gpu"], now)
    assert q.pending == 1 and q.pending_by_reason == {"Resources": 1}
    assert q.oldest_pending_age_s == 100.0 and q.pending_gpus == 8 and q.pending_cpus == 8


def test_held_job_is_stopped() -> None:
    raw = {**JOB_V40, "state_reason": "JobHeldAdmin"}
    assert to_workload(raw, "clawpoint").state is WorkloadState.STOPPED


@pytest.mark.parametrize(
    ("spec", "gpus"),
    [("gres:gpu:2", 2), ("gres/gpu=3", 3), ("gpu:a100:1", 1), ("cpu=2,mem=1G", 0), ("", 0)],
)
def test_gpu_counts(spec: str, gpus: int) -> None:
    assert gpus_in(spec) == gpus


def test_render_sbatch() -> None:
    cfg = SlurmConfig(checkpoint_dir="/shared/ckpt", wrapper_command=["/opt/cp/bin/clawpoint"])
    spec = SbatchSpec(
        lineage="train-1",
        command=["python", "train.py", "--lr", "0.1; rm -rf /"],
        partition="gpu",
        gpus=2,
        signal_before_end_s=120,
        checkpoint_every_s=600,
    )
    script = render_sbatch(spec, cfg)
    assert "#SBATCH --requeue" in script
    assert "#SBATCH --comment=clawpoint:train-1" in script
    assert "#SBATCH --signal=B:USR1@120" in script
    assert "#SBATCH --gres=gpu:2" in script
    assert "/shared/ckpt" in script
    last = script.strip().splitlines()[-1]
    assert last.startswith(
        "exec /opt/cp/bin/clawpoint run --name train-1 --checkpoint-every 600 --"
    )
    assert "'0.1; rm -rf /'" in last  # quoted: one argument, never shell syntax


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lineage": "../x"},
        {"lineage": "ok", "partition": "gpu;reboot"},
        {"lineage": "ok", "extra_env": {"A;B": "1"}},
    ],
)
def test_render_rejects_bad_input(kwargs: dict[str, object]) -> None:
    with pytest.raises((errors.InvalidInput, ValueError)):
        render_sbatch(SbatchSpec(command=["true"], **kwargs), SlurmConfig())
