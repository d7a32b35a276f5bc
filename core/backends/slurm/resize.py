"""``resize`` on Slurm: a running job gets new CPUs, memory or GPUs.

Slurm sizes a job when it schedules it and never grows a running one, so a resize is
always checkpoint-and-stop (``moving.save_and_stop``, as preempt and migrate), then the
held job is given its new allocation (``NumCPUs``/``CPUsPerTask``, ``MinMemoryNode``,
``TresPerNode=gres:gpu[:TYPE]:N``: what ``--cpus-per-task``, ``--mem`` and ``--gres`` would
have set) and the node ``sizing.pick_node`` chose (its own when the new size fits there),
released and started (``moving.restart``); its wrapper restores the checkpoint. Every
resize pauses the job, on its own node too: it is disruptive whatever it gives.

The sizes are Slurm's: a job's allocation (``inventory.to_workload``), a node's CPUs, memory
and GRES, and what its other jobs hold (``inventory.allocated``: alloc_cpus, alloc_memory,
gres_used, less the job's own share on its own node). Only nodes of the job's partition
are candidates. Whole CPUs only (Slurm allocates no fraction); no node fits: Conflict
``no-node-fits`` naming each node and why.

On failure (``on_failure``) the job is put back with its old allocation where it was
(``steps.put_back``) and awaited; should that fail too, it is left held with its state
saved. Limits: one task on one node (the sbatch helper's jobs); a job's memory per CPU is
replaced by memory per node.
"""

from __future__ import annotations

from core import errors
from core.action_params import ResizeParams
from core.backends import sizing
from core.backends.base import PlanDraft
from core.backends.slurm.context import SlurmContext
from core.backends.slurm.inventory import allocated
from core.backends.slurm.moving import allocation_fields, place, restart, save_and_stop
from core.backends.slurm.step_args import JobWaitArgs, PutBackArgs, step
from core.model import NodeInfo, PlanScope, WorkloadInfo, WorkloadState
from core.timings import estimate_pause

# Requeue, release, scheduling and a new wrapper's start on top of dump and restore (the
# loopback cluster: 5-10 s); a pause with no checkpoint measured yet is a migrate's 30 s.
RESTART_S = 10.0
UNMEASURED_PAUSE_S = 30.0
HOW = "checkpoint, stop, restart with the new allocation: Slurm cannot resize a running job"


def plan_resize(b: SlurmContext, w: WorkloadInfo, params: ResizeParams) -> PlanDraft:
    if w.state is not WorkloadState.RUNNING:
        raise errors.Conflict(
            f"Slurm job {w.name} is {w.state.value}, not running",
            hint="only a running job can be resized; resume it first",
        )
    b.lineage(w)  # NotSupported for a job not under the wrapper: it could not be restored
    if params.cpus is not None and params.cpus != int(params.cpus):
        raise errors.InvalidInput(
            f"{params.cpus:g} CPUs for Slurm job {w.name}: Slurm allocates whole CPUs",
            hint=f"pass {errors.arg('cpus')} as a whole number (1, 2...)",
        )
    before = sizing.size_of(w)
    after = sizing.wanted(w, params)
    everywhere = b.nodes()
    nodes = [n for n in everywhere if not w.partition or w.partition in n.partitions]
    to = b.node_name(str(params.to)) if params.to else None
    if to and to in {n.name for n in everywhere} - {n.name for n in nodes}:
        raise errors.Conflict(
            f"node {to} is not in partition {w.partition} of Slurm job {w.name}",
            hint=f"pass a node of {w.partition} as {errors.arg('to')}, or omit it "
            f"({errors.step('list_nodes', backend='slurm')})",
        )
    used = _used(b, w, nodes)
    target = sizing.pick_node(nodes, after, used, workload=w, to=to)
    source = next((n for n in nodes if n.name == w.node), None)
    new = allocation_fields(
        int(after.cpus) if after.cpus is not None else None,
        after.memory_mb,
        after.gpus,
        after.gpu_class,
        had_gpus=bool(before.gpus),
    )
    old = allocation_fields(
        int(before.cpus) if before.cpus is not None else None,
        before.memory_mb,
        before.gpus,
        before.gpu_class,
        had_gpus=bool(after.gpus),
    )
    steps = save_and_stop(b, w) + restart(b, w.name, place(target.name, None), allocation=new)
    undo = [
        step(
            "put_back",
            "put_back",
            PutBackArgs(job=w.name, fields=old | place(w.node, None) if w.node else old),
            f"put job {w.name} back: {before.text()} on {w.node} (unless it never stopped)",
        ),
        step(
            "wait_put_back",
            "wait_running",
            JobWaitArgs(job=w.name, timeout_s=b.cfg.start_timeout_s),
            f"wait until job {w.name} runs again where it was",
        ),
    ]
    # Every resize restarts the job, on its own node too: a pause, its state saved first.
    return sizing.resize_draft(
        w,
        before,
        after,
        source=source,
        target=target,
        steps=steps,
        pause_s=_pause(b, w),
        scope=PlanScope(partition=w.partition, node=w.node, gpus=w.gpus, labels=w.labels),
        undo=undo,
        how=HOW,
        restarts=True,
    )


def _used(b: SlurmContext, w: WorkloadInfo, nodes: list[NodeInfo]) -> dict[str, sizing.Size]:
    """What the other jobs of each node hold, as slurmctld counts it: on the job's own node,
    less its own allocation (it stops before it restarts)."""
    wanted = {n.name for n in nodes}
    used: dict[str, sizing.Size] = {}
    for raw in b.raw_nodes():
        name = str(raw.get("name", ""))
        if name not in wanted:
            continue
        held = allocated(raw)
        cpus, mem, gpus = float(held.cpus), held.memory_mb, held.gpus
        if name == w.node:
            cpus -= w.cpus or 0.0
            # Memory that is not a consumable resource is counted as 0 for every job.
            mem -= min(mem, w.memory_mb or 0)
            gpus -= w.gpus
        used[name] = sizing.Size(max(cpus, 0.0), max(mem, 0), max(gpus, 0))
    return used


def _pause(b: SlurmContext, w: WorkloadInfo) -> float:
    """Dump and restore of its newest checkpoint (``core.timings``) plus Slurm's restart."""
    newest = b.newest_checkpoint(b.lineage(w), b.owner(w))
    measured = estimate_pause(newest) if newest is not None else None
    return measured + RESTART_S if measured is not None else UNMEASURED_PAUSE_S
