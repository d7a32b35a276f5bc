"""The guardrails tables: the audit head, approvals, standing grants and their uses.

Registered as the ``guardrails`` component of ``core.state.db`` by ``install()`` (no work at
import time). Append only: a shipped script is never edited; changes go in a new script.
"""

from __future__ import annotations

from core.state.db import Database, register_migrations

GENESIS = "0" * 64

MIGRATIONS: list[str] = [
    f"""
    CREATE TABLE audit_head (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        seq INTEGER NOT NULL,
        hash TEXT NOT NULL
    );
    INSERT INTO audit_head(id, seq, hash)
        SELECT 1, COALESCE(MAX(seq), 0),
               COALESCE((SELECT hash FROM audit ORDER BY seq DESC LIMIT 1), '{GENESIS}')
        FROM audit;
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        plan_hash TEXT NOT NULL,
        plan TEXT NOT NULL,
        requester TEXT NOT NULL,
        requester_kind TEXT NOT NULL,
        reason TEXT NOT NULL,
        status TEXT NOT NULL,
        code_hash TEXT NOT NULL,
        failed_attempts INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        decided_by TEXT,
        decided_via TEXT,
        decided_at TEXT,
        note TEXT NOT NULL DEFAULT '',
        used_at TEXT,
        used_by TEXT
    );
    CREATE INDEX approvals_status ON approvals(status);
    CREATE TABLE grants (
        id TEXT PRIMARY KEY,
        action TEXT NOT NULL,
        scope TEXT NOT NULL,
        max_per_hour INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        expires_at TEXT NOT NULL,
        reason TEXT NOT NULL,
        granted_by TEXT NOT NULL,
        revoked_at TEXT,
        revoked_by TEXT
    );
    CREATE TABLE grant_uses (
        grant_id TEXT NOT NULL REFERENCES grants(id),
        ts TEXT NOT NULL,
        plan_hash TEXT NOT NULL,
        principal TEXT NOT NULL
    );
    CREATE INDEX grant_uses_grant_ts ON grant_uses(grant_id, ts);
    """,
    # Who may execute an approved plan ('requester': the requesting session only; 'agent':
    # any session of the requesting agent, a person's choice) and who may approve it
    # ('any' or 'out-of-band': never the agent's own client).
    """
    ALTER TABLE approvals ADD COLUMN executable_by TEXT NOT NULL DEFAULT 'requester';
    ALTER TABLE approvals ADD COLUMN needs TEXT NOT NULL DEFAULT 'any';
    """,
    # Approval floods: the action, target and session-free identity of each request as
    # columns (copied from the plan and the requester), so that "is the same request already
    # pending?", "how many are pending for this agent?" and a page of the list are index
    # lookups rather than scans that parse every stored plan.
    """
    ALTER TABLE approvals ADD COLUMN action TEXT NOT NULL DEFAULT '';
    ALTER TABLE approvals ADD COLUMN target TEXT NOT NULL DEFAULT '';
    ALTER TABLE approvals ADD COLUMN identity TEXT NOT NULL DEFAULT '';
    UPDATE approvals SET
        action = COALESCE(json_extract(plan, '$.action'), ''),
        target = COALESCE(json_extract(plan, '$.target'), ''),
        identity = CASE WHEN instr(requester, '/') > 0
                        THEN substr(requester, 1, instr(requester, '/') - 1)
                        ELSE requester END;
    DROP INDEX approvals_status;
    CREATE INDEX approvals_status_created ON approvals(status, created_at, id);
    CREATE INDEX approvals_status_expires ON approvals(status, expires_at);
    CREATE INDEX approvals_created ON approvals(created_at, id);
    CREATE INDEX approvals_pending_request ON approvals(requester, action, target)
        WHERE status = 'pending';
    CREATE INDEX approvals_pending_identity ON approvals(identity) WHERE status = 'pending';
    """,
    # The people's desk groups pending requests by target (``approval_queue.desk_ids``).
    """
    CREATE INDEX approvals_status_target ON approvals(status, target, created_at, id);
    """,
]


def install() -> None:
    """Register the guardrails migrations (idempotent); call at startup, before the DB opens."""
    register_migrations("guardrails", MIGRATIONS)


def ensure_schema(db: Database) -> None:
    """Make sure ``db`` has the guardrails tables, even if it was migrated before ``install()``."""
    install()
    if db.schema_versions().get("guardrails", 0) < len(MIGRATIONS):
        # The handle remembers it migrated; make it look again now that we registered.
        db._migrated = False
        db.migrate()
