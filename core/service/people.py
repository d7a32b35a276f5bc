"""The people-side operations of the service: approvals and standing approvals.

Used by the CLI (``clawpoint approvals ...``) and the approval web page, always with a
PERSON principal. No MCP tool calls these: an agent can list and read approvals (without
codes) through ``list_approvals``/``get_approval`` but can never approve, deny or grant.
What a request says to people (``request_facts``, ``approval_text``) adds the situation now
(``core.service.situation``); the page's list is ``desk_page``, and what happened after a
decision is ``request_outcome``.
"""

from __future__ import annotations

from core import errors, logs
from core.guardrails.approvals import ApprovalStatus, ApprovalView
from core.guardrails.desk import PAGE_SIZE, DeskPage, Outcome, desk_page
from core.guardrails.grants import Grant
from core.guardrails.guard import Guard
from core.guardrails.prompts import approval_text
from core.guardrails.request_facts import RequestFacts, Situation, request_facts
from core.model import Action, Plan, Principal

log = logs.get_logger(__name__)


class PeopleDesk:
    """Mixin of ``Service``; ``guard`` is set by the service."""

    guard: Guard

    def list_approvals(self, *, status: str | None = None) -> list[ApprovalView]:
        return self.guard.approvals.list(status=_status(status))

    def page_approvals(
        self, *, status: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[ApprovalView], str | None, int]:
        """A page of approval requests, newest first: the page, the next page's cursor (None
        on the last page) and how many there are in all (of ``status``)."""
        wanted = _status(status)
        items, more = self.guard.approvals.page(status=wanted, limit=limit, cursor=cursor)
        return items, more, self.guard.approvals.count(status=wanted)

    def get_approval(self, approval_id: str) -> ApprovalView:
        return self.guard.approvals.get(approval_id)

    def situation(self, plan: Plan) -> Situation:
        """What the world says about a plan's workload now (deadline, checkpoint, nodes).
        Best effort: a backend that fails in an unforeseen way leaves the plan's own words,
        so a person can still read and decide the request."""
        from core.service.situation import situation_of  # reads the backends

        try:
            return situation_of(self, plan)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - the request must stay readable
            log.warning("request situation unreadable", target=plan.target, error=str(exc))
            return Situation()

    def request_facts(self, approval_id: str) -> RequestFacts:
        """What a request says, with the situation now: the one source every people path
        renders (the page, the webhook message, ``approvals show``)."""
        view = self.guard.approvals.get(approval_id)
        return request_facts(view, self.situation(view.plan))

    def desk_page(self, *, page: int = 1, size: int = PAGE_SIZE) -> DeskPage:
        """A page of the people's desk: pending requests, urgent workloads first."""
        from core.guardrails.approval_queue import pending_targets
        from core.service.situation import deadlines, live_notices, sla_deadlines

        live = live_notices(self)  # type: ignore[arg-type]
        with self.guard.approvals.db.read() as conn:
            targets = pending_targets(conn)
        sla = sla_deadlines(self, targets)  # type: ignore[arg-type]
        return desk_page(self.guard.approvals, live=live, page=page, size=size,
                         deadlines=deadlines(self, live), sla=sla)  # type: ignore[arg-type]  # fmt: skip

    def request_outcome(self, approval_id: str) -> Outcome:
        """After a decision: the plan's execution (steps, result) and the workload now."""
        from core.service.situation import outcome_of

        return outcome_of(self, self.guard.approvals.get(approval_id))  # type: ignore[arg-type]

    def approval_text(self, approval_id: str, *, principal: Principal) -> str:
        """The human-readable request, for people paths only: a pending one with its one-time
        code; a decided, used, expired or locked one (a person reviewing it afterwards) with
        its state and who decided, never with a code."""
        view = self.guard.approvals.get(approval_id)
        text = approval_text(view.plan, view, [], self.situation(view.plan))
        if view.status is not ApprovalStatus.PENDING:
            return text.as_text() + "\n" + _state_line(view)
        code = self.guard.approvals.reveal_code(approval_id, principal=principal)
        return text.as_text(code=code)

    def approve(
        self, approval_id: str, *, principal: Principal, via: str, any_session: bool = False
    ) -> ApprovalView:
        """A person approves; ``any_session`` lets any session of the requesting agent, not
        only the one that asked, execute the plan."""
        return self.guard.approvals.approve(
            approval_id, principal, via=via, any_session=any_session
        )

    def deny(self, approval_id: str, *, principal: Principal, why: str, via: str) -> ApprovalView:
        return self.guard.approvals.deny(approval_id, principal, why, via=via)

    def grant(
        self,
        action: Action,
        scope: dict[str, str],
        *,
        max_per_hour: int,
        expires: str,
        reason: str,
        principal: Principal,
    ) -> Grant:
        return self.guard.grants.grant(
            action,
            scope,
            max_per_hour=max_per_hour,
            expires=expires,
            reason=reason,
            granted_by=principal,
        )

    def grants(self, *, include_inactive: bool = False) -> list[Grant]:
        return self.guard.grants.list(include_inactive=include_inactive)

    def revoke_grant(self, grant_id: str, *, principal: Principal) -> Grant:
        return self.guard.grants.revoke(grant_id, by=principal)


def _status(status: str | None) -> ApprovalStatus | None:
    try:
        return ApprovalStatus(status) if status else None
    except ValueError:
        valid = ", ".join(s.value for s in ApprovalStatus)
        raise errors.InvalidInput(
            f"unknown approval status {status!r}: one of {valid}",
            hint=f"pass one of {valid}",
        ) from None


def _state_line(view: ApprovalView) -> str:
    """Where a request that is no longer pending stands: its state, who decided and how."""
    said = f"State: {view.status.value}"
    if view.decided_by:
        said += f" by {view.decided_by}" + (f" via {view.decided_via}" if view.decided_via else "")
    if view.decided_at is not None:
        said += f" at {view.decided_at:%Y-%m-%d %H:%M} UTC"
    if view.note:
        said += f" ({view.note})"
    if view.used_at is not None:
        said += f"; executed at {view.used_at:%Y-%m-%d %H:%M} UTC"
    return said
