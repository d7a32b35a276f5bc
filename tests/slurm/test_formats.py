"""Version-independent parsing and the sbatch script (no cluster needed)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core import errors
from core.backends.slurm import SbatchSpec, SlurmConfig, render_sbatch
from core.backends.slurm.inventory import (
    allocated,
    gpu_class_in,
    gpus_in,
    queue_depth,
    to_node,
    to_workload,
)
from core.backends.slurm.moving import allocation_fields
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


@pytest.mark.parametrize(
    ("spec", "kind"),
    [("gres:gpu:a100:1", "a100"), ("gres/gpu:H100=2", "h100"), ("gpu:h100:8(S:0-1)", "h100"),
     ("gpu:a100:1(IDX:0)", "a100"), ("gres:gpu:2", None), ("gres/gpu=3", None), ("", None)],
)  # fmt: skip
def test_gpu_class(spec: str, kind: str | None) -> None:
    assert gpu_class_in(spec) == kind


def test_sizes_of_a_running_job_as_22_05_prints_them() -> None:
    """squeue --json / slurmrestd v0.0.38 on the loopback cluster: ``cpus`` is the allocation,
    ``memory_per_node`` the --mem; no --mem leaves memory unlimited (the TRES then shows the
    node's whole memory, which is not the job's choice)."""
    raw = {"job_id": 7, "job_state": "RUNNING", "nodes": "n3", "cpus": 2,
           "memory_per_node": 500, "memory_per_cpu": None, "tres_per_node": "gres:gpu:a100:1",
           "tres_alloc_str": "cpu=2,node=1,billing=2", "gres_detail": ["gpu:a100:1(IDX:0)"]}  # fmt: skip
    w = to_workload(raw, "clawpoint")
    assert (w.cpus, w.memory_mb, w.gpus, w.gpu_class) == (2, 500, 1, "a100")
    bare = {"job_id": 8, "job_state": "RUNNING", "cpus": 1, "memory_per_node": None,
            "tres_req_str": "cpu=1,mem=2000M,node=1,billing=1"}  # fmt: skip
    unlimited = to_workload(bare, "clawpoint")
    assert (unlimited.memory_mb, unlimited.gpu_class) == (None, None)
    per_cpu = {**bare, "cpus": 4, "memory_per_cpu": 256}
    assert to_workload(per_cpu, "clawpoint").memory_mb == 1024


def test_sizes_in_the_v40_shape() -> None:
    w = to_workload({**JOB_V40, "memory_per_node": {"set": True, "number": 4096}}, "clawpoint")
    assert (w.cpus, w.memory_mb, w.gpus, w.gpu_class) == (8, 4096, 4, None)
    unset = {**JOB_V40, "memory_per_node": {"set": False, "infinite": False, "number": 0}}
    assert to_workload(unset, "clawpoint").memory_mb is None
    n = to_node(NODE_V40, [])
    assert n.gpu_class == "h100"
    held = allocated({"alloc_cpus": 3, "alloc_memory": 1000, "gres_used": "gpu:h100:2(IDX:0-1)"})
    assert (held.cpus, held.memory_mb, held.gpus) == (3, 1000, 2)
    assert allocated({"alloc_cpus": 0, "alloc_memory": 0, "gres_used": "gpu:0"}).gpus == 0


def test_allocation_fields() -> None:
    """What a pending job is given: --cpus-per-task, --mem, --gres as scontrol fields."""
    assert allocation_fields(2, 600, 0, None, had_gpus=False) == {
        "NumCPUs": "2", "CPUsPerTask": "2", "MinMemoryNode": "600"}  # fmt: skip
    assert allocation_fields(None, None, 2, "a100", had_gpus=False) == {
        "TresPerNode": "gres:gpu:a100:2"}  # fmt: skip
    assert allocation_fields(1, None, 0, None, had_gpus=True) == {
        "NumCPUs": "1", "CPUsPerTask": "1", "TresPerNode": ""}  # fmt: skip


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
