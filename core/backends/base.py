"""The backend port: the small protocol every orchestrator adapter implements.

A backend answers inventory questions and turns an action into a draft plan of journaled
steps (``plan``), then runs those steps one at a time (``run_step``). Keeping steps small and
named is what makes executions resumable: after a crash the service asks the backend
whether a step that had started actually finished (``recover_step``) before it runs the next;
after a step reports an error, the same question (``reconcile_step``) comes before any
compensation, so a lost answer never turns a done step into a failure.

An action a backend cannot do raises ``errors.NotSupported`` from ``plan``; capabilities are
reported (``capabilities``), never faked.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from core import errors
from core.model import Action, CheckpointInfo, NodeInfo, PlanStep, WorkloadInfo

ProgressFn = Callable[[float, float | None, str], None]
"""progress(done, total, message): called during long steps; must be cheap and never raise."""


def no_progress(done: float, total: float | None, message: str) -> None:
    return None


class PlanDraft(BaseModel):
    """What a backend proposes for an action; the service adds risk, hash and policy."""

    steps: list[PlanStep]
    on_failure: list[PlanStep] = Field(default_factory=list)
    summary: str
    expected_pause_s: float | None = None
    saves: str = ""
    rollback: str = ""
    cost_effect: str = ""
    scope: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    name: str

    def capabilities(self) -> frozenset[Action]: ...

    def nodes(self) -> list[NodeInfo]: ...

    def workloads(self) -> list[WorkloadInfo]: ...

    def get_workload(self, name: str) -> WorkloadInfo: ...

    def checkpoints(self, workload: str | None = None) -> list[CheckpointInfo]: ...

    def plan(self, action: Action, target: str, params: dict[str, Any]) -> PlanDraft: ...

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


def not_supported(backend: str, action: Action | str, why: str = "") -> errors.NotSupported:
    what = action.value if isinstance(action, Action) else action
    return errors.NotSupported(
        f"the {backend} backend cannot {what}" + (f": {why}" if why else ""),
        hint=f"see docs/{backend}.md for what this backend supports",
        details={"backend": backend, "action": what},
    )
