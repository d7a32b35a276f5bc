"""The local backend's step arguments: one model per step op, and ``ARGS``, op -> model.

A plan's steps carry their arguments as JSON (``PlanStep.args``: journaled, hashed, shown);
these models are what that JSON means. Plans build each step from its model (``step``), so
a misspelt or missing argument fails when the plan is drafted, not when the step runs, and
``dispatch.plan`` checks every step of a draft against ``ARGS`` once more. Steps read the
arguments back through the same model after the executor resolved the references in them.
The JSON is the model's fields that were given: exactly what plans recorded before.

A value may name an earlier step's output (``$standby.socket``): it stays a string in the
plan and is resolved by the executor right before the step runs (``core.service.executor``).
Limits: only argument shapes are checked here; whether a workload or node exists is the
plan's and the step's business.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, StringConstraints

from core.model import PlanStep

Later = Annotated[str, StringConstraints(pattern=r"^\$[A-Za-z0-9_-]+\.[A-Za-z0-9_]+$")]
"""An earlier step's output (``$step.field``), resolved when the step runs."""


class StepArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def as_args(self) -> dict[str, Any]:
        """The JSON a plan records: the fields that were given."""
        return self.model_dump(mode="json", exclude_unset=True)


class WorkloadArgs(StepArgs):
    """``fence``, ``terminate``, ``suspend_gpu``, ``resume_gpu``: one workload."""

    workload: str


class CheckpointArgs(StepArgs):
    """Checkpoint ``workload``; with ``stop``, stop it, handing it to the standby wrapper
    listening on ``handoff`` (a socket path, or ``$standby.socket``) in ``mode``."""

    workload: str
    stop: bool
    handoff: str | None = None
    mode: str | None = None


class StandbyArgs(StepArgs):
    """Start a standby wrapper for ``workload`` on ``node`` (``moves``)."""

    workload: str
    node: str


class StartArgs(StepArgs):
    """Start ``workload``'s wrapper on ``node`` (None: its own), restoring ``restore_from``
    (None: its newest good checkpoint) or from scratch when ``fresh``; after a handoff,
    the standby wrapper (``standby_pid`` on socket ``standby``) is awaited instead."""

    workload: str
    node: str | None
    restore_from: str | None
    fresh: bool = False
    standby_pid: int | Later | None = None
    standby: str | None = None


class SetNodeArgs(StepArgs):
    """Mark a virtual node schedulable or not, with the reason shown."""

    node: str
    schedulable: bool
    reason: str = ""


class DeleteCheckpointArgs(StepArgs):
    checkpoint_id: str


class IntervalArgs(StepArgs):
    """Checkpoint ``workload`` every ``every_s`` seconds (None: no periodic checkpoints), if
    the interval in force is still ``was_s``, the one the plan (and its risk) was made on."""

    workload: str
    every_s: float | None
    was_s: float | None
    reason: str = ""


ARGS: dict[str, type[StepArgs]] = {
    "checkpoint": CheckpointArgs,
    "standby": StandbyArgs,
    "start": StartArgs,
    "fence": WorkloadArgs,
    "terminate": WorkloadArgs,
    "set_node": SetNodeArgs,
    "delete_checkpoint": DeleteCheckpointArgs,
    "suspend_gpu": WorkloadArgs,
    "resume_gpu": WorkloadArgs,
    "set_interval": IntervalArgs,
}


def step(name: str, op: str, args: StepArgs, description: str) -> PlanStep:
    """A plan step running ``op`` with ``args`` (the model ``ARGS`` names for ``op``)."""
    if type(args) is not ARGS[op]:
        raise TypeError(f"step {op!r} takes {ARGS[op].__name__}, not {type(args).__name__}")
    return PlanStep(name=name, op=op, args=args.as_args(), description=description)
