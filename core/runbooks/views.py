"""What interfaces show of a runbook run: the full view, the one-line summary, a change.

``view`` says what has to happen for a run to go on (``next``: who approves, what to answer,
how to resume); ``summary`` is what a fresh session needs to find a run and go on;
``RunChange`` is what ``Engine.advance_due`` did to one run.

Limits: built from a ``RunRecord`` alone; nothing here reads the database or runs a step.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self

from pydantic import Field

from core import errors
from core.errors import StepRenderer
from core.runbooks.store import RunRecord, RunStatus, StepRecord, Waiting
from core.schema_base import Model

__all__ = ["RunChange", "RunSummary", "RunView", "summary", "view"]


class _SaysNext(Model):
    """``next``, what has to happen for a run to go on, named as tools (MCP, runbooks), and
    the same with its steps neutral (``core.errors``), never serialized, for ``in_words``."""

    next: str = ""
    next_neutral: str = Field(default="", exclude=True, repr=False)

    def in_words(self, renderer: StepRenderer) -> Self:
        """The record with ``next`` naming its steps as ``renderer`` does (the command line)."""
        return self.model_copy(update={"next": errors.render(self.next_neutral, renderer)})


class RunView(_SaysNext):
    """A run as interfaces show it; ``next`` says what has to happen for it to go on."""

    id: str
    runbook: str
    status: RunStatus
    principal: str
    params: dict[str, Any]
    current: str | None
    waiting: Waiting | None = None
    steps: list[StepRecord] = Field(default_factory=list)
    messages: list[str] = Field(default_factory=list)
    error: str | None = None
    started_at: datetime
    updated_at: datetime


def view(run: RunRecord) -> RunView:
    """The run as interfaces show it, with what has to happen next (a person's own steps,
    approving and confirming, always as the commands they type)."""
    w = run.waiting
    hint = ""
    resume = errors.step("continue_runbook", run_id=run.id)
    if run.status is RunStatus.WAITING_APPROVAL and w and w.kind == "confirm":
        hint = f"A person confirms the plan with: clawpoint runbook continue {run.id} --yes"
    elif run.status is RunStatus.WAITING_APPROVAL and w:
        hint = (f"A person must approve {w.approval_id} (clawpoint approvals approve "
                f"{w.approval_id}); then {resume}. Do not approve it yourself.")  # fmt: skip
    elif run.status is RunStatus.WAITING_ANSWER and w:
        values = ", ".join(c["value"] for c in w.choices)
        hint = f"Ask the person, then {resume} with {errors.arg('answer')} one of: {values}"
    elif run.status is RunStatus.RUNNING:
        hint = f"interrupted; {resume} resumes it"
    return RunView(
        id=run.id, runbook=run.runbook, status=run.status, principal=str(run.principal),
        params=run.params, current=run.current, waiting=w, steps=run.steps,
        messages=run.messages, error=run.error, started_at=run.started_at,
        updated_at=run.updated_at, next=errors.render(hint), next_neutral=hint,
    )  # fmt: skip


class RunSummary(_SaysNext):
    """A run in one line's worth of fields: what a fresh session needs to find and go on."""

    id: str
    runbook: str
    status: RunStatus
    principal: str
    started_at: datetime
    updated_at: datetime
    waits_for: str | None = Field(default=None, description="approval ID, answer or confirm")
    current: str | None = None
    outcome: str | None = Field(default=None, description="last message or error of a run")


def summary(run: RunRecord) -> RunSummary:
    """The run in one line's worth of fields."""
    v = view(run)
    w = run.waiting
    waits = None
    if w is not None and not run.status.finished:
        waits = f"approval {w.approval_id}" if w.approval_id else w.kind
    outcome = None
    if run.status.finished:
        outcome = run.error or (run.messages[-1] if run.messages else None)
    return RunSummary(
        id=run.id, runbook=run.runbook, status=run.status, principal=str(run.principal),
        started_at=run.started_at, updated_at=run.updated_at, waits_for=waits,
        current=run.current, next=v.next, next_neutral=v.next_neutral, outcome=outcome,
    )  # fmt: skip


class RunChange(Model):
    """What ``advance_due`` did to one run: where it was, where it is now, and why."""

    id: str
    runbook: str
    step: str
    before: RunStatus
    status: RunStatus
    current: str | None
    message: str
