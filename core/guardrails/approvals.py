"""Approval requests: one sealed plan, one person's yes or no, used at most once.

An approval is bound to the plan hash (any change to target, params or steps needs a new
one), expires, and can only be approved by a PERSON principal other than the requester: an
agent can never approve, and this store enforces it, whatever interface calls it.

Each request has a short one-time code for the chat flow (a person reads the code from the
webhook message, the approval page or ``clawpoint approvals show`` and types it back to the
agent, which presents it with ``approve_with_code``). The code is derived from a local
secret with HMAC and only its hash is stored, so the database never holds it; ``ApprovalView``
(what agents see) has no code field, and ``reveal_code`` refuses anyone but a person.
Too many wrong codes lock the request (the codes themselves: ``core.guardrails.approval_codes``).
``consume`` turns approved into used in one guarded UPDATE inside ``BEGIN IMMEDIATE``, so two
concurrent executions of the same plan run once.

An approved plan belongs to the session that requested it: only that principal (agent ids
carry their session, ``mcp:stdio/3fa9c2d1``) or a person may execute it, unless the person
who approved it chose ``any_session`` (then any session of the same agent may). A request
may also say it ``needs`` an out-of-band approval: then only a person on a people path can
approve it, never the user of the agent's own client (``confirm_by_client``, elicitation).
Asking again while a request waits returns it (``request``; one pending request per
requester, action and target), each agent has a cap of pending requests, and lists come in
pages: the queries behind these live in ``core.guardrails.approval_queue``. A request that is
not approved says what to do next (``not_usable``): pending means wait, never "ask again".
Limits: the secret file protects the code only from those who cannot read it.
"""

from __future__ import annotations

import hmac
import secrets
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from core import errors
from core.guardrail_settings import ApprovalsConfig as ApprovalsConfig
from core.guardrails import approval_codes as codes
from core.guardrails import approval_queue as queue
from core.guardrails import schema
from core.guardrails.approval_queue import MAX_PAGE as MAX_PAGE
from core.guardrails.audit import AuditLog
from core.guardrails.policy import ApprovalKind
from core.model import Plan, Principal, PrincipalKind, RiskClass, utcnow
from core.schema_base import Model
from core.state.db import Database, loads

SESSION_SEP = "/"  # agent principal ids: IDENTITY/SESSION, e.g. mcp:stdio/3fa9c2d1
ExecutableBy = Literal["requester", "agent"]


def session_free(principal_id: str) -> str:
    """An agent principal's identity without its session: ``mcp:stdio/3fa9`` -> ``mcp:stdio``."""
    return principal_id.partition(SESSION_SEP)[0]


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    USED = "used"
    LOCKED = "locked"  # too many wrong codes


class ApprovalView(Model):
    """What anyone, agents included, may see of an approval. Never carries the code."""

    id: str
    plan_hash: str
    plan: Plan
    action: str
    target: str
    risk: RiskClass
    summary: str
    reason: str
    requester: str
    status: ApprovalStatus
    created_at: datetime
    expires_at: datetime
    decided_by: str | None = None
    decided_via: str | None = None
    decided_at: datetime | None = None
    note: str = ""
    used_at: datetime | None = None
    failed_attempts: int = 0
    # "requester": only the requesting session (or a person) may execute the approved plan;
    # "agent": any session of the requesting agent (a person chose --any-session).
    executable_by: ExecutableBy = "requester"
    needs: ApprovalKind = "any"  # "out-of-band": the agent's own client can never approve


Views = list[ApprovalView]  # (``ApprovalStore.list`` shadows the builtin in its class)


