"""A live Slurm move: a standby job on the target takes the workload over from the source.

A requeue pauses the job for everything after its stop: slurmctld scheduling it again
(0.1 to 3 s on the loopback cluster), slurmd launching it, the wrapper's Python start, and
the restore from the checkpoint the source hashed, synced and published first. Here the
target's wrapper is started *before* anything pauses: the job's own batch script is
submitted again (``sbatch`` of ``scontrol write batch_script``) onto the target, told by
its environment to stand by (``CLAWPOINT_STANDBY``); it announces itself in the user's
store and waits on TCP (``core.wrapper.handoff_remote``). Then the source is signalled as
for any move; its wrapper finds the standby, dumps, ends its payload and orders the standby,
which restores the staged images at once; the checkpoint is hashed and published after.

The steps (planned by ``moving.live_move``): ``standby_submit`` -> ``wait_standby`` -> the usual ``signal``,
``wait_checkpoint``, ``wait_ended`` -> ``takeover``. The workload then runs in the standby's
job: **its Slurm job id changes** (the plan's result says the new one; the source job ends
COMPLETED). Whatever keeps the standby from taking over (live handoff off, another user's
job, jobs that depend on this one, a script from before this feature, no room on the
target, a standby that never got or failed its order) ends in ``takeover`` restarting the
source job the ordinary way (requeue, place, release), from the checkpoint just published:
the move still happens, as before, and nothing is lost. ``takeover`` cancels a standby only
by winning the rendezvous's rename (``handoff_remote.move``), so it never cancels one that
took the order.

Limits: the caller must be the job's owner (``sbatch`` submits as the caller); drains and
preempts still requeue; one task on one node, as every wrapped job.
"""

from __future__ import annotations

import re
import time
from typing import Any

from core import errors, logs
from core.backends.base import ProgressFn
from core.backends.slurm import steps as base_steps
from core.backends.slurm.context import SlurmContext
from core.backends.slurm.ids import check_value, job_id
from core.backends.slurm.inventory import comment_fields, is_standby
from core.backends.slurm.sbatch import submitting_user
from core.backends.slurm.step_args import StandbyArgs, TakeoverArgs, WaitStandbyArgs, read
from core.engine_names import ENGINES
from core.model import WorkloadState, validate_name
from core.specs import check_standby_token
from core.wrapper import handoff, handoff_remote

Args = dict[str, Any]
log = logs.get_logger("clawpoint.slurm")

HOME_ENV = "CLAWPOINT_JOB_HOME_ID"


