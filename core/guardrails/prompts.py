"""The human text of an approval request, written to be read on a phone.

Pure functions from a request's facts (``core.guardrails.request_facts``: the one source of
what a request says) to short sentences: what will happen (one sentence), the agent's
reason, the deadline the evidence gives, what doing nothing costs, what could be lost, the
expected pause, the cost effect, how to undo it, and how to approve. Used by the webhook
message, the approval page and the CLI, so people see the same words everywhere. Limits:
English only; besides the situation, the words come from the plan's own fields (``summary``, ``saves``, ``rollback``, ``cost_effect``), so a plan with thin
fields gives thin text, with explicit "not stated" placeholders rather than guesses.
"""

from __future__ import annotations

from core.guardrails.approvals import ApprovalView
from core.guardrails.request_facts import RequestFacts, Situation, request_facts
from core.guardrails.request_facts import describe_pause as describe_pause
from core.model import Plan
from core.schema_base import Model


class ApprovalPath(Model):
    """One way a person can resolve a request, as shown to the agent and to people."""

    kind: str  # cli | page | webhook | chat-code | elicitation
    how: str  # the exact command, link or instruction
    available: bool = True


class ApprovalText(Model):
    headline: str
    why: str
    risk: str
    deadline: str = ""
    if_nothing: str = ""
    could_lose: str
    pause: str
    cost: str
    undo: str
    expires: str
    how_to_approve: list[str]

    def as_text(self, *, code: str | None = None) -> str:
        lines = [
            self.headline,
            f"Why: {self.why}",
            f"Risk: {self.risk}",
            f"Deadline: {self.deadline}",
            f"If nobody acts: {self.if_nothing}",
            f"Could lose: {self.could_lose}",
            f"Pause: {self.pause}",
            f"Cost: {self.cost}",
            f"Undo: {self.undo}",
            f"Expires: {self.expires}",
        ]
        if code:
            lines.append(f"Code: {format_code(code)}")
        if self.how_to_approve:  # a request no longer pending has no way left to approve it
            lines.append("Approve:")
            lines.extend(f"  - {h}" for h in self.how_to_approve)
        return "\n".join(lines)


def format_code(code: str) -> str:
    """Group in fours (``ABCD-EFGH``) so it is easy to read aloud and type on a phone."""
    return "-".join(code[i : i + 4] for i in range(0, len(code), 4))


def text_of(facts: RequestFacts, paths: list[ApprovalPath] | None = None) -> ApprovalText:
    """The sentences of a request's facts, with the ways to approve it."""
    return ApprovalText(
        headline=facts.headline,
        why=facts.why,
        risk=facts.risk_line,
        deadline=facts.deadline,
        if_nothing=facts.if_nothing,
        could_lose=facts.could_lose,
        pause=facts.pause,
        cost=facts.cost,
        undo=facts.undo,
        expires=facts.expires,
        how_to_approve=[p.how for p in (paths or []) if p.available],
    )


def approval_text(
    plan: Plan,
    view: ApprovalView,
    paths: list[ApprovalPath] | None = None,
    situation: Situation | None = None,
) -> ApprovalText:
    """The request's text; ``situation`` adds what the world says (deadline, undo)."""
    if plan is not view.plan:
        view = view.model_copy(update={"plan": plan})
    return text_of(request_facts(view, situation), paths)