class ApprovalStore:
    def __init__(
        self,
        db: Database,
        *,
        secret: bytes,
        audit: AuditLog,
        config: ApprovalsConfig | None = None,
    ) -> None:
        if len(secret) < 16:
            raise errors.InvalidInput("approval secret too short", hint="use 32 random bytes")
        self.db = db
        self.audit = audit
        self.config = config or ApprovalsConfig()
        self._secret = secret
        schema.ensure_schema(db)

    # -- codes ------------------------------------------------------------------------------

    def reveal_code(self, approval_id: str, *, principal: Principal) -> str:
        """The one-time code, for people paths only (webhook, page, CLI ``approvals show``)."""
        _require_person(principal, "see an approval code")
        view = self.get(approval_id)
        if view.status is not ApprovalStatus.PENDING:
            raise errors.Conflict(
                f"approval {approval_id} is {view.status.value}; its code is no longer usable",
                hint=f"list pending approvals with {errors.step('list_approvals')}",
            )
        return codes.derive(self._secret, approval_id, self.config.code_length)

    def delivery_code(self, approval_id: str) -> str:
        """The code for a people channel the guard writes to (the webhook). Never expose this
        through anything an agent can call; people-facing interfaces use ``reveal_code``."""
        return codes.derive(self._secret, approval_id, self.config.code_length)

    # -- lifecycle --------------------------------------------------------------------------

    def create(
        self, plan: Plan, requester: Principal, reason: str, *, needs: ApprovalKind = "any"
    ) -> ApprovalView:
        """A new pending request, always (within the cap); ``request`` collapses repeats."""
        _require_sealed(plan)
        self._expire_due()
        with self.db.write() as conn:
            approval_id = self._insert(conn, plan, requester, reason, needs)
        self._audit(
            "approval.requested",
            requester,
            approval_id,
            plan_hash=plan.hash,
            reason=reason,
            needs=needs,
        )
        return self.get(approval_id)

    def request(
        self, plan: Plan, requester: Principal, reason: str, *, needs: ApprovalKind = "any"
    ) -> tuple[ApprovalView, bool]:
        """The pending request for this plan: the one already waiting, or a new one.

        A requester's pending request for the same action and target is returned as it is
        (``False``: nothing new for a person to read), whatever reason or parameters the new
        ask gives: asking again never makes a person decide twice. Only when the waiting
        request can no longer be right is it withdrawn and replaced (``True``): the world it
        was planned for changed (its preconditions differ from the new plan's), or the new
        plan needs a stricter approval path. A new request counts against the requester's
        cap of pending requests (``max_pending_per_principal``, all its sessions together).
        Checked and written in one transaction: two identical asks at once make one request.
        """
        _require_sealed(plan)
        self._expire_due()
        superseded: str | None = None
        with self.db.write() as conn:
            row = queue.waiting(conn, requester.id, plan.action.value, plan.target)
            if row is not None:
                waiting = _view(row)
                if waiting.plan.preconditions == plan.preconditions and (
                    waiting.needs == needs or needs == "any"
                ):
                    return waiting, False
                superseded = waiting.id
                queue.withdraw(conn, superseded, requester.id, queue.SUPERSEDED)
            approval_id = self._insert(conn, plan, requester, reason, needs)
        if superseded is not None:
            self._audit("approval.withdrawn", requester, superseded, note=queue.SUPERSEDED,
                        superseded_by=approval_id)  # fmt: skip
        self._audit(
            "approval.requested",
            requester,
            approval_id,
            plan_hash=plan.hash,
            reason=reason,
            needs=needs,
            **({"supersedes": superseded} if superseded else {}),
        )
        return self.get(approval_id), True

    def _insert(
        self,
        conn: sqlite3.Connection,
        plan: Plan,
        requester: Principal,
        reason: str,
        needs: ApprovalKind,
    ) -> str:
        """Insert a pending request inside the caller's write transaction; refuse past the
        requester's cap of pending requests (counted in the same transaction)."""
        identity = session_free(requester.id)
        if requester.kind is not PrincipalKind.PERSON:
            queue.refuse_past_cap(conn, identity, self.config.max_pending_per_principal)
        approval_id = "apr-" + secrets.token_hex(5)
        queue.insert_pending(
            conn,
            approval_id,
            plan,
            requester,
            reason=reason,
            code_hash=codes.digest(
                approval_id, codes.derive(self._secret, approval_id, self.config.code_length)
            ),
            expires_at=utcnow() + self.config.expiry_delta,
            needs=needs,
            identity=identity,
        )
        return approval_id

    def get(self, approval_id: str) -> ApprovalView:
        self._expire_due()
        with self.db.read() as conn:
            row = conn.execute("SELECT * FROM approvals WHERE id=?", (approval_id,)).fetchone()
        if row is None:
            raise errors.NotFound(
                f"no approval {approval_id!r}",
                hint=f"list them with {errors.step('list_approvals', status='all')}",
            )
        return _view(row)

    def list(
        self, *, status: ApprovalStatus | None = None, requester: str | None = None
    ) -> list[ApprovalView]:
        """Every request (of ``status``, of ``requester``), newest first. Unbounded: people's
        and agents' views use ``page``."""
        self._expire_due()
        sql, args = queue.where(status.value if status else None, requester)
        with self.db.read() as conn:
            rows = conn.execute(
                f"SELECT * FROM approvals{sql} ORDER BY created_at DESC, id DESC", args
            ).fetchall()
        return [_view(r) for r in rows]

    def page(
        self, *, status: ApprovalStatus | None = None, limit: int = 50, cursor: str | None = None
    ) -> tuple[Views, str | None]:
        """``limit`` requests newest first, after the one whose id is ``cursor``, and the
        cursor of the next page (None: this is the last); see ``approval_queue``. A request
        added or decided meanwhile neither repeats nor skips the others."""
        self._expire_due()
        with self.db.read() as conn:
            rows, more = queue.page_rows(
                conn, status.value if status else None, limit=limit, cursor=cursor
            )
        views = [_view(r) for r in rows]
        return views, (views[-1].id if more and views else None)

    def desk(
        self, *, first: Sequence[str], limit: int, offset: int
    ) -> tuple[Views, dict[str, int]]:
        """A page of the people's desk (``approval_queue.desk_ids``) and how many wait per
        target on it."""
        self._expire_due()
        with self.db.read() as conn:
            ids = queue.desk_ids(conn, first=first, limit=limit, offset=offset)
            marks = ",".join("?" * len(ids))
            rows = {r["id"]: r for r in conn.execute(
                f"SELECT * FROM approvals WHERE id IN ({marks})", ids).fetchall()}  # fmt: skip
            views = [_view(rows[i]) for i in ids if i in rows]
            return views, queue.waiting_per_target(conn, sorted({v.target for v in views}))

    def count(self, *, status: ApprovalStatus | None = None) -> int:
        """How many requests there are (of ``status``): an index count."""
        self._expire_due()
        with self.db.read() as conn:
            return queue.count_rows(conn, status.value if status else None)

    def approve(
        self, approval_id: str, approver: Principal, *, via: str = "cli", any_session: bool = False
    ) -> ApprovalView:
        """A person approves. ``any_session``: any session of the requesting agent may then
        execute the plan, not only the session that asked."""
        _require_person(approver, "approve")
        return self._decide(
            approval_id,
            approver.id,
            via,
            ApprovalStatus.APPROVED,
            "",
            approver,
            executable_by="agent" if any_session else None,
        )

    def confirm_by_client(
        self, approval_id: str, client_user: Principal, *, approved: bool, note: str = ""
    ) -> ApprovalView:
        """The user of the agent's own client answered an elicitation: approve or decline.

        Recorded as confirmed by the client's user (kind ``client-user``, via
        ``elicitation``), never as a person; refused for a request that needs out-of-band
        approval. Whether to ask at all is the operator's choice (``[mcp]``), checked by the
        service before it gets here."""
        if client_user.kind is not PrincipalKind.CLIENT_USER:
            raise errors.PolicyDenied(
                f"only an answer from the agent's client confirms here; {client_user} is a "
                f"{client_user.kind.value}",
                hint="people approve with 'clawpoint approvals approve ID' or the approval page",
            )
        view = self.get(approval_id)
        if approved and view.needs == "out-of-band":
            raise errors.PolicyDenied(
                f"approval {approval_id} needs a person on a people path (out-of-band); an "
                "answer in the agent's own client cannot approve it",
                hint="a person approves with 'clawpoint approvals approve ID' or the approval page",
            )
        status = ApprovalStatus.APPROVED if approved else ApprovalStatus.DENIED
        return self._decide(approval_id, client_user.id, "elicitation", status, note, client_user)

    def deny(
        self, approval_id: str, approver: Principal, why: str, *, via: str = "cli"
    ) -> ApprovalView:
        _require_person(approver, "deny")
        return self._decide(approval_id, approver.id, via, ApprovalStatus.DENIED, why, approver)

    def cancel(self, approval_id: str, by: Principal, why: str) -> ApprovalView:
        """Withdraw a pending request: its requester may, or any person."""
        view = self.get(approval_id)
        if by.kind is not PrincipalKind.PERSON and by.id != view.requester:
            raise errors.PolicyDenied(
                f"{by} did not request approval {approval_id} and cannot withdraw it",
                hint="only the requester or a person can withdraw a request",
            )
        with self.db.write() as conn:
            withdrawn = queue.withdraw(conn, approval_id, by.id, why)
        if not withdrawn:
            raise errors.Conflict(
                f"approval {approval_id} is {self.get(approval_id).status.value}, not pending",
                hint="nothing to withdraw",
            )
        self._audit("approval.withdrawn", by, approval_id, note=why)
        return self.get(approval_id)

    def approve_with_code(self, approval_id: str, code: str, presenter: Principal) -> ApprovalView:
        """A person typed the code back in chat; the agent relays it. Wrong codes count."""
        view = self.get(approval_id)
        # Checked before the code: a session that could not execute the plan learns nothing
        # about the code, and its attempts cost the request nothing.
        refusal = _executor_refusal(approval_id, view.requester, view.executable_by, presenter)
        if refusal is not None:
            raise refusal
        if presenter.id == view.requester and presenter.kind is PrincipalKind.PERSON:
            # A person relaying their own request's code would be approving it themselves.
            raise errors.PolicyDenied(
                f"{presenter.id} requested approval {approval_id} and cannot approve it",
                hint="another person must approve it",
            )
        expected = codes.digest(
            approval_id, codes.derive(self._secret, approval_id, self.config.code_length)
        )
        if view.status is ApprovalStatus.PENDING and hmac.compare_digest(
            expected, codes.digest(approval_id, code)
        ):
            return self._decide(
                approval_id,
                "person via chat code",
                "chat-code",
                ApprovalStatus.APPROVED,
                f"code presented by {presenter}",
                presenter,
            )
        if view.status is not ApprovalStatus.PENDING:
            raise errors.Conflict(
                f"approval {approval_id} is {view.status.value}, not pending",
                hint=queue.next_step(view.status.value),
            )
        with self.db.write() as conn:
            conn.execute(
                "UPDATE approvals SET failed_attempts=failed_attempts+1, status=CASE WHEN "
                "failed_attempts+1>=? THEN 'locked' ELSE status END "
                "WHERE id=? AND status='pending'",
                (self.config.max_code_attempts, approval_id),
            )
        after = self.get(approval_id)
        self._audit(
            "approval.code-rejected", presenter, approval_id, attempts=after.failed_attempts
        )
        if after.status is ApprovalStatus.LOCKED:
            self._audit("approval.locked", presenter, approval_id, attempts=after.failed_attempts)
            raise errors.PolicyDenied(
                f"wrong code for approval {approval_id}; it is now locked after "
                f"{after.failed_attempts} wrong codes",
                hint="a person must request a new approval or approve it with the CLI or page",
            )
        left = self.config.max_code_attempts - after.failed_attempts
        raise errors.PolicyDenied(
            f"wrong code for approval {approval_id} ({left} attempts left)",
            hint="ask the person to read the code again from the approval message",
        )

    def consume(self, approval_id: str, plan_hash: str, principal: Principal) -> ApprovalView:
        """Mark an approved request used, once. Raise unless it approves exactly this plan."""
        self._expire_due()
        with self.db.write() as conn:
            row = conn.execute("SELECT * FROM approvals WHERE id=?", (approval_id,)).fetchone()
            if row is None:
                raise errors.NotFound(f"no approval {approval_id!r}", hint="request one first")
            if row["plan_hash"] != plan_hash:
                raise errors.PolicyDenied(
                    f"approval {approval_id} was given for plan {row['plan_hash'][:12]}, not "
                    f"{plan_hash[:12]}: the plan changed after it was approved",
                    hint="request a new approval for the new plan",
                )
            refusal = _executor_refusal(
                approval_id, row["requester"], row["executable_by"], principal
            )
            if refusal is not None:
                raise refusal
            cur = conn.execute(
                "UPDATE approvals SET status='used', used_at=?, used_by=? "
                "WHERE id=? AND status='approved' AND plan_hash=?",
                (utcnow().isoformat(), str(principal), approval_id, plan_hash),
            )
        if cur.rowcount != 1:  # not approved, or a concurrent use won: say what it is now
            raise not_usable(self.get(approval_id))
        self._audit("approval.used", principal, approval_id, plan_hash=plan_hash)
        return self.get(approval_id)

    # -- internals --------------------------------------------------------------------------

    def _decide(
        self,
        approval_id: str,
        decided_by: str,
        via: str,
        status: ApprovalStatus,
        note: str,
        actor: Principal,
        *,
        executable_by: ExecutableBy | None = None,
    ) -> ApprovalView:
        view = self.get(approval_id)
        if decided_by == view.requester:
            raise errors.PolicyDenied(
                f"{decided_by} requested approval {approval_id} and cannot decide it",
                hint="another person must approve or deny it",
            )
        now = utcnow()
        # Approval restarts the clock: the plan must be used within one expiry window.
        expires = now + self.config.expiry_delta if status is ApprovalStatus.APPROVED else None
        with self.db.write() as conn:
            cur = conn.execute(
                "UPDATE approvals SET status=?, decided_by=?, decided_via=?, decided_at=?, note=?, "
                "expires_at=COALESCE(?, expires_at), executable_by=COALESCE(?, executable_by) "
                "WHERE id=? AND status='pending'",
                (
                    status.value,
                    decided_by,
                    via,
                    now.isoformat(),
                    note,
                    expires.isoformat() if expires else None,
                    executable_by,
                    approval_id,
                ),
            )
        if cur.rowcount != 1:
            raise errors.Conflict(
                f"approval {approval_id} is {self.get(approval_id).status.value}, not pending",
                hint=f"list pending approvals with {errors.step('list_approvals')}",
            )
        self._audit(
            f"approval.{status.value}",
            actor,
            approval_id,
            via=via,
            note=note,
            **({"executable_by": executable_by} if executable_by else {}),
        )
        return self.get(approval_id)

    def _expire_due(self) -> None:
        now = utcnow().isoformat()
        # Every read of the queue expires what is due, but most find nothing: look first and
        # take the write lock (which waits behind every other writer) only when there is.
        with self.db.read() as conn:
            due = conn.execute(
                "SELECT 1 FROM approvals WHERE status IN ('pending','approved') AND expires_at<? "
                "LIMIT 1",
                (now,),
            ).fetchone()
        if due is None:
            return
        with self.db.write() as conn:
            expired = [
                r["id"]
                for r in conn.execute(
                    "SELECT id FROM approvals "
                    "WHERE status IN ('pending','approved') AND expires_at<?",
                    (now,),
                )
            ]
            conn.execute(
                "UPDATE approvals SET status='expired' "
                "WHERE status IN ('pending','approved') AND expires_at<?",
                (now,),
            )
        for approval_id in expired:
            self.audit.append("approval.expired", principal="system", subject=approval_id, data={})

    def _audit(self, kind: str, principal: Principal, approval_id: str, **data: Any) -> None:
        self.audit.append(kind, principal=str(principal), subject=approval_id, data=data)


