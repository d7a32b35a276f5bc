"""Evidence: the signals clawpoint itself observed, which trigger-scoped grants depend on.

A standing approval scoped ``trigger=spot-interruption`` (or ``node-down``, ``gpu-failure``,
``maintenance``, or any trigger the planner names) applies to a plan only when this store
holds *live* evidence of that trigger for one of the plan's subjects: its target, the node
its workload runs on, or the workload it assumes (``plan_subjects``). Evidence is written
only by code that observed the signal itself (the watch pass: cloud metadata notices, NVML,
backend node health, its own SLA and queue readings); what a caller says (a ``trigger`` or
``reason`` argument) is never evidence, whoever the caller is.

Each row says what was seen (``trigger``, ``subject``), by which source (``aws-imds``,
``nvml``, ``backend:slurm``, ``watch:sla``...), when it was first and last seen, and until
when it counts (``expires_at``: a notice's deadline plus ``NOTICE_GRACE_S``, so the move
after the node went away is still covered; otherwise the last sighting plus
``DEFAULT_TTL_S``). Every new sighting is audited (``evidence.observed``); every use by a
grant is recorded with the plan hash (``evidence_uses``) and in the ``grant.used`` entry.

Limits: evidence is as good as its source; an expired or ended row stays in the table
(history) but never matches. A checker that cannot read the world (a backend down) leaves
the evidence standing until it expires. Subjects are compared as given: callers store node ids as ``BACKEND:NAME``.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from core.guardrails.audit import AuditLog
from core.model import Plan, utcnow
from core.schema_base import Model
from core.state.db import Database, register_migrations

DEFAULT_TTL_S = 600.0  # a sighting without a deadline counts this long after it was last seen
NOTICE_GRACE_S = 300.0  # after a notice's deadline: the node is gone, failing over still counts

# Names people write in grants that mean the same observed trigger.
ALIASES = {"gpu-failed": "gpu-failure", "spot": "spot-interruption"}

MIGRATIONS = [
    """
    CREATE TABLE evidence (
        id TEXT PRIMARY KEY,
        trigger TEXT NOT NULL,
        subject TEXT NOT NULL,
        source TEXT NOT NULL,
        first_seen TEXT NOT NULL,
        observed_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        detail TEXT NOT NULL DEFAULT '',
        UNIQUE (trigger, subject, source)
    );
    CREATE TABLE evidence_uses (
        evidence_id TEXT NOT NULL,
        plan_hash TEXT NOT NULL,
        grant_id TEXT NOT NULL,
        principal TEXT NOT NULL,
        ts TEXT NOT NULL
    );
    CREATE INDEX evidence_uses_plan ON evidence_uses(plan_hash);
    """,
]


def install() -> None:
    register_migrations("evidence", MIGRATIONS)


install()


# What the service says of a live sighting when asked again: why it no longer holds, or None
# (it holds, or the world cannot be read now).
Checker = Callable[["Evidence"], str | None]


def canonical_trigger(trigger: str) -> str:
    t = trigger.strip().lower()
    return ALIASES.get(t, t)


class Evidence(Model):
    id: str
    trigger: str
    subject: str
    source: str
    first_seen: datetime
    observed_at: datetime
    expires_at: datetime
    detail: str = ""

    def live(self, now: datetime) -> bool:
        return now < self.expires_at

    def brief(self) -> dict[str, Any]:
        """What the audit and the decision carry about it."""
        return {
            "evidence_id": self.id,
            "trigger": self.trigger,
            "subject": self.subject,
            "source": self.source,
            "first_seen": self.first_seen.isoformat(),
            "observed_at": self.observed_at.isoformat(),
            "expires_at": self.expires_at.isoformat(),
            "detail": self.detail,
        }


def plan_subjects(plan: Plan) -> list[str]:
    """What evidence about a plan may be about: its target, its workload and their node."""
    out = [plan.target]
    pre = plan.preconditions
    if pre.workload:
        out.append(pre.workload)
    for node in (plan.scope.node, pre.node):
        if node:
            out.append(node if ":" in node else f"{plan.backend}:{node}")
    return list(dict.fromkeys(out))


def _row(r: Any) -> Evidence:
    return Evidence(
        id=r["id"],
        trigger=r["trigger"],
        subject=r["subject"],
        source=r["source"],
        first_seen=datetime.fromisoformat(r["first_seen"]),
        observed_at=datetime.fromisoformat(r["observed_at"]),
        expires_at=datetime.fromisoformat(r["expires_at"]),
        detail=r["detail"],
    )


class EvidenceStore:
    def __init__(self, db: Database, *, audit: AuditLog) -> None:
        self.db = db
        self.audit = audit
        self.checker: Checker | None = None  # set by the service (core.service.evidence_check)
        install()
        if db.schema_versions().get("evidence", 0) < len(MIGRATIONS):
            # The handle may have migrated before this module registered its tables.
            db._migrated = False
            db.migrate()

    def record(
        self,
        trigger: str,
        subject: str,
        *,
        source: str,
        observed_at: datetime | None = None,
        expires_at: datetime | None = None,
        detail: str = "",
    ) -> Evidence:
        """Record one sighting (call only where clawpoint itself observed the signal)."""
        trigger = canonical_trigger(trigger)
        now = observed_at or utcnow()
        until = expires_at or now + timedelta(seconds=DEFAULT_TTL_S)
        new = False
        with self.db.write() as conn:
            row = conn.execute(
                "SELECT * FROM evidence WHERE trigger=? AND subject=? AND source=?",
                (trigger, subject, source),
            ).fetchone()
            if row is None:
                new = True
                conn.execute(
                    "INSERT INTO evidence(id, trigger, subject, source, first_seen, observed_at, "
                    "expires_at, detail) VALUES(?,?,?,?,?,?,?,?)",
                    ("evd-" + secrets.token_hex(5), trigger, subject, source, now.isoformat(),
                     now.isoformat(), until.isoformat(), detail[:500]),
                )  # fmt: skip
            else:
                lapsed = not _row(row).live(now)
                new = lapsed
                conn.execute(
                    "UPDATE evidence SET observed_at=?, expires_at=?, detail=?, "
                    "first_seen=CASE WHEN ? THEN ? ELSE first_seen END WHERE id=?",
                    (now.isoformat(), until.isoformat(), detail[:500], lapsed, now.isoformat(),
                     row["id"]),
                )  # fmt: skip
            got = _row(
                conn.execute(
                    "SELECT * FROM evidence WHERE trigger=? AND subject=? AND source=?",
                    (trigger, subject, source),
                ).fetchone()
            )
        if new:
            self.audit.append(
                "evidence.observed", principal="system:watch", subject=subject, data=got.brief()
            )
        return got

    def all(self) -> list[Evidence]:
        with self.db.read() as conn:
            rows = conn.execute("SELECT * FROM evidence ORDER BY observed_at").fetchall()
        return [_row(r) for r in rows]

    def live(self, now: datetime | None = None) -> list[Evidence]:
        now = now or utcnow()
        return [e for e in self.all() if e.live(now)]

    def find(
        self, trigger: str, subjects: Iterable[str], now: datetime | None = None
    ) -> Evidence | None:
        """Live evidence of ``trigger`` about any of ``subjects`` (the latest sighting)."""
        trigger = canonical_trigger(trigger)
        wanted = set(subjects)
        found = [e for e in self.live(now) if e.trigger == trigger and e.subject in wanted]
        return max(found, key=lambda e: e.observed_at) if found else None

    def end(
        self,
        trigger: str,
        subject: str,
        *,
        reason: str,
        now: datetime | None = None,
        principal: str = "system:watch",
    ) -> list[Evidence]:
        """End every live sighting of ``trigger`` about ``subject`` now: a later observation
        contradicted it (``reason`` says which). Audited per row; returns the rows ended."""
        trigger = canonical_trigger(trigger)
        now = now or utcnow()
        with self.db.write() as conn:
            rows = [
                _row(r)
                for r in conn.execute(
                    "SELECT * FROM evidence WHERE trigger=? AND subject=?", (trigger, subject)
                ).fetchall()
            ]
            ended = [e for e in rows if e.live(now)]
            for e in ended:
                conn.execute("UPDATE evidence SET expires_at=? WHERE id=?", (now.isoformat(), e.id))
        out = [e.model_copy(update={"expires_at": now}) for e in ended]
        for e in out:
            self.audit.append(
                "evidence.ended", principal=principal, subject=subject,
                data={**e.brief(), "reason": reason[:300]},
            )  # fmt: skip
        return out

    def confirm(self, triggers: Iterable[str], subjects: Iterable[str]) -> list[Evidence]:
        """Ask the ``checker`` whether each live sighting of ``triggers`` about ``subjects``
        still holds, and end those it contradicts (before a grant is claimed on them).
        Returns the rows ended. Without a checker, nothing is asked."""
        if self.checker is None:
            return []
        wanted_t = {canonical_trigger(t) for t in triggers}
        wanted_s = set(subjects)
        ended: list[Evidence] = []
        for e in self.live():
            if e.trigger not in wanted_t or e.subject not in wanted_s:
                continue
            why = self.checker(e)
            if why is not None:
                ended += self.end(e.trigger, e.subject, reason=why, principal="system:claim")
        return ended

    def record_use(
        self, evidence: Evidence, *, plan_hash: str, grant_id: str, principal: str
    ) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO evidence_uses(evidence_id, plan_hash, grant_id, principal, ts) "
                "VALUES(?,?,?,?,?)",
                (evidence.id, plan_hash, grant_id, principal, utcnow().isoformat()),
            )

    def uses(self, plan_hash: str) -> list[Evidence]:
        """The evidence that let grants cover this plan (what the plan ran on)."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT e.* FROM evidence_uses u JOIN evidence e ON e.id = u.evidence_id "
                "WHERE u.plan_hash=? ORDER BY u.ts",
                (plan_hash,),
            ).fetchall()
        return [_row(r) for r in rows]
