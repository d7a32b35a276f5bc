"""The human text of an approval request, written to be read on a phone.

Pure functions from a plan and an approval to short sentences: what will happen (one
sentence), the agent's reason, what could be lost, the expected pause, the cost effect, how
to undo it, and how to approve. Used by the webhook message, the approval page and the CLI,
so people see the same words everywhere. Limits: English only; the words come from the plan's
own fields (``summary``, ``saves``, ``rollback``, ``cost_effect``), so a plan with thin
fields gives thin text, with explicit "not stated" placeholders rather than guesses.
"""

from __future__ import annotations

from pydantic import BaseModel

from core.guardrails.approvals import ApprovalView
from core.model import Plan, RiskClass

_LOSS_BY_RISK = {
    RiskClass.READ: "Nothing: it only reads.",
    RiskClass.SAFE: "Nothing: it only adds a checkpoint; the workload keeps running.",
    RiskClass.DISRUPTIVE: "No work should be lost (state is saved first), but the workload pauses "
    "or moves; if saving fails the plan stops before anything is stopped.",
    RiskClass.DESTRUCTIVE: "Work or capacity can be lost for good: unsaved progress, or a "
    "checkpoint that cannot be recovered.",
}


class ApprovalPath(BaseModel):
    """One way a person can resolve a request, as shown to the agent and to people."""

    kind: str  # cli | page | webhook | chat-code | elicitation
    how: str  # the exact command, link or instruction
    available: bool = True


class ApprovalText(BaseModel):
    headline: str
    why: str
    risk: str
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


def describe_pause(plan: Plan) -> str:
    if plan.expected_pause_s is None:
        return "not stated by the plan"
    seconds = plan.expected_pause_s
    if seconds <= 0:
        return "none expected"
    if seconds < 90:
        return f"about {seconds:.0f} seconds"
    return f"about {seconds / 60:.0f} minutes"


def approval_text(
    plan: Plan, view: ApprovalView, paths: list[ApprovalPath] | None = None
) -> ApprovalText:
    headline = plan.summary.strip() or f"{plan.action.value} {plan.target} on {plan.backend}."
    if not headline.endswith("."):
        headline += "."
    could_lose = _LOSS_BY_RISK[plan.risk]
    if plan.saves:
        could_lose += f" Saved first: {plan.saves}."
    return ApprovalText(
        headline=headline,
        why=view.reason.strip() or plan.reason.strip() or "no reason given",
        risk=f"{plan.risk.value} ({plan.action.value} of {plan.target})",
        could_lose=could_lose,
        pause=describe_pause(plan),
        cost=plan.cost_effect.strip() or "no change stated",
        undo=plan.rollback.strip() or "no undo stated: treat as one-way",
        expires=f"{view.expires_at:%Y-%m-%d %H:%M} UTC (request {view.id})",
        how_to_approve=[p.how for p in (paths or []) if p.available],
    )