def not_usable(view: ApprovalView) -> errors.ApprovalRequired:
    """Why an approval that is not ``approved`` cannot run its plan, and what to do next: a
    pending one means wait (never "ask again": that would make a person decide twice)."""
    return queue.refusal(view.id, view.status.value, expires_at=view.expires_at, note=view.note)


def _require_sealed(plan: Plan) -> None:
    if not plan.hash or plan.hash != plan.compute_hash():
        raise errors.InvalidInput(
            "the plan is not sealed (its hash is missing or stale)",
            hint="plan again; only sealed plans can be approved",
        )


def _executor_refusal(
    approval_id: str, requester: str, executable_by: str, principal: Principal
) -> errors.PolicyDenied | None:
    """Why ``principal`` may not execute (or relay a code for) this approval; None if it may.

    A person may; the requesting principal (its session included) may; another session of
    the same agent only when the approving person allowed any session."""
    if principal.kind is PrincipalKind.PERSON or principal.id == requester:
        return None
    if executable_by == "agent" and session_free(principal.id) == session_free(requester):
        return None
    return errors.PolicyDenied(
        f"approval {approval_id} was requested by {requester} and is bound to that session; "
        f"{principal.id} cannot use it",
        hint="request the action in this session (it waits for a person), or ask a person to "
        "approve it for any session: clawpoint approvals approve ID --any-session",
    )


