"""Moving a Slurm job: save and stop it (signal, wait for its checkpoint, requeue it held),
then restart it somewhere (placement fields, release, start now, wait until it runs).

The step sequences every plan that moves wrapped jobs is built from (``plans``: migrate,
preempt, drain; ``pools``: a shrink; ``resize``: a restart with a new allocation).
``live_move``: a migrate's steps when a standby job takes the job over (``handoff``).
Read-only: they build steps, ``steps`` and ``handoff`` run them.
"""

from __future__ import annotations

from core.backends.slurm.context import SlurmContext
from core.backends.slurm.ids import check_value
from core.backends.slurm.step_args import (
    JobArgs,
    JobWaitArgs,
    RequeueArgs,
    SignalArgs,
    StandbyArgs,
    TakeoverArgs,
    UpdateJobArgs,
    WaitCheckpointArgs,
    WaitStandbyArgs,
    step,
)
from core.model import PlanStep, WorkloadInfo


def save_and_stop(b: SlurmContext, w: WorkloadInfo, prefix: str = "") -> list[PlanStep]:
    lineage = b.lineage(w)
    p = f"{prefix}{w.name}-" if prefix else ""
    return [
        step(
            f"{p}signal",
            "signal",
            SignalArgs(job=w.name, signal="USR2", lineage=lineage, owner=b.owner(w)),
            f"send SIGUSR2 to the wrapper of job {w.name}: checkpoint, then stop",
        ),
        step(
            f"{p}wait_checkpoint",
            "wait_checkpoint",
            WaitCheckpointArgs(
                lineage=lineage,
                owner=b.owner(w),
                after_seq=f"${p}signal.after_seq",
                timeout_s=b.cfg.checkpoint_timeout_s,
            ),
            f"wait for a new checkpoint of {lineage} in the shared store",
        ),
        step(
            f"{p}wait_ended",
            "wait_ended",
            JobWaitArgs(job=w.name, timeout_s=b.cfg.checkpoint_timeout_s),
            f"wait for job {w.name} to leave its node",
        ),
        step(
            f"{p}requeue",
            "requeue",
            RequeueArgs(job=w.name, hold=True),
            f"requeue job {w.name} held (it pends until released)",
        ),
    ]


def restart(
    b: SlurmContext,
    job: str,
    fields: dict[str, str],
    prefix: str = "",
    allocation: dict[str, str] | None = None,
) -> list[PlanStep]:
    """Release a held job (placed by ``fields``: ``place``) and wait until it runs again;
    with ``allocation`` (``allocation_fields``), it first gets that allocation: Slurm sizes
    a job only while it pends, so this is how a job's CPUs, memory or GPUs change."""
    p = f"{prefix}{job}-" if prefix else ""
    steps = []
    if allocation:
        desc = ", ".join(f"{k}={v or '(none)'}" for k, v in allocation.items())
        size = UpdateJobArgs(job=job, fields=allocation)
        steps.append(step(f"{p}allocate", "update_job", size, f"new allocation: {desc}"))
    if fields:
        desc = ", ".join(f"{k}={v}" for k, v in fields.items())
        place = UpdateJobArgs(job=job, fields=fields)
        steps.append(step(f"{p}place", "update_job", place, f"set {desc}"))
    steps += [
        step(f"{p}release", "release", JobArgs(job=job), f"release job {job}"),
        step(
            f"{p}start_now",
            "update_job",
            UpdateJobArgs(job=job, fields={"StartTime": "now"}),
            "StartTime=now (a requeued job otherwise pends with reason BeginTime)",
        ),
        step(
            f"{p}wait_running",
            "wait_running",
            JobWaitArgs(job=job, timeout_s=b.cfg.start_timeout_s),
            f"wait until job {job} runs again (its wrapper restores the checkpoint)",
        ),
    ]
    return steps


def live_move(
    b: SlurmContext, w: WorkloadInfo, target: str | None, source: str, prefix: str = ""
) -> list[PlanStep]:
    """A live move of ``w``: a standby job on the target takes it over, else ``takeover``
    requeues it (``handoff``). No wait for a published checkpoint between: the source
    publishes after the standby restored (and not at all if it dies right after its order,
    when the standby still runs the workload); ``takeover`` reports the checkpoint."""
    lineage, owner = b.lineage(w), b.owner(w)
    where = place(target, source)
    # The standby waits from its start: the source's signal, then its dump.
    standby_wait_s = min(3600.0, b.cfg.checkpoint_timeout_s + 60.0)
    stop = [s for s in save_and_stop(b, w, prefix) if s.op in ("signal", "wait_ended")]
    p = f"{prefix}{w.name}-" if prefix else ""  # as save_and_stop names its steps
    return [
        step(
            f"{p}standby",
            "standby_submit",
            StandbyArgs(
                job=w.name, lineage=lineage, owner=owner, fields=where, timeout_s=standby_wait_s
            ),
            f"submit job {w.name}'s own batch script again "
            + (f"on {target}" if target else f"away from {source}")
            + " as a standby that waits for the workload (nothing paused yet)",
        ),
        step(
            f"{p}wait_standby",
            "wait_standby",
            WaitStandbyArgs(
                standby=f"${p}standby.standby",
                token=f"${p}standby.token",
                lineage=lineage,
                owner=owner,
                timeout_s=b.cfg.start_timeout_s,
            ),
            "wait until the standby runs and listens",
        ),
        *stop,
        step(
            f"{p}takeover",
            "takeover",
            TakeoverArgs(
                job=w.name,
                standby=f"${p}standby.standby",
                token=f"${p}standby.token",
                lineage=lineage,
                owner=owner,
                after_seq=f"${p}signal.after_seq",
                fields=where,
                timeout_s=b.cfg.checkpoint_timeout_s,
                start_timeout_s=b.cfg.start_timeout_s,
            ),
            "the standby runs the workload (a new job id); else restart the job there",
        ),
    ]


def allocation_fields(
    cpus: int | None, memory_mb: int | None, gpus: int, gpu_class: str | None, *, had_gpus: bool
) -> dict[str, str]:
    """Job fields that give a pending job this allocation, as ``--cpus-per-task``, ``--mem``
    and ``--gres=gpu[:TYPE]:N`` would have (one task: its CPUs are the job's). A job that
    had GPUs and is to have none has its GRES cleared; an unlimited size sets nothing."""
    fields: dict[str, str] = {}
    if cpus is not None:
        fields |= {"NumCPUs": str(cpus), "CPUsPerTask": str(cpus)}
    if memory_mb is not None:
        fields["MinMemoryNode"] = str(memory_mb)
    if gpus:
        kind = f"{check_value(gpu_class)}:" if gpu_class else ""
        fields["TresPerNode"] = f"gres:gpu:{kind}{gpus}"
    elif had_gpus:
        fields["TresPerNode"] = ""
    return fields


def place(target: str | None, avoid: str | None) -> dict[str, str]:
    """Job fields that send a restarted job to ``target``, else away from ``avoid``.

    Clear the other list: a job submitted with --nodelist=SOURCE and then excluded from
    SOURCE would pend forever with reason BadConstraints."""
    if target:
        return {"ExcNodeList": "", "NodeList": check_value(target)}
    if avoid:
        return {"NodeList": "", "ExcNodeList": check_value(avoid)}
    return {}
