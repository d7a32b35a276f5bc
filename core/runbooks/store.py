"""Persisted runbook runs: one row per run in the state database (component ``runbooks``).

A run holds everything the engine needs to continue it from another process: the runbook's
name and digest, the bound parameters, the principal who started it, the current step, each
finished step's output, what it waits for, and a short log of messages. Writes are
optimistic: ``save`` bumps a version and refuses (``Conflict``) when another process saved
the same run in between, so two ``continue`` calls can never both advance one run.

Limits: the row is JSON in one column (runs are small; steps record tool results, which can
hold a plan or an execution, a few KiB each). Runs are never deleted here.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from core import errors
from core.model import Principal, utcnow
from core.schema_base import Model
from core.state.db import Database, dumps, loads, register_migrations

__all__ = ["RunRecord", "RunStatus", "RunStore", "StepRecord", "Waiting"]

MIGRATIONS: list[str] = [
    """
    CREATE TABLE runbook_runs (
        id TEXT PRIMARY KEY,
        runbook TEXT NOT NULL,
        status TEXT NOT NULL,
        principal TEXT NOT NULL,
        version INTEGER NOT NULL,
        started_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        body TEXT NOT NULL
    );
    CREATE INDEX runbook_runs_status ON runbook_runs(status);
    CREATE INDEX runbook_runs_started ON runbook_runs(started_at);
    """
]
register_migrations("runbooks", MIGRATIONS)


# The deepest page a listing of runs skips to (CLI --offset, MCP list_runs' cursor): past
# SQLite's integer range its OFFSET fails outright.
MAX_OFFSET = 1_000_000


class RunStatus(StrEnum):
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    WAITING_ANSWER = "waiting_answer"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class StepRecord(Model):
    """One step as it ran: ``status`` is ok, skipped, error, started (an action in flight)."""

    id: str
    kind: str
    status: str
    output: Any = None
    error: str | None = None
    at: datetime = Field(default_factory=utcnow)


class Waiting(Model):
    """What a waiting run needs before it can go on."""

    step: str
    kind: str  # approval | confirm | answer
    since: datetime = Field(default_factory=utcnow)
    approval_id: str | None = None
    plan_hash: str | None = None
    how_to_approve: list[Any] = Field(default_factory=list)
    expires_at: str | None = None
    question: str | None = None
    choices: list[dict[str, str]] = Field(default_factory=list)
    message: str = ""


class RunRecord(Model):
    id: str
    runbook: str
    digest: str
    params: dict[str, Any]
    principal: Principal
    status: RunStatus = RunStatus.RUNNING
    current: str | None = None  # the step to run (or waiting at) next; None when finished
    dry_run: bool = False
    trigger: str | None = None
    started_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    steps: list[StepRecord] = Field(default_factory=list)
    waiting: Waiting | None = None
    messages: list[str] = Field(default_factory=list)
    error: str | None = None
    version: int = 0

    def outputs(self) -> dict[str, Any]:
        """``steps.ID`` values for references: the latest ok output of each step."""
        return {s.id: s.output for s in self.steps if s.status == "ok"}

    def last(self, step_id: str) -> StepRecord | None:
        for s in reversed(self.steps):
            if s.id == step_id:
                return s
        return None

    def record(self, step_id: str, kind: str, status: str, output: Any = None,
               error: str | None = None) -> None:  # fmt: skip
        self.steps = [s for s in self.steps if s.id != step_id]
        self.steps.append(StepRecord(id=step_id, kind=kind, status=status, output=output,
                                     error=error))  # fmt: skip

    def context(self) -> dict[str, Any]:
        """What ``{{...}}`` references resolve against."""
        return {
            "params": self.params,
            "steps": self.outputs(),
            "run": {
                "id": self.id,
                "runbook": self.runbook,
                "started_at": self.started_at.isoformat(),
                "dry_run": self.dry_run,
            },
        }


def new_run_id() -> str:
    return "run-" + secrets.token_hex(6)


class RunStore:
    """Runs in the ``runbook_runs`` table of the state database."""

    def __init__(self, db: Database) -> None:
        # The service migrated its database before this component may have been imported;
        # a fresh handle on the same file applies the missing ``runbooks`` migration.
        if "runbooks" not in db.schema_versions():
            Database(db.path).migrate()
        self.db = db

    def create(self, run: RunRecord) -> RunRecord:
        run = run.model_copy(update={"version": 1, "updated_at": utcnow()})
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO runbook_runs(id, runbook, status, principal, version, started_at, "
                "updated_at, body) VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                (run.id, run.runbook, run.status.value, str(run.principal), run.version,
                 run.started_at.isoformat(), run.updated_at.isoformat(),
                 dumps(run.model_dump(mode="json"))),
            )  # fmt: skip
        return run

    def save(self, run: RunRecord) -> RunRecord:
        """Persist ``run``; ``Conflict`` if someone else saved it since it was read."""
        new = run.model_copy(update={"version": run.version + 1, "updated_at": utcnow()})
        with self.db.write() as conn:
            cur = conn.execute(
                "UPDATE runbook_runs SET status=?, version=?, updated_at=?, body=? "
                "WHERE id=? AND version=?",
                (new.status.value, new.version, new.updated_at.isoformat(),
                 dumps(new.model_dump(mode="json")), run.id, run.version),
            )  # fmt: skip
            if cur.rowcount != 1:
                raise errors.Conflict(
                    f"runbook run {run.id} was changed by another call meanwhile",
                    hint=f"read it again with runbook_status {run.id}, then continue if needed",
                )
        return new

    def get(self, run_id: str) -> RunRecord:
        with self.db.read() as conn:
            row = conn.execute("SELECT body FROM runbook_runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            raise errors.NotFound(
                f"no runbook run {run_id!r}",
                hint=f"list runs with {errors.step('list_runs')}",
            )
        return RunRecord.model_validate(loads(row["body"]))

    def list(self, *, limit: int = 20, offset: int = 0, status: str | None = None,
             statuses: Sequence[str] = ()) -> list[RunRecord]:  # fmt: skip
        """Runs newest first; ``status``/``statuses`` filter, ``offset`` pages."""
        sql = "SELECT body FROM runbook_runs"
        wanted = [*statuses, *([status] if status else [])]
        if wanted:
            sql += f" WHERE status IN ({','.join('?' * len(wanted))})"
        sql += " ORDER BY started_at DESC, id LIMIT ? OFFSET ?"
        with self.db.read() as conn:
            rows = conn.execute(sql, (*wanted, limit, offset)).fetchall()
        return [RunRecord.model_validate(loads(r["body"])) for r in rows]
