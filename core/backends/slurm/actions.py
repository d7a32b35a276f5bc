"""Plans and steps of the Slurm backend's actions (see ``backend`` for what each does).

Each step is one Slurm command or one wait, named, with JSON-able args; ``run_step``
re-validates every arg (a journal could be edited) before it reaches an argv, and
``recover_step`` says whether a step that had started before a crash took effect.
Values of the form ``$STEP.FIELD`` are filled in by the service from earlier outputs.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from core import errors
from core.actions import CordonParams, DrainParams, MoveParams, NoParams, StartParams
from core.backends.base import PlanDraft, ProgressFn
from core.model import NodeHealth, NodeInfo, PlanStep, WorkloadInfo, WorkloadState, validate_name

if TYPE_CHECKING:
    from core.backends.slurm.backend import SlurmBackend

_SIGNALS = {"USR1", "USR2"}
_UPDATE_KEYS = {"StartTime", "ExcNodeList", "NodeList"}
_VALUE_RE = re.compile(r"^[A-Za-z0-9_.,\[\]-]{1,200}$")
_REASON_RE = re.compile(r"^[A-Za-z0-9 _.,:/()@+-]{1,200}$")
log = structlog.get_logger("clawpoint.slurm")
_ENDED = {WorkloadState.COMPLETED, WorkloadState.FAILED, WorkloadState.STOPPED}


def _owner(args: dict[str, Any]) -> str | None:
    """The job owner whose part of the shared store a step reads (None: a plan made before
    stores were per user, which reads the store's top level as it did then)."""
    owner = args.get("owner")
    return validate_name(str(owner), what="user") if owner else None


def _step(name: str, op: str, description: str, **args: Any) -> PlanStep:
    return PlanStep(name=name, op=op, args=args, description=description)


def _save_and_stop(b: SlurmBackend, w: WorkloadInfo, prefix: str = "") -> list[PlanStep]:
    lineage = b._lineage(w)
    p = f"{prefix}{w.name}-" if prefix else ""
    return [
        _step(
            f"{p}signal",
            "signal",
            f"send SIGUSR2 to the wrapper of job {w.name}: checkpoint, then stop",
            job=w.name,
            signal="USR2",
            lineage=lineage,
            owner=b.owner(w),
        ),
        _step(
            f"{p}wait_checkpoint",
            "wait_checkpoint",
            f"wait for a new checkpoint of {lineage} in the shared store",
            lineage=lineage,
            owner=b.owner(w),
            after_seq=f"${p}signal.after_seq",
            timeout_s=b.cfg.checkpoint_timeout_s,
        ),
        _step(
            f"{p}wait_ended",
            "wait_ended",
            f"wait for job {w.name} to leave its node",
            job=w.name,
            timeout_s=b.cfg.checkpoint_timeout_s,
        ),
        _step(
            f"{p}requeue",
            "requeue",
            f"requeue job {w.name} held (it pends until released)",
            job=w.name,
            hold=True,
        ),
    ]


def _restart(b: SlurmBackend, job: str, fields: dict[str, str], prefix: str = "") -> list[PlanStep]:
    p = f"{prefix}{job}-" if prefix else ""
    steps = []
    if fields:
        desc = ", ".join(f"{k}={v}" for k, v in fields.items())
        steps.append(_step(f"{p}place", "update_job", f"set {desc}", job=job, fields=fields))
    steps += [
        _step(f"{p}release", "release", f"release job {job}", job=job),
        _step(
            f"{p}start_now",
            "update_job",
            "StartTime=now (a requeued job otherwise pends with reason BeginTime)",
            job=job,
            fields={"StartTime": "now"},
        ),
        _step(
            f"{p}wait_running",
            "wait_running",
            f"wait until job {job} runs again (its wrapper restores the checkpoint)",
            job=job,
            timeout_s=b.cfg.start_timeout_s,
        ),
    ]
    return steps


def _scope(w: WorkloadInfo) -> dict[str, Any]:
    return {"partition": w.partition, "node": w.node, "gpus": w.gpus, "labels": w.labels}


def _target(b: SlurmBackend, params: MoveParams, *, away_from: str | None) -> str | None:
    """The node named by ``to`` (``n2`` or ``slurm:n2``), checked to exist and take jobs."""
    wanted = params.to
    if wanted is None:
        return None
    node = b.get_node(str(wanted))
    if away_from and node.name in away_from.split(","):
        raise errors.InvalidInput(
            f"the job is already on {node.id}",
            hint=f"pass another node as {errors.arg('to')}, or omit it to let Slurm pick one",
        )
    if not node.schedulable:
        raise errors.Conflict(
            f"node {node.id} is {node.state} and takes no jobs",
            hint="pick a node that is up and not drained "
            f"({errors.step('list_nodes', backend='slurm')})",
        )
    return node.name


def _place(target: str | None, avoid: str | None) -> dict[str, str]:
    """Job fields that send a restarted job to ``target``, else away from ``avoid``.

    Clear the other list: a job submitted with --nodelist=SOURCE and then excluded from
    SOURCE would pend forever with reason BadConstraints."""
    if target:
        return {"ExcNodeList": "", "NodeList": _value(target)}
    if avoid:
        return {"NodeList": "", "ExcNodeList": _value(avoid)}
    return {}


def plan_checkpoint(b: SlurmBackend, w: WorkloadInfo, params: NoParams) -> PlanDraft:
    """A leave-running checkpoint (SIGUSR1); checkpoint-and-stop is ``plan_preempt``."""
    _require_running(w)
    lineage = b._lineage(w)
    stop = False
    sig = "USR2" if stop else "USR1"
    steps = [
        _step(
            "signal",
            "signal",
            f"send SIG{sig} to the wrapper of job {w.name}",
            job=w.name,
            signal=sig,
            lineage=lineage,
            owner=b.owner(w),
        ),
        _step(
            "wait_checkpoint",
            "wait_checkpoint",
            f"wait for a new checkpoint of {lineage}",
            lineage=lineage,
            owner=b.owner(w),
            after_seq="$signal.after_seq",
            timeout_s=b.cfg.checkpoint_timeout_s,
        ),
    ]
    return PlanDraft(
        steps=steps,
        summary=f"checkpoint Slurm job {w.name} ({lineage}) on {w.node}"
        + (" and stop it" if stop else ", leaving it running"),
        expected_pause_s=None if stop else 1.0,
        saves=f"the full process state of job {w.name} to the shared checkpoint directory",
        rollback="nothing to roll back: a checkpoint only adds an image",
        scope=_scope(w),
    )


def plan_preempt(b: SlurmBackend, w: WorkloadInfo, params: NoParams) -> PlanDraft:
    _require_running(w)
    return PlanDraft(
        steps=_save_and_stop(b, w),
        summary=f"preempt Slurm job {w.name}: checkpoint, stop, requeue held (frees {w.node})",
        saves="the job's state; it resumes from it when released",
        rollback=f"resume it: clawpoint resume slurm:{w.name}",
        scope=_scope(w),
    )


def plan_resume(b: SlurmBackend, w: WorkloadInfo, params: StartParams) -> PlanDraft:
    if w.state is not WorkloadState.STOPPED and w.state is not WorkloadState.PENDING:
        raise errors.Conflict(
            f"Slurm job {w.name} is {w.state.value}, not held or pending",
            hint="only a preempted (held) or pending job can be resumed",
        )
    _require_restorable(b, w, params)
    target = _target(b, params, away_from=None)
    return PlanDraft(
        steps=_restart(b, w.name, _place(target, None)),
        summary=f"resume Slurm job {w.name}: release it and start it now"
        + (f" on {target}" if target else ""),
        saves="nothing new: the wrapper restores the newest good checkpoint",
        rollback=f"preempt it again: clawpoint preempt slurm:{w.name}",
        scope=_scope(w),
    )


def plan_migrate(b: SlurmBackend, w: WorkloadInfo, params: MoveParams) -> PlanDraft:
    _require_running(w)
    source = w.node or ""
    target = _target(b, params, away_from=source)
    return PlanDraft(
        steps=_save_and_stop(b, w) + _restart(b, w.name, _place(target, source)),
        summary=f"migrate Slurm job {w.name} off {source}"
        + (f" onto {target}" if target else " (Slurm picks the node)"),
        expected_pause_s=30.0,
        saves="the job's full state, restored by the wrapper on the new node",
        rollback=f"migrate it back: clawpoint migrate slurm:{w.name} --to {source}"
        if source
        else "",
        scope=_scope(w),
    )


def plan_drain(b: SlurmBackend, node: NodeInfo, params: DrainParams) -> PlanDraft:
    reason = _reason(params.reason or "clawpoint drain")
    save = params.save
    target = _target(b, params, away_from=node.name)
    jobs = [b.get_workload(wid) for wid in node.workloads]
    wrapped = [w for w in jobs if w.labels.get("lineage") and w.state is WorkloadState.RUNNING]
    others = [w.name for w in jobs if w not in wrapped]
    steps = [
        _step(
            "drain",
            "drain",
            f"drain {node.name}: nothing new starts there",
            node=node.name,
            reason=reason,
        )
    ]
    if save:
        away = _place(target, node.name)
        for w in wrapped:
            steps += _save_and_stop(b, w, prefix="job") + _restart(b, w.name, away, prefix="job")
    note = f"; left running until they end: {', '.join(others)}" if others else ""
    return PlanDraft(
        steps=steps,
        summary=f"drain Slurm node {node.name}, moving {len(wrapped)} wrapped job(s) off"
        + (f" onto {target}" if target and save else "")
        + note,
        saves="each wrapped job's state, restored on another node" if save else "",
        rollback=f"return it to service: clawpoint nodes undrain slurm:{node.name}",
        scope={"node": node.name, "partitions": node.partitions},
    )


def plan_cordon(b: SlurmBackend, node: NodeInfo, params: CordonParams) -> PlanDraft:
    """Slurm's own drain: no new job starts there; running jobs go on until they end."""
    if not node.schedulable:
        raise errors.Conflict(
            f"Slurm node {node.name} is {node.state}: it already takes no new jobs",
            hint="nothing to do; 'clawpoint nodes --backend slurm' shows each node's state",
        )
    steps = [
        _step(
            "drain",
            "drain",
            f"drain {node.name}: nothing new starts there; running jobs go on",
            node=node.name,
            reason=_reason(params.reason or "clawpoint cordon"),
        )
    ]
    return PlanDraft(
        steps=steps,
        summary=f"cordon Slurm node {node.name}: no new job starts there; "
        f"{len(node.workloads)} job(s) keep running",
        saves="nothing to save: no job moves",
        rollback=f"return it to service: clawpoint nodes undrain slurm:{node.name}",
        scope={"node": node.name, "partitions": node.partitions},
    )


def plan_undrain(b: SlurmBackend, node: NodeInfo, params: NoParams) -> PlanDraft:
    if node.schedulable and node.health is NodeHealth.HEALTHY:
        raise errors.Conflict(
            f"Slurm node {node.name} is {node.state}: not drained or down",
            hint="nothing to undo; 'clawpoint nodes --backend slurm' shows each node's state",
        )
    return PlanDraft(
        steps=[
            _step(
                "resume_node",
                "resume_node",
                f"return {node.name} to service (scontrol update state=RESUME) and wait "
                "until it takes jobs",
                node=node.name,
                timeout_s=30.0,
            )
        ],
        summary=f"undrain Slurm node {node.name} ({node.state}): jobs may start there again",
        saves="nothing to save: no job moves",
        rollback=f"drain it again: clawpoint drain slurm:{node.name}",
        scope={"node": node.name, "partitions": node.partitions},
    )


def plan_failover(b: SlurmBackend, w: WorkloadInfo, params: StartParams) -> PlanDraft:
    b._lineage(w)
    _require_restorable(b, w, params)
    node = w.node or ""
    target = _target(b, params, away_from=node or None)
    return PlanDraft(
        steps=_failover_steps(b, w.name, node, target),
        summary=f"fail over Slurm job {w.name}"
        + (f" from {node}" if node else "")
        + (f" onto {target}" if target else "")
        + ": requeue it elsewhere; the wrapper restores the newest good checkpoint",
        saves="nothing new: progress since the newest checkpoint is lost",
        rollback="none needed: the job restarts from its checkpoint",
        scope=_scope(w),
    )


def plan_failover_node(b: SlurmBackend, node: NodeInfo, params: StartParams) -> PlanDraft:
    target = _target(b, params, away_from=node.name)
    steps: list[PlanStep] = []
    for wid in node.workloads:
        w = b.get_workload(wid)
        if w.labels.get("lineage"):
            steps += _failover_steps(b, w.name, node.name, target, prefix="job")
    if not steps:
        raise errors.NotFound(
            f"no wrapped job runs on {node.name}", hint="nothing to fail over on this node"
        )
    return PlanDraft(
        steps=steps,
        summary=f"fail over every wrapped job of node {node.name}"
        + (f" onto {target}" if target else ""),
        saves="nothing new: each job restarts from its newest checkpoint",
        scope={"node": node.name, "partitions": node.partitions},
    )


def _failover_steps(
    b: SlurmBackend, job: str, node: str, target: str | None, prefix: str = ""
) -> list[PlanStep]:
    p = f"{prefix}{job}-" if prefix else ""
    steps: list[PlanStep] = []
    if node:
        steps.append(
            _step(
                f"{p}node_down",
                "node_down",
                f"mark {node} DOWN (its jobs end)",
                node=_value(node),
                reason="clawpoint failover",
            )
        )
    steps.append(_step(f"{p}requeue", "requeue", f"requeue job {job} held", job=job, hold=True))
    return steps + _restart(b, job, _place(target, node or None), prefix)


def _require_restorable(b: SlurmBackend, w: WorkloadInfo, params: StartParams) -> None:
    """A restarted job's wrapper restores the newest good checkpoint of its lineage, and
    refuses to start at all when the lineage has checkpoints but none verifies (it never
    silently starts over). Refuse such a plan up front (sizes only: cheap), and refuse
    ``fresh``: starting a Slurm job over is a new submission, not a restart."""
    if params.fresh:
        raise errors.NotSupported(
            f"the slurm backend cannot start job {w.name} from scratch",
            hint="cancel it and submit the command again (clawpoint slurm submit) under a new "
            "lineage",
        )
    lineage = w.labels.get("lineage")
    if not lineage or not b.cfg.checkpoint_dir:
        return
    store = b.store(b.owner(w))
    published = store.published_ids(validate_name(lineage, what="lineage"))
    if not published:
        return  # never checkpointed: the wrapper starts it as the new lineage it is
    for info in store.candidates(lineage):
        try:
            store.verify(info.id, digests=False)
            return
        except errors.CorruptCheckpoint:
            continue
    raise errors.CorruptCheckpoint(
        f"every checkpoint of {lineage} (job {w.name}) is corrupt: its wrapper would refuse "
        "to start; nothing was changed",
        hint="cancel the job and submit it again to start over (its progress is lost)",
        details={"checkpoints": published},
    )


# ----- steps ---------------------------------------------------------------------------
def run_step(
    b: SlurmBackend, op: str, args: dict[str, Any], progress: ProgressFn
) -> dict[str, Any]:
    tr = b.transport
    if op == "signal":
        job, sig = _job(args), str(args.get("signal"))
        if sig not in _SIGNALS:
            raise errors.InvalidInput(f"signal {sig!r} is not USR1 or USR2")
        after = b.newest_seq(validate_name(str(args.get("lineage")), what="lineage"), _owner(args))
        tr.run("scancel", [f"--signal={sig}", "--batch", job])
        return {"after_seq": after}
    if op == "wait_checkpoint":
        lineage = validate_name(str(args.get("lineage")), what="lineage")
        after = int(args.get("after_seq") or 0)

        def newer() -> dict[str, Any] | None:
            newest = b.newest_checkpoint(lineage, _owner(args))
            if newest is None or newest.seq <= after:
                return None
            return {"checkpoint": newest.id, "seq": newest.seq}

        progress(0, None, f"waiting for a checkpoint of {lineage} newer than {after}")
        out: dict[str, Any] = b.wait_until(f"a checkpoint of {lineage}", _timeout(args), newer)
        return out
    if op == "wait_ended":
        job = _job(args)
        state = b.wait_until(f"job {job} to stop", _timeout(args), lambda: _ended(b, job))
        return {"state": state}
    if op == "requeue":
        job = _job(args)
        w = _maybe(b, job)
        if w is None or w.state is not WorkloadState.PENDING:
            tr.run("scontrol", ["requeuehold" if args.get("hold") else "requeue", job])
        elif args.get("hold"):
            tr.run("scontrol", ["hold", job])
        return {"job": job}
    if op == "update_job":
        job = _job(args)
        fields = args.get("fields") or {}
        if not isinstance(fields, dict) or not fields or set(fields) - _UPDATE_KEYS:
            raise errors.InvalidInput(f"job fields must be some of {sorted(_UPDATE_KEYS)}")
        pairs = [f"{k}={_value(str(v)) if v else ''}" for k, v in fields.items()]
        tr.run("scontrol", ["update", f"jobid={job}", *pairs])
        return {"job": job, **{k: str(v) for k, v in fields.items()}}
    if op == "release":
        job = _job(args)
        tr.run("scontrol", ["release", job])
        return {"job": job}
    if op == "wait_running":
        job = _job(args)
        retries = [2]  # a restart that Slurm kills at once is requeued again, twice at most
        seen: list[str] = []  # the node the previous poll saw the job running on

        def running() -> str | None:
            w = _maybe(b, job)
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
                tr.run("scontrol", ["requeue", job])
                tr.run("scontrol", ["update", f"jobid={job}", "StartTime=now+2"])
            return None

        return {"node": b.wait_until(f"job {job} to run", _timeout(args), running)}
    if op in ("drain", "node_down"):
        node = validate_name(str(args.get("node")), what="Slurm node name")
        state = "DRAIN" if op == "drain" else "DOWN"
        reason = _reason(str(args.get("reason") or "clawpoint"))
        tr.run("scontrol", ["update", f"nodename={node}", f"state={state}", f"reason={reason}"])
        return {"node": node, "state": state}
    if op == "resume_node":
        node = validate_name(str(args.get("node")), what="Slurm node name")
        tr.run("scontrol", ["update", f"nodename={node}", "state=RESUME"])

        def back() -> str | None:  # a dead node's slurmd would leave it DOWN again
            n = b.get_node(node)
            return n.state if n.schedulable and n.health is NodeHealth.HEALTHY else None

        return {"node": node, "state": b.wait_until(f"{node} to take jobs", _timeout(args), back)}
    raise errors.InvalidInput(f"unknown Slurm step {op!r}", hint="re-plan the action")


def recover_step(
    b: SlurmBackend, op: str, args: dict[str, Any], started_at: datetime
) -> dict[str, Any] | None:
    """The output of a step that took effect before a crash, or None (run it again)."""
    try:
        if op == "signal":
            # Sent if a checkpoint appeared since the step started; else send it (again):
            # one more checkpoint is harmless.
            lineage = validate_name(str(args.get("lineage")), what="lineage")
            newest = b.newest_checkpoint(lineage, _owner(args))
            if newest is not None and newest.created_at >= started_at:
                return {"after_seq": newest.seq - 1}
            return None
        if op in ("requeue",):
            w = _maybe(b, _job(args))
            held = w is not None and w.labels.get("reason") in ("JobHeldUser", "JobHeldAdmin")
            return (
                {"job": w.name}
                if w
                and (held or not args.get("hold"))
                and w.state in (WorkloadState.PENDING, WorkloadState.STOPPED)
                else None
            )
        if op in ("drain", "node_down"):
            n = b.get_node(str(args.get("node")))
            flag = "drain" if op == "drain" else "down"
            return {"node": n.name, "state": flag.upper()} if flag in n.state else None
        if op == "resume_node":
            # Taken effect once the node is neither drained nor down; else resume it (again).
            n = b.get_node(str(args.get("node")))
            back = n.schedulable and n.health is NodeHealth.HEALTHY
            return {"node": n.name, "state": "RESUME"} if back else None
        return None  # waits, updates and releases are idempotent: run them again
    except errors.NotFound:
        return None


def reconcile_step(
    b: SlurmBackend, op: str, args: dict[str, Any], started_at: datetime
) -> dict[str, Any] | None:
    """After a step raised: its output if Slurm shows it took effect anyway. Only steps whose
    effect is a state Slurm reports (a requeued/held job, a drained or down node) qualify; a
    signal or a wait that failed is not assumed to have worked."""
    if op in ("requeue", "drain", "node_down"):
        return recover_step(b, op, args, started_at)
    return None


# ----- validation helpers --------------------------------------------------------------
def _job(args: dict[str, Any]) -> str:
    from core.backends.slurm.backend import job_id

    return job_id(str(args.get("job")))


def _value(value: str) -> str:
    if not _VALUE_RE.fullmatch(value):
        raise errors.InvalidInput(
            f"invalid Slurm value {value!r}", hint="use node names such as n1 or n[1-2]"
        )
    return value


def _reason(value: str) -> str:
    if not _REASON_RE.fullmatch(value):
        raise errors.InvalidInput(
            f"invalid reason {value!r}", hint="letters, digits, spaces and _.,:/()@+- only"
        )
    return value


def _timeout(args: dict[str, Any]) -> float:
    return max(1.0, min(float(args.get("timeout_s") or 60.0), 3600.0))


def _require_running(w: WorkloadInfo) -> None:
    if w.state is not WorkloadState.RUNNING:
        raise errors.Conflict(
            f"Slurm job {w.name} is {w.state.value}, not running",
            hint="only a running job can be checkpointed or moved; resume it first",
        )


def _maybe(b: SlurmBackend, job: str) -> WorkloadInfo | None:
    try:
        return b.get_workload(job)
    except errors.NotFound:
        return None


def _ended(b: SlurmBackend, job: str) -> str | None:
    w = _maybe(b, job)
    if w is None:
        return "gone"
    return w.state.value if w.state in _ENDED else None
