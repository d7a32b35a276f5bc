"""The Slurm backend's step arguments: one model per step op, and ``ARGS``, op -> model.

Plans build each step from its model (``step``), so a misspelt or missing argument fails
when the plan is drafted; ``dispatch.plan`` checks every step of a draft against ``ARGS``
once more. Steps read their arguments back through the same models (``read``) after the
executor resolved ``$step.field`` references, then validate each value again before it
reaches an argv (``ids``). The recorded JSON is what plans recorded before the models.
``OUTPUTS`` (op -> model) says what each step reports: ``$signal.after_seq`` is checked
against it when the plan is made, each answer when it comes.
Limits: shapes only; job ids, names and reasons are checked by the steps (``ids``).
"""

from __future__ import annotations

from core.backends.step_models import Later, StepArgs, StepOutput, build, read
from core.model import PlanStep

__all__ = ["ARGS", "OUTPUTS", "read", "step"]


class SignalArgs(StepArgs):
    """Send ``signal`` (USR1: checkpoint; USR2: checkpoint, then stop) to job ``job``'s
    wrapper; ``lineage`` and ``owner`` say where its checkpoints land."""

    job: str
    signal: str
    lineage: str
    owner: str | None = None  # None: a plan made before stores were per user


class WaitCheckpointArgs(StepArgs):
    """Wait for a checkpoint of ``lineage`` newer than ``after_seq`` (``$signal.after_seq``)."""

    lineage: str
    owner: str | None = None
    after_seq: int | Later | None = None
    timeout_s: float | None = None


class JobWaitArgs(StepArgs):
    """``wait_ended``, ``wait_running``: wait up to ``timeout_s`` for job ``job``."""

    job: str
    timeout_s: float | None = None


class RequeueArgs(StepArgs):
    """Requeue job ``job``, held (it pends until released) with ``hold``."""

    job: str
    hold: bool = False


class UpdateJobArgs(StepArgs):
    """Set some of StartTime, NodeList, ExcNodeList and, while it pends, NumCPUs,
    CPUsPerTask, MinMemoryNode, TresPerNode of job ``job`` (checked by the step)."""

    job: str
    fields: dict[str, str]


class PutBackArgs(StepArgs):
    """``put_back``: job ``job`` back to ``fields`` (its old allocation and node), released."""

    job: str
    fields: dict[str, str]


class JobArgs(StepArgs):
    """``release``: one job."""

    job: str


class NodeStateArgs(StepArgs):
    """``drain``, ``node_down``: set a node's state, with the reason Slurm shows."""

    node: str
    reason: str | None = None


class ResumeNodeArgs(StepArgs):
    """Return ``node`` to service; wait up to ``timeout_s`` until it takes jobs."""

    node: str
    timeout_s: float | None = None


class PowerArgs(StepArgs):
    """``power_up``, ``power_down``: Slurm's power saving for ``node`` (POWER_UP, POWER_DOWN),
    waiting up to ``timeout_s`` until it is up, or powered down."""

    node: str
    timeout_s: float | None = None


class StandbyArgs(StepArgs):
    """``standby_submit``: job ``job``'s standby, placed by ``fields`` (NodeList or
    ExcNodeList), waiting up to ``timeout_s`` for its order (``handoff``)."""

    job: str
    lineage: str
    owner: str | None = None
    fields: dict[str, str]
    timeout_s: float | None = None


class WaitStandbyArgs(StepArgs):
    """``wait_standby``: until job ``standby`` (none: nothing to wait for) runs and its
    rendezvous ``token`` says it listens."""

    standby: str | Later
    token: str | Later
    lineage: str
    owner: str | None = None
    timeout_s: float | None = None


class TakeoverArgs(StepArgs):
    """``takeover``: the standby's word, else job ``job`` restarted, placed by ``fields``."""

    job: str
    standby: str | Later
    token: str | Later
    lineage: str
    owner: str | None = None
    after_seq: int | Later | None = None  # the checkpoint reported comes after it
    fields: dict[str, str]
    timeout_s: float | None = None
    start_timeout_s: float | None = None


ARGS: dict[str, type[StepArgs]] = {
    "signal": SignalArgs,
    "wait_checkpoint": WaitCheckpointArgs,
    "wait_ended": JobWaitArgs,
    "requeue": RequeueArgs,
    "update_job": UpdateJobArgs,
    "release": JobArgs,
    "wait_running": JobWaitArgs,
    "put_back": PutBackArgs,
    "drain": NodeStateArgs,
    "node_down": NodeStateArgs,
    "resume_node": ResumeNodeArgs,
    "power_up": PowerArgs,
    "power_down": PowerArgs,
    "standby_submit": StandbyArgs,
    "wait_standby": WaitStandbyArgs,
    "takeover": TakeoverArgs,
}


# ----- outputs ---------------------------------------------------------------------------
class SignalOutput(StepOutput):
    """The newest checkpoint's number before the signal: the one awaited comes after it."""

    after_seq: int


class CheckpointOutput(StepOutput):
    checkpoint: str
    seq: int


class EndedOutput(StepOutput):
    state: str


class JobOutput(StepOutput):
    """``requeue``, ``release``, ``update_job`` (which also echoes the fields it set)."""

    job: str


class RunningOutput(StepOutput):
    node: str


class PutBackOutput(StepOutput):
    """``running``: it never stopped; ``released``: it was put back and released."""

    job: str
    state: str


class NodeStateOutput(StepOutput):
    node: str
    state: str


class StandbyOutput(StepOutput):
    """The standby's job id and token, both empty when there is none (``why``)."""

    standby: str
    token: str
    why: str


class StandbyReadyOutput(StepOutput):
    """The node the standby listens on; empty when it does not (``why``)."""

    node: str
    why: str


class TakeoverOutput(StepOutput):
    """The job that runs the workload now and where; ``how``: handoff (the standby's, a
    new id) or restart (the same job requeued, ``why``)."""

    job: str
    node: str
    how: str
    why: str
    checkpoint: str  # what it runs from: the handed-over one, or the newest published
    workload: str | None = None  # the workload's id now (``slurm:JOB``)


OUTPUTS: dict[str, type[StepOutput]] = {
    "signal": SignalOutput,
    "wait_checkpoint": CheckpointOutput,
    "wait_ended": EndedOutput,
    "requeue": JobOutput,
    "update_job": JobOutput,
    "release": JobOutput,
    "wait_running": RunningOutput,
    "put_back": PutBackOutput,
    "drain": NodeStateOutput,
    "node_down": NodeStateOutput,
    "resume_node": NodeStateOutput,
    "power_up": NodeStateOutput,
    "power_down": NodeStateOutput,
    "standby_submit": StandbyOutput,
    "wait_standby": StandbyReadyOutput,
    "takeover": TakeoverOutput,
}


def step(name: str, op: str, args: StepArgs, description: str) -> PlanStep:
    """A plan step running ``op`` with ``args`` (the model ``ARGS`` names for ``op``)."""
    return build(ARGS, name, op, args, description)
