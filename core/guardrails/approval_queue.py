"""The queue of pending approval requests: the queries that keep it small and quick to read.

A noisy or hostile agent once made 300 pending requests in 4.2 s, and with 20,000 pending
every list a person reads took seconds. These queries (on the ``approvals`` table, inside
the caller's connection; ``core.guardrails.approvals`` owns the lifecycle) bound it:

- ``waiting``: a requester's pending request for the same action and target, so asking
  again returns it rather than making a person decide twice;
- ``refuse_past_cap``: at most ``[approvals] max_pending_per_principal`` pending requests
  per agent identity, all its sessions together (``session_free``);
- ``page_rows``/``count_rows``: newest first, a page at a time, by keyset on
  (status, created_at, id), so a page costs the same with 20 rows or 20,000;
- ``desk_ids``/``waiting_per_target``: the people's desk, urgent targets first, then
  grouped by target, a page at a time (only ids are sorted);
- ``refusal``: what running a request that is not approved answers (pending: wait).

Each is an index lookup (the guardrails schema's third migration adds the columns and
indexes). Limits: the cap counts requests, not how urgent they are; the oldest waiting
ones are not withdrawn to make room.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from core import errors
from core.model import STORED_CONTEXT, Plan, Principal, utcnow

MAX_PAGE = 500  # requests per page at most
SUPERSEDED = "superseded: the situation it was planned for changed; a new request replaces it"


_ASK_AGAIN = "request a new approval for the plan (plan it again first if things changed)"
_NEXT = {
    "pending": "wait for a person to decide; do not request it again (asking again returns "
    "this same request); run it once it is approved",
    "denied": "a person denied or withdrew it: do not ask again for the same plan unless "
    "something changed; tell the person what changed",
    "used": "it already ran once; plan again if it is needed again",
}


def next_step(status: str) -> str:
    """What the holder of a request in ``status`` (not approved) should do next."""
    return _NEXT.get(status, _ASK_AGAIN)


def refusal(
    approval_id: str, status: str, *, expires_at: datetime, note: str
) -> errors.ApprovalRequired:
    """The error for running a request that is not approved: pending means wait."""
    what = f"approval {approval_id} is {status}, not approved"
    if status == "pending":
        what += f": a person has not decided yet (it waits until {expires_at:%H:%M:%S} UTC)"
        what += "; it cannot be used yet"
    else:
        what += (f" ({note})" if status == "denied" and note else "") + "; it cannot be used"
    return errors.ApprovalRequired(
        what, hint=next_step(status), details={"approval_id": approval_id, "status": status}
    )


def where(status: str | None, requester: str | None = None) -> tuple[str, list[str]]:
    """A WHERE clause (with its leading space, or empty) for a status and a requester."""
    clauses, args = [], []
    if status is not None:
        clauses.append("status=?")
        args.append(status)
    if requester is not None:
        clauses.append("requester=?")
        args.append(requester)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def waiting(conn: sqlite3.Connection, requester: str, action: str, target: str) -> Any:
    """The newest pending request of ``requester`` for ``action`` on ``target``, or None."""
    return conn.execute(
        "SELECT * FROM approvals WHERE requester=? AND action=? AND target=? "
        "AND status='pending' ORDER BY created_at DESC LIMIT 1",
        (requester, action, target),
    ).fetchone()


def refuse_past_cap(conn: sqlite3.Connection, identity: str, cap: int) -> None:
    """PolicyDenied (code ``approval-cap``) when ``identity`` already has ``cap`` pending."""
    (pending,) = conn.execute(
        "SELECT COUNT(*) FROM approvals WHERE identity=? AND status='pending'", (identity,)
    ).fetchone()
    if pending >= cap:
        raise errors.PolicyDenied(
            f"{identity} already has {pending} approval requests waiting for a person, the "
            f"most allowed ([approvals] max_pending_per_principal = {cap}); this one was not "
            "made",
            hint="do not ask again now: wait until a person decides or the waiting requests "
            "expire (list_approvals shows them), or ask an operator to raise the cap",
            code="approval-cap",
            details={"pending": pending, "cap": cap},
        )


def insert_pending(
    conn: sqlite3.Connection,
    approval_id: str,
    plan: Plan,
    requester: Principal,
    *,
    reason: str,
    code_hash: str,
    expires_at: datetime,
    needs: str,
    identity: str,
) -> None:
    """A new pending request, with the columns the queue's indexes read."""
    conn.execute(
        "INSERT INTO approvals(id, plan_hash, plan, requester, requester_kind, reason, "
        "status, code_hash, created_at, expires_at, needs, action, target, identity) "
        "VALUES(?,?,?,?,?,?,'pending',?,?,?,?,?,?,?)",
        (
            approval_id, plan.hash, plan.model_dump_json(context=STORED_CONTEXT), requester.id,
            requester.kind.value, reason, code_hash, utcnow().isoformat(),
            expires_at.isoformat(), needs, plan.action.value, plan.target, identity,
        ),
    )  # fmt: skip


