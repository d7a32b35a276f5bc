"""The audit log: an append-only, hash-chained record of plans, decisions and executions.

Each entry's hash covers its own fields and the previous entry's hash, so editing,
deleting or reordering any row breaks the chain from that row on; ``verify`` names the first
bad entry. A one-row ``audit_head`` (last seq and hash), written in the same transaction as
each entry, catches the deletion of the LAST entries too, which the chain alone cannot see;
SQLite's AUTOINCREMENT counter is a second witness if the head row itself is removed.
Limits: this detects tampering with the database file; it does not stop someone with write
access from rewriting the whole chain and the head consistently (ship entries elsewhere, or
record ``head()`` outside the machine, for that).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from datetime import datetime
from typing import Any

from core.guardrails import schema
from core.model import Plan, utcnow
from core.schema_base import Model
from core.state.db import Database, dumps

GENESIS = schema.GENESIS


class AuditEntry(Model):
    seq: int
    ts: datetime
    kind: str
    principal: str
    subject: str
    data: dict[str, Any]
    prev_hash: str
    hash: str


class AuditVerification(Model):
    ok: bool
    entries: int
    first_bad_seq: int | None = None
    problem: str = ""


def _entry_hash(
    seq: int, ts: str, kind: str, principal: str, subject: str, data: str, prev: str
) -> str:
    body = json.dumps([seq, ts, kind, principal, subject, data, prev], separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


class AuditHead(Model):
    """The last entry's seq and hash: publish it elsewhere to anchor the chain."""

    seq: int
    hash: str


