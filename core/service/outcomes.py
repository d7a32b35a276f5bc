"""What an action call answers (``ActionResult``) and how an approval question reaches the
agent's own client (``ClientAsker``/``ClientAnswer``), with the wording of those answers.

Plain models and pure functions: no world, no audit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from core.guardrails.approvals import ApprovalView
from core.guardrails.policy import Decision, Outcome
from core.guardrails.prompts import ApprovalPath
from core.model import Execution, Plan, Principal, PrincipalKind
from core.schema_base import Model


class ActionResult(Model):
    status: Literal["executed", "approval_required", "denied", "failed", "planned"]
    plan: Plan | None  # None only when the backend cannot do the action at all
    message: str
    execution: Execution | None = None
    approval: dict[str, Any] | None = None
    # ``message`` with next steps neutral where it quotes an execution's error (the command
    # line renders it its own way); never serialized.
    message_neutral: str | None = Field(default=None, exclude=True, repr=False)


class ClientAnswer(Model):
    """The answer given in the agent's own client to an approval question (elicitation).

    The server cannot tell whether a person or the client itself answered, so it is recorded
    as confirmed by the client's user, never as a named person."""

    approved: bool
    note: str = ""


@dataclass(frozen=True)
class ClientAsker:
    """How to ask the user of the calling agent's client, and who that client says it is.

    ``client`` is the client's self-declared name (clientInfo.name, unverified) and
    ``transport`` ``stdio`` or ``http``: the operator's ``[mcp]`` settings decide whether
    such an answer may approve anything. ``ask`` returns None when it could not ask."""

    client: str
    transport: str
    ask: Callable[[Plan, ApprovalView], ClientAnswer | None]


def client_label(text: str) -> str:
    """A client-chosen name made safe for principal ids and audit entries."""
    cleaned = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "._-") else "_" for ch in text)
    return cleaned[:64] or "client"


def dry_run_message(decision: Decision, principal: Principal) -> str:
    """What would happen if the plan ran for real, in words that cannot be read as a yes:
    it would run now, it needs a person's approval (or the person's own confirmation), or
    it would be refused; and why."""
    if decision.outcome is Outcome.ALLOW:
        under = f" under standing approval {decision.grant_id}" if decision.grant_id else ""
        will = f"it would run now{under}"
    elif decision.outcome is Outcome.DENY:
        will = "it would be refused"
    elif principal.kind is PrincipalKind.PERSON:
        will = "it needs your confirmation"
    else:
        will = "it needs a person's approval"
    return f"dry run: nothing was changed. For real, {will}: {decision.reason}"


def approval_info(view: ApprovalView, paths: list[ApprovalPath]) -> dict[str, Any]:
    return {
        "id": view.id,
        "status": view.status.value,
        "expires_at": view.expires_at.isoformat(),
        "how_to_approve": [p.model_dump() for p in paths if p.available],
    }


def same_but_reason(a: Plan, b: Plan) -> bool:
    """Whether two plans do the same thing, whatever reason each gives."""

    def core(plan: Plan) -> str:
        params = {k: v for k, v in plan.params.items() if k != "reason"}
        return plan.model_copy(update={"params": params}).compute_hash()

    return core(a) == core(b)


def waiting_message(
    view: ApprovalView, plan: Plan, decision: Decision, *, asked_at: datetime
) -> str:
    """What an agent is told while an approval waits: a new request, or the same request
    already waiting (no new one was made); never to retry."""
    if view.created_at < asked_at:
        return (
            f"Approval {view.id} for the {plan.action.value} of {plan.target} was already "
            f"waiting for a person (asked at {view.created_at:%H:%M:%S} UTC"
            + ("" if same_but_reason(view.plan, plan) else "; it has other parameters")
            + f"); no new request was made. It waits until {view.expires_at:%H:%M:%S} UTC. "
            "Do not retry."
        )
    return (
        f"{decision.reason} Approval {view.id} is waiting for a person until "
        f"{view.expires_at:%H:%M:%S} UTC; explain the plan to them. Do not retry."
    )
