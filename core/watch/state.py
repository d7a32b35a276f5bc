"""The watch loop's memory: what it already asked for, and workload progress sightings.

Two tables (component ``watch`` of the state database):

- ``watch_requests``: one row per proposal key (``trigger|action|target``) with the plan
  hash, the outcome of the last request (executed, approval_required, denied, failed,
  error), the approval id and when. The loop does not ask again for the same key while an
  approval is pending (``PENDING_TTL_S``) or shortly after an outcome (``COOLDOWN_S``), so a
  poll every few seconds does not flood people with the same request.
- ``watch_observations``: the last ``KEEP_OBSERVATIONS`` progress sightings per workload,
  from which the SLA signal computes a progress rate.
- ``watch_findings``: the conditions already reported (pending approvals, unfixable risks,
  failing sources) with a fingerprint and when they were last reported, so a pass prints
  only what is new, in one process or across ``--once`` runs (``seen``/``forget_others``).
  A pass reports a page of pending approvals (``core.watch.report.APPROVAL_FINDINGS``), so
  this table stays small however many requests wait.

Limits: bounded by the number of distinct proposal keys and workloads; rows of workloads
that no longer exist are pruned by ``prune``.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from core.schema_base import Model
from core.signals.sla import Observation
from core.state.db import Database, register_migrations

PENDING_TTL_S = 3600.0  # an approval request older than this is asked for again
COOLDOWN_S = 300.0  # after an outcome, the same proposal waits this long before a retry
KEEP_OBSERVATIONS = 8

MIGRATIONS = [
    """
    CREATE TABLE watch_requests (
        key TEXT PRIMARY KEY,
        plan_hash TEXT NOT NULL,
        status TEXT NOT NULL,
        approval_id TEXT,
        message TEXT NOT NULL DEFAULT '',
        updated_at TEXT NOT NULL
    );
    CREATE TABLE watch_observations (
        workload TEXT NOT NULL,
        at TEXT NOT NULL,
        step INTEGER NOT NULL,
        PRIMARY KEY (workload, at)
    );
    """,
    """
    ALTER TABLE watch_requests ADD COLUMN trigger TEXT;
    CREATE TABLE watch_findings (
        key TEXT PRIMARY KEY,
        fingerprint TEXT NOT NULL,
        reported_at TEXT NOT NULL
    );
    """,
]


def install() -> None:
    register_migrations("watch", MIGRATIONS)


install()


class Request(Model):
    key: str
    plan_hash: str
    status: str
    approval_id: str | None = None
    message: str = ""
    updated_at: datetime
    trigger: str | None = None

    def blocks(self, now: datetime) -> bool:
        """True while this earlier request should stop the same proposal being asked again."""
        age = (now - self.updated_at).total_seconds()
        if self.status == "approval_required":
            return age < PENDING_TTL_S
        return age < COOLDOWN_S


class WatchState:
    def __init__(self, db: Database) -> None:
        self.db = db
        install()
        if db.schema_versions().get("watch", 0) < len(MIGRATIONS):
            # The handle may have migrated before this module registered its tables.
            db._migrated = False
            db.migrate()

    def request(self, key: str) -> Request | None:
        with self.db.read() as conn:
            row = conn.execute("SELECT * FROM watch_requests WHERE key=?", (key,)).fetchone()
        if row is None:
            return None
        return Request(**{**dict(row), "updated_at": datetime.fromisoformat(row["updated_at"])})

    def pending(self, now: datetime) -> list[Request]:
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT * FROM watch_requests WHERE status='approval_required'"
            ).fetchall()
        out = [
            Request(**{**dict(r), "updated_at": datetime.fromisoformat(r["updated_at"])})
            for r in rows
        ]
        return [r for r in out if r.blocks(now)]

    def remember(self, req: Request) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO watch_requests(key, plan_hash, status, approval_id, message, "
                "updated_at, trigger) VALUES(?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE SET "
                "plan_hash=excluded.plan_hash, status=excluded.status, "
                "approval_id=excluded.approval_id, message=excluded.message, "
                "updated_at=excluded.updated_at, trigger=excluded.trigger",
                (
                    req.key,
                    req.plan_hash,
                    req.status,
                    req.approval_id,
                    req.message,
                    req.updated_at.isoformat(),
                    req.trigger,
                ),
            )

    def triggers_by_approval(self) -> dict[str, str]:
        """Approval id -> the trigger watch asked it for (its own requests only)."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT approval_id, trigger FROM watch_requests "
                "WHERE approval_id IS NOT NULL AND trigger IS NOT NULL"
            ).fetchall()
        return {r["approval_id"]: r["trigger"] for r in rows}

    def seen(self, key: str, fingerprint: str, now: datetime, *, remind_s: float) -> bool:
        """Whether a condition is news: first seen, changed, or last reported ``remind_s``
        ago. News is recorded as reported now."""
        with self.db.write() as conn:
            row = conn.execute(
                "SELECT fingerprint, reported_at FROM watch_findings WHERE key=?", (key,)
            ).fetchone()
            news = (
                row is None
                or row["fingerprint"] != fingerprint
                or (now - datetime.fromisoformat(row["reported_at"])).total_seconds() >= remind_s
            )
            if news:
                conn.execute(
                    "INSERT OR REPLACE INTO watch_findings(key, fingerprint, reported_at) "
                    "VALUES(?,?,?)",
                    (key, fingerprint, now.isoformat()),
                )
        return news

    def forget_others(self, keep: set[str]) -> None:
        """Drop conditions that are gone, so they are news again if they come back: one
        statement, however many there were (a flood leaves thousands)."""
        with self.db.write() as conn:
            conn.execute(
                "DELETE FROM watch_findings WHERE key NOT IN (SELECT value FROM json_each(?))",
                (json.dumps(sorted(keep)),),
            )

    def history(self) -> dict[str, list[Observation]]:
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT workload, at, step FROM watch_observations ORDER BY workload, at"
            ).fetchall()
        out: dict[str, list[Observation]] = {}
        for r in rows:
            out.setdefault(r["workload"], []).append(
                Observation(step=r["step"], at=datetime.fromisoformat(r["at"]))
            )
        return out

    def observe(self, workload: str, step: int, at: datetime) -> None:
        with self.db.write() as conn:
            last = conn.execute(
                "SELECT step FROM watch_observations WHERE workload=? ORDER BY at DESC LIMIT 1",
                (workload,),
            ).fetchone()
            if last is not None and last["step"] > step:
                # The counter went back (restored from an older checkpoint): start afresh.
                conn.execute("DELETE FROM watch_observations WHERE workload=?", (workload,))
            conn.execute(
                "INSERT OR REPLACE INTO watch_observations(workload, at, step) VALUES(?,?,?)",
                (workload, at.isoformat(), step),
            )
            conn.execute(
                "DELETE FROM watch_observations WHERE workload=? AND at NOT IN (SELECT at FROM "
                "watch_observations WHERE workload=? ORDER BY at DESC LIMIT ?)",
                (workload, workload, KEEP_OBSERVATIONS),
            )

    def prune(self, live: set[str], now: datetime) -> None:
        cutoff = (now - timedelta(seconds=PENDING_TTL_S * 24)).isoformat()
        with self.db.write() as conn:
            for (wid,) in conn.execute(
                "SELECT DISTINCT workload FROM watch_observations"
            ).fetchall():
                if wid not in live:
                    conn.execute("DELETE FROM watch_observations WHERE workload=?", (wid,))
            conn.execute("DELETE FROM watch_requests WHERE updated_at < ?", (cutoff,))