class AuditLog:
    def __init__(self, db: Database) -> None:
        self.db = db
        schema.ensure_schema(db)

    def append(
        self, kind: str, *, principal: str, subject: str, data: dict[str, Any]
    ) -> AuditEntry:
        with self.db.write() as conn:
            return self.append_in(conn, kind, principal=principal, subject=subject, data=data)

    def for_plan(
        self,
        kind: str,
        plan: Plan,
        principal: object,
        data: dict[str, Any] | None = None,
        *,
        conn: sqlite3.Connection | None = None,
    ) -> AuditEntry:
        """A record about ``plan``: its target is the subject and its hash is in the data
        (``plan_hash``), the same in every kind of record, so the trail of one plan (its
        planning, decision, confirmation, execution) is found by one key. ``conn``: inside
        the caller's transaction."""
        body = {"plan_hash": plan.hash, **(data or {})}
        if conn is not None:
            return self.append_in(
                conn, kind, principal=str(principal), subject=plan.target, data=body
            )
        return self.append(kind, principal=str(principal), subject=plan.target, data=body)

    def append_in(
        self,
        conn: sqlite3.Connection,
        kind: str,
        *,
        principal: str,
        subject: str,
        data: dict[str, Any],
    ) -> AuditEntry:
        """``append`` inside the caller's write transaction (committed with what it records)."""
        ts = utcnow().isoformat()
        payload = dumps(data)
        last = conn.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
        seq = (last["seq"] + 1) if last else 1
        prev = last["hash"] if last else GENESIS
        digest = _entry_hash(seq, ts, kind, principal, subject, payload, prev)
        conn.execute(
            "INSERT INTO audit(seq, ts, kind, principal, subject, data, prev_hash, hash) "
            "VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
            (seq, ts, kind, principal, subject, payload, prev, digest),
        )
        conn.execute(
            "INSERT INTO audit_head(id, seq, hash) VALUES(1, ?, ?) "
            "ON CONFLICT(id) DO UPDATE SET seq=excluded.seq, hash=excluded.hash",
            (seq, digest),
        )
        return AuditEntry(
            seq=seq,
            ts=datetime.fromisoformat(ts),
            kind=kind,
            principal=principal,
            subject=subject,
            data=data,
            prev_hash=prev,
            hash=digest,
        )

    def count(self) -> int:
        """How many entries the chain holds."""
        with self.db.read() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM audit").fetchone()[0])

    def newest(self, *, limit: int, offset: int = 0) -> list[AuditEntry]:
        """A page of the chain, newest first (``offset`` entries skipped)."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT * FROM audit ORDER BY seq DESC LIMIT ? OFFSET ?", (limit, offset)
            ).fetchall()
        return [_entry(r) for r in rows]

    def entries(
        self, *, since: datetime | None = None, limit: int | None = None, subject: str | None = None
    ) -> list[AuditEntry]:
        sql = "SELECT * FROM audit WHERE 1=1"
        args: list[Any] = []
        if since is not None:
            sql += " AND ts >= ?"
            args.append(since.isoformat())
        if subject is not None:
            sql += " AND subject = ?"
            args.append(subject)
        sql += " ORDER BY seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        with self.db.read() as conn:
            rows = conn.execute(sql, args).fetchall()
        out = [_entry(r) for r in rows]
        out.reverse()
        return out

    def head(self) -> AuditHead:
        with self.db.read() as conn:
            row = conn.execute("SELECT seq, hash FROM audit_head WHERE id=1").fetchone()
        return (
            AuditHead(seq=row["seq"], hash=row["hash"]) if row else AuditHead(seq=0, hash=GENESIS)
        )

    def verify(self) -> AuditVerification:
        """Walk the chain from the first entry, then check the tail against the head row."""
        with self.db.read() as conn:
            rows = conn.execute("SELECT * FROM audit ORDER BY seq ASC").fetchall()
            head = conn.execute("SELECT seq, hash FROM audit_head WHERE id=1").fetchone()
            counter = conn.execute("SELECT seq FROM sqlite_sequence WHERE name='audit'").fetchone()
        prev = GENESIS
        expected_seq = 1
        for r in rows:
            if r["seq"] != expected_seq:
                return AuditVerification(
                    ok=False,
                    entries=len(rows),
                    first_bad_seq=expected_seq,
                    problem=f"entry {expected_seq} is missing (next present is {r['seq']})",
                )
            if r["prev_hash"] != prev:
                return AuditVerification(
                    ok=False,
                    entries=len(rows),
                    first_bad_seq=r["seq"],
                    problem=f"entry {r['seq']} does not follow entry {r['seq'] - 1} "
                    "(deleted, reordered or edited predecessor)",
                )
            digest = _entry_hash(
                r["seq"],
                r["ts"],
                r["kind"],
                r["principal"],
                r["subject"],
                r["data"],
                r["prev_hash"],
            )
            if digest != r["hash"]:
                return AuditVerification(
                    ok=False,
                    entries=len(rows),
                    first_bad_seq=r["seq"],
                    problem=f"entry {r['seq']} was modified "
                    "(its content no longer matches its hash)",
                )
            prev = r["hash"]
            expected_seq += 1
        last_seq = expected_seq - 1
        return _check_tail(len(rows), last_seq, prev, head, counter)


def _check_tail(
    count: int, last_seq: int, last_hash: str, head: Any, counter: Any
) -> AuditVerification:
    """The chain was sound up to ``last_seq``; does anything say there were more entries?"""
    if head is None:
        return AuditVerification(
            ok=False,
            entries=count,
            first_bad_seq=last_seq + 1,
            problem="the audit head record is missing (deleted)",
        )
    if head["seq"] > last_seq:
        missing = (
            f"entry {last_seq + 1}"
            if head["seq"] == last_seq + 1
            else f"entries {last_seq + 1}..{head['seq']}"
        )
        return AuditVerification(
            ok=False,
            entries=count,
            first_bad_seq=last_seq + 1,
            problem=f"{missing} deleted from the end (the head records {head['seq']} entries)",
        )
    if head["seq"] != last_seq or head["hash"] != last_hash:
        return AuditVerification(
            ok=False,
            entries=count,
            first_bad_seq=last_seq,
            problem=f"the audit head does not match entry {last_seq} (head or tail rewritten)",
        )
    if counter is not None and counter["seq"] > last_seq:
        return AuditVerification(
            ok=False,
            entries=count,
            first_bad_seq=last_seq + 1,
            problem=f"entries after {last_seq} were deleted (SQLite had numbered "
            f"{counter['seq']}) and the head was rewritten",
        )
    return AuditVerification(ok=True, entries=count)


def _entry(r: sqlite3.Row) -> AuditEntry:
    """An entry as the table stores it."""
    return AuditEntry(
        seq=r["seq"],
        ts=datetime.fromisoformat(r["ts"]),
        kind=r["kind"],
        principal=r["principal"],
        subject=r["subject"],
        data=json.loads(r["data"]),
        prev_hash=r["prev_hash"],
        hash=r["hash"],
    )
