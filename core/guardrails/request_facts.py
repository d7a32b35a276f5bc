"""What an approval request says, once: the facts a person weighs, from the plan and the world.

One model (``RequestFacts``) rendered three ways: the approval page, the webhook message and
``clawpoint approvals show`` (through ``core.guardrails.prompts.approval_text``). Besides the
plan's own words it carries what the situation adds, so a person can weigh the choice:

- the **deadline from the evidence**: a spot or maintenance notice's reclaim time for the
  node the workload runs on (evidence the watch observed itself), or the workload's SLA
  deadline and slack; not the request's own expiry, which is only how long it waits;
- the **cost of doing nothing**: what happens at the deadline, and what a failover from the
  last good checkpoint would lose (the work since it was taken, and how long ago that was);
- the **expected pause** in units people read ("under a second", "0.4 s", "2 min");
- an **undo that is possible now**: never "migrate it back ``--to`` a node" that is being
  reclaimed, drained or down; then it says there is no way back there, and why.

The world is gathered by the service into a ``Situation`` (``core.service.people``); this
module is pure, so every rendering agrees and tests need no cluster. Limits: a notice without
a deadline gives no countdown; the work lost is measured in time since the checkpoint, not
in the workload's own progress units.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from pydantic import Field

from core.guardrails.approvals import ApprovalStatus, ApprovalView
from core.guardrails.evidence import NOTICE_GRACE_S, Evidence, plan_subjects
from core.model import Plan, RiskClass, utcnow
from core.schema_base import Model

# Evidence triggers that mean "this node goes away at a time": the deadline is in the notice.
NOTICE_TRIGGERS = ("spot-interruption", "maintenance")
# A notice the watch recorded with a deadline says so in its detail ("aws terminate at ...").
_HAS_DEADLINE = re.compile(r" at \d\d:\d\d:\d\d UTC")
_TO_NODE = re.compile(r"(?:--to\s+|\bto=)([^\s,)]+)")  # a command's --to, a tool call's to=
LOSS_BY_RISK = {
    RiskClass.READ: "Nothing: it only reads.",
    RiskClass.SAFE: "Nothing: it only adds a checkpoint; the workload keeps running.",
    RiskClass.DISRUPTIVE: "No work should be lost (state is saved first), but the workload pauses "
    "or moves; if saving fails the plan stops before anything is stopped.",
    RiskClass.DESTRUCTIVE: "Work or capacity can be lost for good: unsaved progress, or a "
    "checkpoint that cannot be recovered.",
}


class Notice(Model):
    """A live notice about a node the plan touches, as the watch observed it."""

    trigger: str
    node: str  # BACKEND:NAME, as the evidence names it
    source: str
    deadline: datetime | None = None
    detail: str = ""


class Situation(Model):
    """What the world says about a request's workload now (gathered by the service)."""

    now: datetime = Field(default_factory=utcnow)
    notices: list[Notice] = Field(default_factory=list)
    workload: str | None = None  # BACKEND:NAME
    state: str | None = None  # its state now (running, stopped, failed...)
    node: str | None = None  # the node it runs on (BACKEND:NAME)
    last_good_checkpoint: str | None = None
    last_good_at: datetime | None = None
    started_at: datetime | None = None
    sla_deadline: datetime | None = None
    sla_slack_s: float | None = None
    # Nodes a workload must not be sent back to, and why ("being reclaimed", "drained", "down").
    unsafe_nodes: dict[str, str] = Field(default_factory=dict)


class RequestFacts(Model):
    """One approval request as people read it: structured values and their sentences."""

    id: str
    status: ApprovalStatus
    workload: str
    risk: RiskClass
    headline: str
    why: str
    risk_line: str
    deadline_at: datetime | None = None
    deadline: str  # "node-a is reclaimed in 1 min 50 s (12:01:50 UTC, aws-imds notice)"
    if_nothing: str  # the cost of doing nothing
    could_lose: str
    pause: str
    cost: str
    undo: str
    expires: str
    requester: str

    @property
    def urgent(self) -> bool:
        """A deadline from the evidence exists (the page lists these first)."""
        return self.deadline_at is not None


def notice_deadline(e: Evidence) -> datetime | None:
    """A notice's reclaim time: the watch keeps its evidence until the deadline plus
    ``NOTICE_GRACE_S`` and names the time in the detail; None for a notice without one."""
    if e.trigger not in NOTICE_TRIGGERS or not _HAS_DEADLINE.search(e.detail):
        return None
    return e.expires_at - timedelta(seconds=NOTICE_GRACE_S)


def notices_for(plan: Plan, live: list[Evidence]) -> list[Notice]:
    """The live notices about any of the plan's subjects (its target, workload, node)."""
    subjects = set(plan_subjects(plan))
    return [
        Notice(trigger=e.trigger, node=e.subject, source=e.source,
               deadline=notice_deadline(e), detail=e.detail)
        for e in live
        if e.trigger in NOTICE_TRIGGERS and e.subject in subjects
    ]  # fmt: skip


def human_duration(seconds: float) -> str:
    """A span people read at a glance: never "about 0 seconds"."""
    s = abs(seconds)
    if s < 0.05:
        return "under a second"
    if s < 10:
        return f"{s:.1f} s".replace(".0 s", " s")
    if s < 90:
        return f"{s:.0f} s"
    if s < 3600:
        minutes, rest = divmod(round(s), 60)
        return f"{minutes} min {rest} s" if minutes < 5 and rest else f"{round(s / 60)} min"
    if s < 48 * 3600:
        return f"{s / 3600:.1f} h".replace(".0 h", " h")
    return f"{s / 86400:.1f} days".replace(".0 days", " days")


