"""The backend port: the small protocol every orchestrator adapter implements.

A backend answers inventory questions and turns an action into a draft plan of journaled
steps (``plan``), then runs those steps one at a time (``run_step``). Keeping steps small and
named is what makes executions resumable: after a crash the service asks the backend
whether a step that had started actually finished (``recover_step``) before it runs the next;
after a step reports an error, the same question (``reconcile_step``) comes before any
compensation, so a lost answer never turns a done step into a failure.

An action a backend cannot do raises ``errors.NotSupported`` from ``plan``; capabilities are
reported (``capabilities``), never faked.

Optional capabilities are small runtime-checkable protocols below; callers test them with
``isinstance`` and never branch on a backend's name: ``NodeLookup`` (one node by name),
``QueueDepthSource`` (a scheduler queue), ``ProgressSource`` (workloads' own progress),
``Launcher`` (``clawpoint run`` on one of its nodes) and ``BatchSubmitter`` (a checkpointable
batch job). A new backend is one package plus one entry in ``core.backends.registry``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import Field

from core import errors, polling
from core.actions import ActionParams
from core.model import (
    Action,
    CheckpointInfo,
    NodeInfo,
    PlanScope,
    PlanStep,
    PrincipalKind,
    RiskClass,
    WorkloadInfo,
)

# Defined in core.model (below every layer, so engines and the wrapper use them without
# importing a backend); re-exported here for backends.
from core.model import ProgressFn as ProgressFn
from core.model import no_progress as no_progress
from core.schema_base import Model

# Defined in core.specs (the interfaces build it without importing a backend); re-exported
# here for backends.
from core.specs import BatchSpec

if TYPE_CHECKING:
    from core.signals.sla import Progress
    from core.specs import RunSpec


# Who asked for the execution whose step is running (its principal, "agent:mcp:stdio/ab12"):
# set by the executor around each step, for a backend that records it with what the step
# makes (a checkpoint an agent asked for rotates only among the agents': core.store.retention).
REQUESTER: ContextVar[str] = ContextVar("clawpoint_requester", default="")


def asked_by_agent() -> bool:
    """Whether the step running now is an agent's (``REQUESTER``)."""
    return REQUESTER.get().startswith(f"{PrincipalKind.AGENT.value}:")


class PlanDraft(Model):
    """What a backend proposes for an action; the service adds risk, hash and policy."""

    steps: list[PlanStep]
    on_failure: list[PlanStep] = Field(default_factory=list)
    summary: str
    expected_pause_s: float | None = None
    saves: str = ""
    rollback: str = ""
    cost_effect: str = ""
    scope: PlanScope = Field(default_factory=PlanScope)
    # A risk read from the world where the plan is made, which the parameters alone cannot
    # imply (an interval longer than the one in force): the plan's risk is the higher.
    risk: RiskClass | None = None
    # What the plan adds to the hourly cost (nodes it brings up): above the person's cap
    # (``[capacity] max_added_per_hour``) the service makes it disruptive.
    added_cost_per_hour: float = 0.0


@runtime_checkable
class Backend(Protocol):
    name: str

    def capabilities(self) -> frozenset[Action]: ...

    def nodes(self) -> list[NodeInfo]: ...

    def workloads(self) -> list[WorkloadInfo]: ...

    def get_workload(self, name: str) -> WorkloadInfo: ...

    def checkpoints(self, workload: str | None = None) -> list[CheckpointInfo]: ...

    def plan(self, action: Action, target: str, params: ActionParams) -> PlanDraft:
        """A draft for ``action`` on ``target`` (a name local to this backend) with
        parameters already validated against the catalogue (``core.actions``)."""
        ...

    def run_step(self, op: str, args: dict[str, Any], progress: ProgressFn) -> dict[str, Any]: ...

    def recover_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None: ...

    def reconcile_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        """After ``run_step`` raised: the step's output if it took effect anyway (an answer
        lost on the way back, a timeout that fired just before it finished), read from the
        world itself; None when it really did not happen."""
        ...


# ----------------------------------------------------------------- optional capabilities
@runtime_checkable
class NodeLookup(Protocol):
    """One node by name (NotFound naming it when there is none)."""

    def get_node(self, name: str) -> NodeInfo: ...


@runtime_checkable
class CheckpointKeeper(Protocol):
    """A backend that deletes checkpoints: ``check_deletable`` refuses (Conflict
    ``last-good-checkpoint``) the deletion of the one a workload still needs to come back,
    as its newer checkpoints verify now (a plan's view of them may be stale)."""

    def check_deletable(self, checkpoint_id: str) -> None: ...


@runtime_checkable
class QueueDepthSource(Protocol):
    """A scheduler queue: records with ``core.signals.queue.QueueDepth``'s field names (any
    subset; pydantic models, mappings or objects). Backends without one get a queue
    synthesised from their workloads' states."""

    def queue_depth(self) -> Sequence[Any]: ...


@runtime_checkable
class ProgressSource(Protocol):
    """The progress a workload reports itself (its step and total), None when unknown."""

    def progress(self, name: str) -> Progress | None: ...


@runtime_checkable
class Launcher(Protocol):
    """Starts a command under the wrapper on one of this backend's nodes (``clawpoint run``)."""

    def place(self, spec: RunSpec) -> RunSpec:
        """The spec with its node checked (NotFound) or, when it names none, chosen."""
        ...

    def launch(self, spec: RunSpec, *, detach: bool) -> int | WorkloadInfo:
        """Detached: the running workload. Foreground: run to the end, the exit code."""
        ...


@runtime_checkable
class BatchSubmitter(Protocol):
    """Submits checkpointable batch jobs to a scheduler queue."""

    def render_batch(self, spec: BatchSpec) -> str:
        """What would be submitted (the batch script), submitting nothing."""
        ...

    def submit_batch(self, spec: BatchSpec) -> str:
        """Submit; the new workload's id (``BACKEND:NAME``)."""
        ...


def not_supported(backend: str, action: Action | str, why: str = "") -> errors.NotSupported:
    what = action.value if isinstance(action, Action) else action
    return errors.NotSupported(
        f"the {backend} backend cannot {what}" + (f": {why}" if why else ""),
        hint=f"see docs/{backend}.md for what this backend supports",
        details={"backend": backend, "action": what},
    )


def poll_until(
    what: str,
    timeout_s: float,
    check: Callable[[], Any],
    *,
    every_s: float,
    hint: str,
    max_every_s: float | None = None,
) -> Any:
    """``core.polling.poll_until`` for a step that must not go on without the condition:
    returns ``check()``'s truthy result; ``OperationFailed`` naming ``what`` (with ``hint``)
    once ``timeout_s`` has passed. ``max_every_s``: back off from ``every_s`` up to it."""
    result = polling.poll_until(
        check, timeout_s=timeout_s, every_s=every_s, max_every_s=max_every_s
    )
    if not result:
        raise errors.OperationFailed(
            f"timed out after {timeout_s:g}s waiting for {what}", hint=hint
        )
    return result
