"""What a backend offers that can keep its orchestrator's voluntary disruption (an
autoscaler's consolidation) away from workloads with unsaved work: ``DisruptionGuard``.

The guard is protective: it only ever asks the orchestrator to leave a node alone while a
workload's newest good checkpoint is stale, and takes that back once a fresh one exists. It
never stops, moves or deletes anything, so it runs without a plan or an approval; each change
is audited by its caller (``core.service.disruption``). Today only the Kubernetes backend
implements it (``karpenter.sh/do-not-disrupt``, ``core.backends.kubernetes.disruption``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from core.schema_base import Model


class GuardChange(Model):
    """One change of a workload's protection against voluntary disruption."""

    workload: str = Field(description="the workload's id (its pod's when it has no owner)")
    pod: str = Field(description="NAMESPACE/NAME of the pod that was changed")
    node: str | None = None
    change: Literal["set", "cleared"]
    reason: str
    checkpoint: str | None = Field(default=None, description="the newest good checkpoint")
    unsaved_s: float | None = Field(
        default=None, description="seconds of work since that checkpoint (or the pod's start)"
    )
    limit_s: float | None = Field(default=None, description="the staleness limit applied")


class GuardPass(Model):
    """What one reconcile changed, and what it could not do (one line per problem)."""

    changes: list[GuardChange] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


ChangeSink = Callable[[GuardChange], None]


@runtime_checkable
class DisruptionGuard(Protocol):
    """A backend that keeps voluntary disruption off workloads with unsaved work."""

    def guard_unsaved_work(self, now: datetime, on_change: ChangeSink) -> GuardPass:
        """Protect each managed, running workload whose newest good checkpoint is stale;
        unprotect those it protected once a fresh one exists. ``on_change`` is called right
        after each change took effect (the caller audits it)."""
        ...