# ----- steps -----------------------------------------------------------------------------
def standby_submit(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    """Submit the standby; never fails the move: ``why`` says why there is none."""
    a = read(StandbyArgs, args)
    job, lineage = job_id(a.job), validate_name(a.lineage, what="lineage")
    fields = base_steps.placement_fields(a.fields)
    try:
        raw, script = _source(b, job, a.owner)
    except _NoStandby as exc:
        log.info("slurm.no_standby", job=job, why=str(exc))
        return {"standby": "", "token": "", "why": str(exc)}
    token = handoff.new_token()
    comment = comment_fields(raw)  # the job's own comment: its owner could have edited it
    home = comment["home"] if comment.get("home", "").isdigit() else job
    label = ",".join([f"{b.cfg.marker}:{lineage}", *_kept(comment), f"standby={token}",
                      f"from={job}", f"home={home}"])  # fmt: skip
    env = {"CLAWPOINT_STANDBY": token, "CLAWPOINT_STANDBY_FOR": job,
           "CLAWPOINT_STANDBY_TIMEOUT": f"{a.timeout_s or 600:g}", HOME_ENV: home}  # fmt: skip
    argv = ["--parsable", f"--job-name={check_value(str(raw.get('name') or ''))}",
            f"--comment={label}", "--export=ALL," + ",".join(f"{k}={v}" for k, v in env.items())]  # fmt: skip
    if fields.get("NodeList"):
        argv.append(f"--nodelist={fields['NodeList']}")
    elif fields.get("ExcNodeList"):
        argv.append(f"--exclude={fields['ExcNodeList']}")
    for key, opt in (("standard_output", "--output"), ("current_working_directory", "--chdir")):
        value = str(raw.get(key) or "")
        if value.startswith("/"):  # its log goes on in the same file, from the same place
            argv.append(f"{opt}={value}")
    argv.append("--open-mode=append")
    try:
        out = b.transport.run("sbatch", argv, stdin=script).strip()
    except errors.ClawpointError as exc:
        return {"standby": "", "token": "", "why": f"sbatch refused the standby: {exc.message}"}
    standby = out.split(";")[0]
    if not standby.isdigit():
        return {"standby": "", "token": "", "why": f"sbatch printed {out!r}, not a job id"}
    return {"standby": standby, "token": token, "why": ""}


def wait_standby(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    """Wait until the standby runs and its rendezvous says it listens; else cancel it."""
    a = read(WaitStandbyArgs, args)
    if not a.standby:
        return {"node": "", "why": "no standby"}
    standby, token = job_id(a.standby), check_standby_token(a.token)
    root = b.store(a.owner).root
    lineage = validate_name(a.lineage, what="lineage")

    ask_slurm = _Every(b.cfg.poll_interval_s)

    def listening() -> Args | None:
        # The rendezvous (a file) at every look: its announcement ends the wait at once;
        # slurmctld only now and then, for a standby that ended without announcing itself.
        state = handoff_remote.state_of(root, lineage, token)
        if state == "waiting":
            r = handoff_remote.read(root, lineage, token, "waiting")
            return {"node": (r.node if r else None) or "?", "why": ""}  # "": none listens
        if state is not None:
            return {"node": "", "why": f"the standby is {state}"}
        if ask_slurm.due():
            w = base_steps.maybe_job(b, standby)
            if w is None or w.state in (WorkloadState.COMPLETED, WorkloadState.FAILED):
                return {"node": "", "why": f"the standby job {standby} ended before it listened"}
        return None

    try:
        out: Args = b.wait_until("the standby to listen", _bounded(a.timeout_s), listening,
                                 every_s=0.05)  # fmt: skip
    except errors.OperationFailed:
        out = {"node": "", "why": f"the standby job {standby} did not start in time (the "
               "target may have no room)"}  # fmt: skip
    if not out["node"]:
        _drop(b, root, lineage, token, standby)
    return out


def takeover(b: SlurmContext, args: Args, progress: ProgressFn) -> Args:
    """The standby's restore, confirmed (``how``: handoff, the new ``job``), else the
    source job restarted the ordinary way (``how``: restart)."""
    a = read(TakeoverArgs, args)
    job, lineage = job_id(a.job), validate_name(a.lineage, what="lineage")
    fields = base_steps.placement_fields(a.fields)
    why = "no standby"
    if a.standby:
        standby, token = job_id(a.standby), check_standby_token(a.token)
        done = _taken_over(b, standby, lineage, a.owner)
        if done is not None:  # this step ran before, up to the relabel (a crash since)
            return done
        root = b.store(a.owner).root
        why = _await_takeover(b, root, lineage, token, standby, _bounded(a.timeout_s))
        if handoff_remote.state_of(root, lineage, token) == "ordered" and _alive(b, standby):
            raise errors.OperationFailed(
                f"the standby job {standby} is still restoring job {job}'s workload: {why}; "
                f"job {job} was not restarted, so that it never runs twice",
                hint=f"watch job {standby}: it runs the workload once its restore ends; if it "
                f"ends instead, requeue job {job} (scontrol requeue {job}): it restores the "
                "newest checkpoint",
            )
        if not why:
            r = handoff_remote.read(root, lineage, token, "taken")
            _relabel(b, standby, lineage)  # before the rendezvous goes: ``_taken_over``
            handoff_remote.remove(root, lineage, token)
            log.info("slurm.handed_over", job=job, to=standby)
            w = base_steps.maybe_job(b, standby)
            return {"job": standby, "workload": f"slurm:{standby}",
                    "node": (w.node if w else "") or "", "how": "handoff",
                    "why": "", "checkpoint": (r.checkpoint if r else None) or ""}  # fmt: skip
        _drop(b, root, lineage, token, standby)
        handoff_remote.remove(root, lineage, token)
    log.info("slurm.handoff_fallback", job=job, why=why)
    progress(0, None, f"restarting job {job} the ordinary way: {why}")
    base_steps.requeue(b, {"job": job, "hold": True}, progress)
    if fields:
        base_steps.update_job(b, {"job": job, "fields": fields}, progress)
    base_steps.release(b, {"job": job}, progress)
    base_steps.update_job(b, {"job": job, "fields": {"StartTime": "now"}}, progress)
    newest = b.newest_checkpoint(lineage, a.owner)  # what its wrapper restores
    ran = base_steps.wait_running(b, {"job": job, "timeout_s": a.start_timeout_s}, progress)
    if newest is None or newest.seq <= int(a.after_seq or 0):
        why += "; no new checkpoint was published: it restarts from the one before the move"
    return {"job": job, "workload": f"slurm:{job}", "node": ran["node"], "how": "restart", "why": why,
            "checkpoint": newest.id if newest else ""}  # fmt: skip


STEPS = {"standby_submit": standby_submit, "wait_standby": wait_standby, "takeover": takeover}


def _submitted(b: SlurmContext, args: Args, started_at: Any) -> Args | None:
    """After a crash in ``standby_submit``: the standby it submitted, if Slurm lists one
    (else submitting another is harmless: an unused standby ends by itself)."""
    a = read(StandbyArgs, args)
    job = job_id(a.job)
    for raw in b.raw_jobs():
        fields = comment_fields(raw)
        if fields.get("from") == job and fields.get("standby"):
            return {"standby": str(raw.get("job_id")), "token": fields["standby"], "why": ""}
    return None


# Steps whose effect can be read back after a crash (the others are waits, or decide
# again from what they read: ``takeover`` first asks whether it already happened).
RECOVER = {"standby_submit": _submitted}


# ----- helpers ---------------------------------------------------------------------------
class _Every:
    """Says "due" at most every ``every_s``: the waits look at a file often and ask
    slurmctld only now and then."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._last = float("-inf")

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last < self.every_s:
            return False
        self._last = now
        return True


class _NoStandby(Exception):
    """Why this job gets no standby (the move requeues it instead)."""


def _source(b: SlurmContext, job: str, owner: str | None) -> tuple[dict[str, Any], str]:
    """The source job's record and batch script, if a standby can continue it."""
    if not b.cfg.live_handoff:
        raise _NoStandby("live handoffs are off ([slurm] live_handoff = false)")
    if not b.cfg.checkpoint_dir:
        raise _NoStandby("no shared checkpoint directory ([slurm] checkpoint_dir)")
    me = submitting_user()
    if owner != me:
        raise _NoStandby(f"the job is {owner}'s: only its owner may submit its standby (not {me})")
    raws = b.raw_jobs()
    raw = next((r for r in raws if str(r.get("job_id")) == job), None)
    if raw is None:
        raise _NoStandby(f"job {job} is gone")
    # Slurm prints it as "afterok:623(unfulfilled)" (squeue --json, 22.05): the id, whole.
    on_it = re.compile(rf"(?<![0-9]){job}(?![0-9])")
    waiting = [str(r.get("job_id")) for r in raws if on_it.search(str(r.get("dependency") or ""))]
    if waiting:
        # A dependency follows the job id, and the source ends COMPLETED: they would start.
        raise _NoStandby(f"job(s) {', '.join(waiting)} depend on it, and its id would change")
    try:
        script = b.transport.run("scontrol", ["write", "batch_script", job, "-"])
    except errors.ClawpointError as exc:
        raise _NoStandby(f"its batch script cannot be read: {exc.message}") from None
    if HOME_ENV not in script:
        raise _NoStandby("its batch script predates live handoffs (resubmit it to get them)")
    return raw, _without_placement(script)


_COMMENT = re.compile(r"[A-Za-z0-9_.,:=-]{1,200}")  # what standby_submit writes
_PLACEMENT = re.compile(r"^#SBATCH\s+(--nodelist|--exclude|-w|-x)\b")


def _without_placement(script: str) -> str:
    """The script without its own node list or exclusions: the move places the standby
    (``--nodelist`` on the command line would not clear the script's ``--exclude`` of the
    very node: sbatch refuses that pair)."""
    return "".join(line for line in script.splitlines(keepends=True) if not _PLACEMENT.match(line))


def _kept(comment: dict[str, str]) -> list[str]:
    """The source's comment fields a standby keeps (its engine, if it is one)."""
    return [f"engine={comment['engine']}"] if comment.get("engine") in ENGINES else []


def _await_takeover(
    b: SlurmContext, root: Any, lineage: str, token: str, standby: str, timeout_s: float
) -> str:
    """ "" once the standby says it runs the workload; else why not (it is then no longer
    able to take it: cancelled, failed, expired or gone)."""
    ask_slurm = _Every(b.cfg.poll_interval_s)  # the rendezvous often, slurmctld now and then
    watch = handoff_remote.TakeoverWatch(
        root, lineage, token, alive=lambda: not ask_slurm.due() or _alive(b, standby),
        what=f"the standby job {standby}",
    )  # fmt: skip
    try:
        said: str = b.wait_until("the standby's takeover", timeout_s, watch.settled, every_s=0.05)
    except errors.OperationFailed:
        return f"the standby did not finish its restore within {timeout_s:g} s"
    return "" if said == "taken" else said


def _alive(b: SlurmContext, standby: str) -> bool:
    w = base_steps.maybe_job(b, standby)
    return w is not None and w.state is WorkloadState.RUNNING


def _drop(b: SlurmContext, root: Any, lineage: str, token: str, standby: str) -> None:
    """Cancel a standby that has not taken the workload (never one that has)."""
    if not handoff_remote.cancel(root, lineage, token, alive=lambda: _alive(b, standby)):
        return  # it won the rename: it runs (or restores) the workload
    try:
        b.transport.run("scancel", [standby])
    except errors.ClawpointError as exc:  # it exits by itself at its timeout
        log.warning("slurm.standby_not_cancelled", job=standby, error=exc.message)


def _taken_over(b: SlurmContext, standby: str, lineage: str, owner: str | None) -> Args | None:
    """The step's output if the standby already runs the workload under its new label."""
    w = base_steps.maybe_job(b, standby)
    if w is None or w.state is not WorkloadState.RUNNING or is_standby(w):
        return None
    newest = b.newest_checkpoint(lineage, owner)
    return {"job": standby, "workload": f"slurm:{standby}", "node": w.node or "", "how": "handoff", "why": "",
            "checkpoint": newest.id if newest else ""}  # fmt: skip


def _relabel(b: SlurmContext, standby: str, lineage: str) -> None:
    """The standby's comment without ``standby=`` and ``from=``: inventory shows it as the
    workload (its wrapper does the same once it restored: whichever comes first)."""
    raw = next((r for r in b.raw_jobs() if str(r.get("job_id")) == standby), {})
    comment = str(raw.get("comment") or "")
    label = handoff_remote.workload_comment(comment)
    if not comment.startswith(f"{b.cfg.marker}:{lineage},") or not _COMMENT.fullmatch(label):
        return  # not the comment standby_submit gave it: leave it as it is
    try:
        b.transport.run("scontrol", ["update", f"jobid={standby}", f"comment={label}"])
    except errors.ClawpointError as exc:
        log.warning("slurm.relabel_failed", job=standby, error=exc.message)


def _bounded(timeout_s: float | None) -> float:
    return max(1.0, min(float(timeout_s or 60.0), 3600.0))