def withdraw(conn: sqlite3.Connection, approval_id: str, by: str, note: str) -> bool:
    """Withdraw a pending request (recorded as denied, via ``withdrawn``); False when it was
    not pending."""
    cur = conn.execute(
        "UPDATE approvals SET status='denied', decided_by=?, decided_via='withdrawn', "
        "decided_at=?, note=? WHERE id=? AND status='pending'",
        (by, utcnow().isoformat(), note, approval_id),
    )
    return cur.rowcount == 1


def page_rows(
    conn: sqlite3.Connection, status: str | None, *, limit: int, cursor: str | None
) -> tuple[list[Any], bool]:
    """Up to ``limit`` rows newest first after the row whose id is ``cursor``, and whether
    more follow. InvalidInput for a limit out of range or a cursor naming no request."""
    if not 1 <= limit <= MAX_PAGE:
        raise errors.InvalidInput(
            f"limit {limit} is not between 1 and {MAX_PAGE}", hint=f"pass 1 to {MAX_PAGE}"
        )
    sql, args = where(status)
    if cursor:
        after = conn.execute(
            "SELECT created_at, id FROM approvals WHERE id=?", (cursor,)
        ).fetchone()
        if after is None:
            raise errors.InvalidInput(
                f"cursor {cursor[:80]!r} names no approval request",
                hint="list again without a cursor",
            )
        sql += (" AND" if sql else " WHERE") + " (created_at, id) < (?, ?)"
        args += [after["created_at"], after["id"]]
    rows = conn.execute(
        f"SELECT * FROM approvals{sql} ORDER BY created_at DESC, id DESC LIMIT ?",
        [*args, limit + 1],
    ).fetchall()
    return rows[:limit], len(rows) > limit


def count_rows(conn: sqlite3.Connection, status: str | None) -> int:
    sql, args = where(status)
    (n,) = conn.execute(f"SELECT COUNT(*) FROM approvals{sql}", args).fetchone()
    return int(n)


def desk_ids(
    conn: sqlite3.Connection, *, first: Sequence[str], limit: int, offset: int
) -> list[str]:
    """Pending request ids for the people's desk: those whose target is in ``first`` (in that
    order: soonest deadline first), then the rest grouped by target, newest first within one.
    Only ids pass through the sort (never the plans), so 20,000 pending sort in milliseconds."""
    rank, args = "", list[Any]()
    if first:
        rank = "CASE target " + "WHEN ? THEN ? " * len(first) + "ELSE ? END, "
        for i, target in enumerate(first):
            args += [target, i]
        args.append(len(first))
    rows = conn.execute(
        f"SELECT id FROM approvals WHERE status='pending' "
        f"ORDER BY {rank}target, created_at DESC, id DESC LIMIT ? OFFSET ?",
        [*args, limit, offset],
    ).fetchall()
    return [r["id"] for r in rows]


def pending_targets(conn: sqlite3.Connection) -> list[str]:
    """Every target with a pending request (an index scan: one row per target)."""
    rows = conn.execute("SELECT DISTINCT target FROM approvals WHERE status='pending'")
    return [r["target"] for r in rows.fetchall()]


def waiting_per_target(conn: sqlite3.Connection, targets: Sequence[str]) -> dict[str, int]:
    """How many requests are pending per target, for ``targets`` (a page's groups)."""
    if not targets:
        return {}
    marks = ",".join("?" * len(targets))
    rows = conn.execute(
        f"SELECT target, COUNT(*) AS n FROM approvals WHERE status='pending' "
        f"AND target IN ({marks}) GROUP BY target",
        list(targets),
    ).fetchall()
    return {r["target"]: int(r["n"]) for r in rows}
