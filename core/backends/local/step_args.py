"""The local backend's step arguments: one model per step op, and ``ARGS``, op -> model.

A plan's steps carry their arguments as JSON (``PlanStep.args``: journaled, hashed, shown);
these models are what that JSON means. Plans build each step from its model (``step``), so
a misspelt or missing argument fails when the plan is drafted, not when the step runs, and
``dispatch.plan`` checks every step of a draft against ``ARGS`` once more. Steps read the
arguments back through the same model after the executor resolved the references in them.
The JSON is the model's fields that were given: exactly what plans recorded before.

A value may name an earlier step's output (``$standby.socket``): it stays a string in the
plan and is resolved by the executor right before the step runs (``core.service.executor``);
``OUTPUTS`` (op -> model) says what each step reports, so such a reference is checked when
the plan is made and each answer when it comes (``core.backends.step_models``).
Limits: only argument shapes are checked here; whether a workload or node exists is the
plan's and the step's business.
"""

from __future__ import annotations

from typing import Any

from core.backends.step_models import Later, StepArgs, StepOutput, build
from core.model import PlanStep
from core.specs import AutoInterval


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
    """Start a standby wrapper for ``workload`` on ``node`` (``moves``); ``cpus`` and
    ``memory_mb``: the limits it restores the workload with (None: as recorded)."""

    workload: str
    node: str
    cpus: float | None = None
    memory_mb: int | None = None


class StartArgs(StepArgs):
    """Start ``workload``'s wrapper on ``node`` (None: its own), restoring ``restore_from``
    (None: its newest good checkpoint) or from scratch when ``fresh``; after a handoff,
    the standby wrapper (``standby_pid`` on socket ``standby``) is awaited instead.
    ``cpus``, ``memory_mb``: its limits from this start on (None: as recorded; a resize)."""

    workload: str
    node: str | None
    restore_from: str | None
    fresh: bool = False
    standby_pid: int | Later | None = None
    standby: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None


class LimitsArgs(StepArgs):
    """Give the running ``workload`` the limits ``cpus`` and ``memory_mb`` in place, if
    its recorded size is still ``was_cpus``/``was_memory_mb`` (what the plan read)."""

    workload: str
    cpus: float | None
    memory_mb: int | None
    was_cpus: float | None
    was_memory_mb: int | None


class SetNodeArgs(StepArgs):
    """Mark a virtual node schedulable or not, with the reason shown."""

    node: str
    schedulable: bool
    reason: str = ""


class ReleaseArgs(StepArgs):
    """Release a pool's node (``released``: it leaves the node list) or provision it again."""

    node: str
    released: bool


class DeleteCheckpointArgs(StepArgs):
    checkpoint_id: str


class IntervalArgs(StepArgs):
    """Checkpoint ``workload`` every ``every_s`` seconds (None: no periodic checkpoints),
    re-timed by its wrapper if ``auto`` (starting from ``every_s``), if the interval in
    force is still ``was_s``, the one the plan (and its risk) was made on; ``was_auto``: it
    was auto then, and the wrapper may have re-timed it since (any interval passes)."""

    workload: str
    every_s: float | None
    was_s: float | None
    was_auto: bool = False
    auto: AutoInterval | None = None
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
    "release": ReleaseArgs,
    "set_limits": LimitsArgs,
}


# ----- outputs ---------------------------------------------------------------------------
class CheckpointOutput(StepOutput):
    """The checkpoint taken (``$checkpoint.checkpoint_id``, bare ``LINEAGE@SEQ``); with a
    handoff, what the old wrapper said (``sent``: the standby has it)."""

    checkpoint_id: str
    size_bytes: int | None = None
    timings: dict[str, Any] | None = None
    node: str | None = None
    handoff: str | None = None
    # New connections to the workload's ports that waited for the restored server instead
    # of being refused (core.wrapper.connection_hold); absent when none were held.
    connections_held: int | None = None


class StandbyOutput(StepOutput):
    """The standby wrapper's socket and pid; both None (and ``problem`` said) when it could
    not start, and the checkpoint step then stops and publishes the plain way."""

    socket: str | None
    pid: int | None
    node: str
    problem: str | None = None


class StartOutput(StepOutput):
    """Where the workload runs now and what it was restored from (None: started fresh);
    ``verified``: the restored program's own check; ``files``: files the restore rewound."""

    workload: str
    node: str
    pid: int | None = None
    restored_from: str | None = None
    fresh: bool = False
    already_started: bool = False
    handoff: dict[str, Any] | None = None
    verified: dict[str, Any] | None = None
    files: list[Any] | None = None


class FenceOutput(StepOutput):
    killed: bool


class TerminateOutput(StepOutput):
    terminated: bool


class SetNodeOutput(StepOutput):
    node: str
    schedulable: bool


class ReleaseOutput(StepOutput):
    node: str
    released: bool


class DeleteCheckpointOutput(StepOutput):
    deleted: str


class GpuOutput(StepOutput):
    """The processes whose GPU state moved, and the device memory freed (negative: taken
    back; None: NVML could not say)."""

    pids: list[int]
    freed_bytes: int | None
    reports: list[dict[str, Any]]


class IntervalOutput(StepOutput):
    """The interval now in force (None: off), ``auto`` if the wrapper re-times it; ``live``:
    the running wrapper took it too."""

    checkpoint_every: float | None
    auto: bool = False
    live: bool


class LimitsOutput(StepOutput):
    """The limits in force now, as the kernel holds them, and the cgroup holding them."""

    cpus: float | None
    memory_mb: int | None
    cgroup: str


OUTPUTS: dict[str, type[StepOutput]] = {
    "checkpoint": CheckpointOutput,
    "standby": StandbyOutput,
    "start": StartOutput,
    "fence": FenceOutput,
    "terminate": TerminateOutput,
    "set_node": SetNodeOutput,
    "delete_checkpoint": DeleteCheckpointOutput,
    "suspend_gpu": GpuOutput,
    "resume_gpu": GpuOutput,
    "set_interval": IntervalOutput,
    "release": ReleaseOutput,
    "set_limits": LimitsOutput,
}


def step(name: str, op: str, args: StepArgs, description: str) -> PlanStep:
    """A plan step running ``op`` with ``args`` (the model ``ARGS`` names for ``op``)."""
    return build(ARGS, name, op, args, description)