def describe_pause(plan: Plan) -> str:
    if plan.expected_pause_s is None:
        return "not stated by the plan"
    if plan.expected_pause_s <= 0:
        return "none expected"
    return f"about {human_duration(plan.expected_pause_s)}"


def _short(node: str) -> str:
    return node.partition(":")[2] or node


def _deadline(situation: Situation) -> tuple[datetime | None, str]:
    """The soonest deadline the evidence gives, and its sentence."""
    now = situation.now
    dated = [n for n in situation.notices if n.deadline is not None]
    if dated:
        n = min(dated, key=lambda x: x.deadline or now)
        assert n.deadline is not None
        left = (n.deadline - now).total_seconds()
        verb = "is reclaimed" if n.trigger == "spot-interruption" else "goes into maintenance"
        when = f"in {human_duration(left)}" if left > 0 else f"{human_duration(left)} ago"
        return n.deadline, (
            f"{_short(n.node)} {verb} {when} ({n.deadline:%H:%M:%S} UTC, {n.source} notice)"
        )
    if situation.notices:
        n = situation.notices[0]
        return None, f"{_short(n.node)} has a {n.trigger} notice ({n.source}) with no time given"
    if situation.sla_deadline is not None:
        slack = situation.sla_slack_s
        said = f"SLA deadline {situation.sla_deadline:%Y-%m-%d %H:%M} UTC"
        if slack is not None:
            said += (f", {human_duration(slack)} of slack" if slack >= 0
                     else f", already {human_duration(slack)} late")  # fmt: skip
        return situation.sla_deadline, said
    return None, "none observed: no notice or SLA deadline for this workload"


def _if_nothing(plan: Plan, situation: Situation, deadline_at: datetime | None) -> str:
    """What happens if nobody acts: the deadline passes, and what failover would lose."""
    now = situation.now
    notice = next((n for n in situation.notices if n.deadline == deadline_at), None)
    if situation.last_good_at is not None:
        age_s = (now - situation.last_good_at).total_seconds()
        age = human_duration(age_s)
        lost = (
            f"failover restores its last good checkpoint {situation.last_good_checkpoint} "
            f"(taken {age} ago), losing the work since then: {age} of work now"
        )
        if deadline_at is not None and deadline_at > now:
            by_then = age_s + (deadline_at - now).total_seconds()
            lost += f", {human_duration(by_then)} by the deadline"
    elif situation.started_at is not None:
        ran = human_duration((now - situation.started_at).total_seconds())
        lost = f"it has no good checkpoint: all its work ({ran} since it started) is lost"
    else:
        lost = "it has no good checkpoint: all its work so far is lost"
    if notice is not None and situation.node and notice.node == situation.node:
        return f"{_short(notice.node)} goes away and {plan.target} dies with it; {lost}."
    if notice is not None:
        return f"{_short(notice.node)} goes away; if {plan.target} dies with it, {lost}."
    if deadline_at is not None:
        return f"the SLA deadline may be missed; if the workload dies, {lost}."
    return f"nothing urgent observed: {plan.target} stays as it is; if it dies, {lost}."


def _undo(plan: Plan, situation: Situation) -> str:
    """The plan's undo, unless it sends the workload onto a node that cannot take it."""
    undo = plan.undo().strip() or "no undo stated: treat as one-way"
    match = _TO_NODE.search(undo)
    if match is None:
        return undo
    back = match.group(1)
    for node, why in situation.unsafe_nodes.items():
        if back in (node, _short(node)):
            return (
                f"no way back to {_short(node)}: it is {why}; once it is safe again a move "
                "there is a new request (a person can plan it then)"
            )
    return undo


def request_facts(view: ApprovalView, situation: Situation | None = None) -> RequestFacts:
    """The facts of one request: from its plan, and the situation when one is given."""
    plan = view.plan
    situation = situation or Situation()
    headline = plan.summary.strip() or f"{plan.action.value} {plan.target} on {plan.backend}."
    if not headline.endswith("."):
        headline += "."
    could_lose = LOSS_BY_RISK[plan.risk]
    if plan.saves:
        could_lose += f" Saved first: {plan.saves}."
    deadline_at, deadline = _deadline(situation)
    expires = f"{view.expires_at:%Y-%m-%d %H:%M} UTC (request {view.id})"
    pending = view.status is ApprovalStatus.PENDING
    if pending and deadline_at is not None and view.expires_at > deadline_at:
        expires += ", after the deadline: decide before the deadline"
    return RequestFacts(
        id=view.id,
        status=view.status,
        workload=plan.preconditions.workload or plan.target,
        risk=plan.risk,
        headline=headline,
        why=view.reason.strip() or plan.reason.strip() or "no reason given",
        risk_line=f"{plan.risk.value} ({plan.action.value} of {plan.target})",
        deadline_at=deadline_at,
        deadline=deadline,
        if_nothing=_if_nothing(plan, situation, deadline_at)
        if pending
        else f"not a choice any more: the request is {view.status.value}",
        could_lose=could_lose,
        pause=describe_pause(plan),
        cost=plan.cost_effect.strip() or "no change stated",
        undo=_undo(plan, situation),
        expires=expires,
        requester=view.requester,
    )
