"""Steps of the Slurm backend's plans, and ``STEPS``, the table ``run_step`` dispatches on.

Each step is one Slurm command or one wait; it reads its args through their model
(``step_args``: a shape that does not fit is InvalidInput, nothing runs). Every arg is validated again before it reaches
an argv (a journal could be edited by hand): an invalid one runs nothing. ``recover_step``
says whether a step that had started before a crash took effect (``RECOVER``), and
``reconcile_step`` whether one that raised took effect anyway. Steps take ``SlurmContext``
(``context``), not the backend. Limits: a signal or a wait that failed is never assumed to
have worked.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from core import errors, logs
from core.backends.base import ProgressFn
from core.backends.slurm import pools
from core.backends.slurm.context import SlurmContext
from core.backends.slurm.ids import check_reason, check_value, job_id
from core.backends.slurm.step_args import (
    JobArgs,
    JobWaitArgs,
    NodeStateArgs,
    PutBackArgs,
    RequeueArgs,
    ResumeNodeArgs,
    SignalArgs,
    UpdateJobArgs,
    WaitCheckpointArgs,
    read,
)
from core.model import NodeHealth, WorkloadInfo, WorkloadState, validate_name

Args = dict[str, Any]
log = logs.get_logger("clawpoint.slurm")

_SIGNALS = {"USR1", "USR2"}
# How often a checkpoint wait looks at the store (its own directory listing, no slurmctld).
CHECKPOINT_POLL_S = 0.05
# Placement and start, and a pending job's allocation (``moving.allocation_fields``).
_UPDATE_KEYS = {"StartTime", "ExcNodeList", "NodeList", "NumCPUs", "CPUsPerTask",
                "MinMemoryNode", "TresPerNode"}  # fmt: skip
_ENDED = {WorkloadState.COMPLETED, WorkloadState.FAILED, WorkloadState.STOPPED}


# ----- validation helpers --------------------------------------------------------------
def _owner(owner: str | None) -> str | None:
    """The job owner whose part of the shared store a step reads (None: a plan made before
    stores were per user, which reads the store's top level as it did then)."""
    return validate_name(owner, what="user") if owner else None


def _lineage(lineage: str) -> str:
    return validate_name(lineage, what="lineage")


def _node(node: str) -> str:
    return validate_name(node, what="Slurm node name")


def _timeout(timeout_s: float | None) -> float:
    return max(1.0, min(float(timeout_s or 60.0), 3600.0))


def maybe_job(b: SlurmContext, job: str) -> WorkloadInfo | None:
    """Job ``job`` as inventory sees it (a standby too), or None once it left squeue."""
    try:
        return b.get_workload(job)
    except errors.NotFound:
        return None


_PLACEMENT_KEYS = frozenset({"NodeList", "ExcNodeList"})


def placement_fields(fields: dict[str, str]) -> dict[str, str]:
    """A move's placement (``moving.place``), each key allowed and each value checked."""
    if set(fields) - _PLACEMENT_KEYS:
        raise errors.InvalidInput(f"placement fields must be some of {sorted(_PLACEMENT_KEYS)}")
    return {k: check_value(v) if v else "" for k, v in fields.items()}


def _ended(b: SlurmContext, job: str) -> str | None:
    w = maybe_job(b, job)
    if w is None:
        return "gone"
    return w.state.value if w.state in _ENDED else None


# ----- steps ---------------------------------------------------------------------------
def signal(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    a = read(SignalArgs, args)
    job, sig = job_id(a.job), a.signal
    if sig not in _SIGNALS:
        raise errors.InvalidInput(f"signal {sig!r} is not USR1 or USR2")
    after = b.newest_seq(_lineage(a.lineage), _owner(a.owner))
    b.transport.run("scancel", [f"--signal={sig}", "--batch", job])
    return {"after_seq": after}


def wait_checkpoint(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    a = read(WaitCheckpointArgs, args)
    lineage = _lineage(a.lineage)
    after = int(a.after_seq or 0)

    def newer() -> Args | None:
        newest = b.newest_checkpoint(lineage, _owner(a.owner))
        if newest is None or newest.seq <= after:
            return None
        return {"checkpoint": newest.id, "seq": newest.seq}

    progress(0, None, f"waiting for a checkpoint of {lineage} newer than {after}")
    # The job is stopped from its dump until the move's release: every tick of this wait
    # past the checkpoint's publication is pause. It reads the store, not slurmctld, so it
    # looks often (the docs' Slurm migrate benchmark: 0.5 s ticks cost ~0.25 s a move).
    out: Args = b.wait_until(
        f"a checkpoint of {lineage}", _timeout(a.timeout_s), newer, every_s=CHECKPOINT_POLL_S
    )
    return out


def wait_ended(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    a = read(JobWaitArgs, args)
    job = job_id(a.job)
    state = b.wait_until(f"job {job} to stop", _timeout(a.timeout_s), lambda: _ended(b, job))
    return {"state": state}


def requeue(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    a = read(RequeueArgs, args)
    job = job_id(a.job)
    w = maybe_job(b, job)
    if w is None or w.state is not WorkloadState.PENDING:
        b.transport.run("scontrol", ["requeuehold" if a.hold else "requeue", job])
    elif a.hold:
        b.transport.run("scontrol", ["hold", job])
    return {"job": job}


def _field_pairs(fields: dict[str, str]) -> list[str]:
    """``Key=value`` for ``scontrol update``, each key allowed and each value checked."""
    if not fields or set(fields) - _UPDATE_KEYS:
        raise errors.InvalidInput(f"job fields must be some of {sorted(_UPDATE_KEYS)}")
    return [f"{k}={check_value(str(v)) if v else ''}" for k, v in fields.items()]


def update_job(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    a = read(UpdateJobArgs, args)
    job, fields = job_id(a.job), a.fields
    pairs = _field_pairs(fields)
    try:
        b.transport.run("scontrol", ["update", f"jobid={job}", *pairs])
    except errors.OperationFailed:
        if set(fields) != {"StartTime"} or not _started(b, job):
            raise
        # Released a moment before, Slurm started it before this asked it to start now
        # ("Job is no longer pending execution"): what the step was for. Failing here
        # failed a move or a resize's put_back whose job already ran (a busy machine).
        log.info("slurm.started_before_start_now", job=job)
    return {"job": job, **{k: str(v) for k, v in fields.items()}}


def _started(b: SlurmContext, job: str) -> bool:
    """The job left the queue: it runs, or ran and ended (``wait_running`` handles that)."""
    w = maybe_job(b, job)
    started = (WorkloadState.RUNNING, WorkloadState.COMPLETED, WorkloadState.FAILED)
    return w is not None and w.state in started


def release(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    job = job_id(read(JobArgs, args).job)
    b.transport.run("scontrol", ["release", job])
    return {"job": job}


def wait_running(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    a = read(JobWaitArgs, args)
    job = job_id(a.job)
    retries = [2]  # a restart that Slurm kills at once is requeued again, twice at most
    seen: list[str] = []  # the node the previous poll saw the job running on

    def running() -> str | None:
        w = maybe_job(b, job)
        if w and w.state is WorkloadState.RUNNING:
            # Slurm marks a job RUNNING when it allocates it and ends it milliseconds
            # later if the node refuses the launch: trust two polls in a row.
            node = w.node or "?"
            if seen == [node]:
                return node
            seen[:] = [node]
            return None
        seen.clear()
        ended = (WorkloadState.COMPLETED, WorkloadState.FAILED)
        if w is not None and w.state in ended and retries[0] > 0:
            # Slurm refuses to start a requeued job on a node within the second its
            # previous run ended there ("Job credential revoked") and ends it instead:
            # requeue it again and let it start a little later.
            retries[0] -= 1
            log.warning("slurm.restart_retry", job=job, state=w.state.value)
            b.transport.run("scontrol", ["requeue", job])
            b.transport.run("scontrol", ["update", f"jobid={job}", "StartTime=now+2"])
        return None

    return {"node": b.wait_until(f"job {job} to run", _timeout(a.timeout_s), running)}


def put_back(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    """Undo a restart that failed (a resize's): the job back to the fields it had (its old
    allocation, its old node), whatever step it failed at. Still running: it never stopped,
    nothing to do. Ended, or pending: held first (``requeue``), then given those fields,
    released and started now; its wrapper restores the newest good checkpoint. Should any
    of that fail, the job is left held with its state saved (release it later)."""
    a = read(PutBackArgs, args)
    job = job_id(a.job)
    if a.fields:
        _field_pairs(a.fields)  # an invalid field runs nothing, not half of this
    w = maybe_job(b, job)
    if w is None:
        raise errors.NotFound(f"Slurm job {job} is gone", hint="nothing left to put back")
    if w.state is WorkloadState.RUNNING:
        return {"job": job, "state": "running"}
    if w.state is not WorkloadState.STOPPED:
        requeue(b, {"job": job, "hold": True}, progress)
    if a.fields:
        update_job(b, {"job": job, "fields": a.fields}, progress)
    release(b, {"job": job}, progress)
    update_job(b, {"job": job, "fields": {"StartTime": "now"}}, progress)
    return {"job": job, "state": "released"}


def _set_node_state(state: str) -> Callable[[SlurmContext, Args, ProgressFn], Args]:
    """``drain`` (DRAIN: nothing new starts) or ``node_down`` (DOWN: its jobs end)."""

    def run(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
        a = read(NodeStateArgs, args)
        node = _node(a.node)
        reason = check_reason(a.reason or "clawpoint")
        b.transport.run(
            "scontrol", ["update", f"nodename={node}", f"state={state}", f"reason={reason}"]
        )
        return {"node": node, "state": state}

    return run


def resume_node(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    a = read(ResumeNodeArgs, args)
    node = _node(a.node)
    b.transport.run("scontrol", ["update", f"nodename={node}", "state=RESUME"])

    def back() -> str | None:  # a dead node's slurmd would leave it DOWN again
        n = b.get_node(node)
        return n.state if n.schedulable and n.health is NodeHealth.HEALTHY else None

    return {
        "node": node,
        "state": b.wait_until(f"{node} to take jobs", _timeout(a.timeout_s), back),
    }


STEPS: dict[str, Callable[[SlurmContext, Args, ProgressFn], Args]] = {
    "signal": signal,
    "wait_checkpoint": wait_checkpoint,
    "wait_ended": wait_ended,
    "requeue": requeue,
    "update_job": update_job,
    "release": release,
    "wait_running": wait_running,
    "put_back": put_back,
    "drain": _set_node_state("DRAIN"),
    "node_down": _set_node_state("DOWN"),
    "resume_node": resume_node,
    "power_up": pools.power_up,
    "power_down": pools.power_down,
}


# ----- after a crash or an error -------------------------------------------------------
def _signal_sent(b: SlurmContext, args: Args, started_at: datetime) -> Args | None:
    # Sent if a checkpoint appeared since the step started; else send it (again): one more
    # checkpoint is harmless.
    a = read(SignalArgs, args)
    newest = b.newest_checkpoint(_lineage(a.lineage), _owner(a.owner))
    if newest is not None and newest.created_at >= started_at:
        return {"after_seq": newest.seq - 1}
    return None


def _requeued(b: SlurmContext, args: Args, started_at: datetime) -> Args | None:
    a = read(RequeueArgs, args)
    w = maybe_job(b, job_id(a.job))
    held = w is not None and w.labels.get("reason") in ("JobHeldUser", "JobHeldAdmin")
    return (
        {"job": w.name}
        if w and (held or not a.hold) and w.state in (WorkloadState.PENDING, WorkloadState.STOPPED)
        else None
    )


def _node_in(flag: str) -> Callable[[SlurmContext, Args, datetime], Args | None]:
    def recovered(b: SlurmContext, args: Args, started_at: datetime) -> Args | None:
        n = b.get_node(read(NodeStateArgs, args).node)
        return {"node": n.name, "state": flag.upper()} if flag in n.state else None

    return recovered


def _node_back(b: SlurmContext, args: Args, started_at: datetime) -> Args | None:
    # Taken effect once the node is neither drained nor down; else resume it (again).
    n = b.get_node(read(ResumeNodeArgs, args).node)
    back = n.schedulable and n.health is NodeHealth.HEALTHY
    return {"node": n.name, "state": "RESUME"} if back else None


# Steps whose effect can be read back; waits, updates and releases are idempotent (run
# them again).
RECOVER: dict[str, Callable[[SlurmContext, Args, datetime], Args | None]] = {
    "signal": _signal_sent,
    "requeue": _requeued,
    "drain": _node_in("drain"),
    "node_down": _node_in("down"),
    "resume_node": _node_back,
    "power_up": lambda b, args, _started: pools.recover_power(b, "power_up", args),
    "power_down": lambda b, args, _started: pools.recover_power(b, "power_down", args),
}
# Steps whose effect is a state Slurm reports (a requeued/held job, a drained or down node).
RECONCILABLE = frozenset({"requeue", "drain", "node_down", "power_up", "power_down"})


def recover_step(b: SlurmContext, op: str, args: Args, started_at: datetime) -> Args | None:
    """The output of a step that took effect before a crash, or None (run it again)."""
    fn = RECOVER.get(op)
    if fn is None:
        return None
    try:
        return fn(b, args, started_at)
    except (errors.NotFound, errors.InvalidInput):
        return None  # run it again: an invalid step then fails before it changes anything


def reconcile_step(b: SlurmContext, op: str, args: Args, started_at: datetime) -> Args | None:
    """After a step raised: its output if Slurm shows it took effect anyway. A signal or a
    wait that failed is not assumed to have worked."""
    if op in RECONCILABLE:
        return recover_step(b, op, args, started_at)
    return None