def _require_person(principal: Principal, what: str) -> None:
    if principal.kind is not PrincipalKind.PERSON:
        raise errors.PolicyDenied(
            f"only a person may {what}; {principal} is a {principal.kind.value}",
            hint="a person must use 'clawpoint approvals', the approval page or the chat code",
        )


def _view(row: Any) -> ApprovalView:
    plan = Plan.model_validate(loads(row["plan"]))

    def ts(value: str | None) -> datetime | None:
        return datetime.fromisoformat(value) if value else None

    return ApprovalView(
        id=row["id"],
        plan_hash=row["plan_hash"],
        plan=plan,
        action=plan.action.value,
        target=plan.target,
        risk=plan.risk,
        summary=plan.summary,
        reason=row["reason"],
        requester=row["requester"],
        status=ApprovalStatus(row["status"]),
        created_at=datetime.fromisoformat(row["created_at"]),
        expires_at=datetime.fromisoformat(row["expires_at"]),
        decided_by=row["decided_by"],
        decided_via=row["decided_via"],
        decided_at=ts(row["decided_at"]),
        note=row["note"],
        used_at=ts(row["used_at"]),
        failed_attempts=row["failed_attempts"],
        executable_by=row["executable_by"],
        needs=row["needs"],
    )


__all__ = [
    "ApprovalStatus",
    "ApprovalStore",
    "ApprovalView",
    "ApprovalsConfig",
    "not_usable",
    "session_free",
]
