"""The registry of workloads that run under the wrapper on this host (local backend).

The wrapper writes its own row (pid, socket, state) as the workload moves through its life;
the local backend reads rows and checks liveness. Rows are keyed by (backend, name): a
workload keeps its name (its checkpoint lineage) across migrations and failovers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from core import errors
from core.model import WorkloadInfo, WorkloadState, utcnow
from core.schema_base import Model
from core.state.db import Database, dumps, loads


class WorkloadRecord(Model):
    backend: str = "local"
    name: str
    node: str | None = None
    state: WorkloadState = WorkloadState.PENDING
    engine: str = "criu"
    pid: int | None = None  # the payload's host pid (root of its PID namespace)
    wrapper_pid: int | None = None
    socket: str | None = None
    command: list[str] = Field(default_factory=list)
    init: bool = False  # started under our init (RunSpec.init), again on every fresh start
    user_namespace: bool = False  # root's payload in a user namespace of its own (RunSpec)
    cwd: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    checkpoint_every: float | None = None
    # The interval is ``auto``: the wrapper re-times it (``checkpoint_every``: what it uses
    # now) and a restart of the workload is auto too, with its new node's hazard.
    checkpoint_auto: bool = False
    # Its limits (None: none), applied again on every start (``core.wrapper.cgroup_limits``).
    cpus: float | None = None
    memory_mb: int | None = None
    last_checkpoint: str | None = None
    exit_status: str | None = None
    message: str = ""
    started_at: datetime | None = None
    updated_at: datetime = Field(default_factory=utcnow)

    def to_info(self) -> WorkloadInfo:
        return WorkloadInfo(
            id=f"{self.backend}:{self.name}",
            backend=self.backend,
            name=self.name,
            state=self.state,
            node=self.node,
            engine=self.engine,
            pid=self.pid,
            labels=self.labels,
            started_at=self.started_at,
            # Full id (BACKEND:NAME@SEQ), as every output gives ids; the row keeps the
            # store's own id, which the wrapper and the store read.
            last_checkpoint=f"{self.backend}:{self.last_checkpoint}"
            if self.last_checkpoint
            else None,
            checkpoint_every=self.checkpoint_every,
            checkpoint_auto=self.checkpoint_auto,
            cpus=self.cpus,
            memory_mb=self.memory_mb,
            exit_status=self.exit_status,
            message=self.message,
        )


_COLUMNS = (
    "backend",
    "name",
    "node",
    "state",
    "engine",
    "pid",
    "wrapper_pid",
    "socket",
    "command",
    "init",
    "user_namespace",
    "cwd",
    "labels",
    "checkpoint_every",
    "checkpoint_auto",
    "cpus",
    "memory_mb",
    "last_checkpoint",
    "exit_status",
    "message",
    "started_at",
    "updated_at",
)


def _row_to_record(row: Any) -> WorkloadRecord:
    data = dict(row)
    data["command"] = loads(data["command"]) or []
    data["labels"] = loads(data["labels"]) or {}
    return WorkloadRecord.model_validate(data)


class WorkloadRegistry:
    def __init__(self, db: Database, backend: str = "local") -> None:
        self.db = db
        self.backend = backend

    def upsert(self, record: WorkloadRecord) -> None:
        record.updated_at = utcnow()
        values = record.model_dump(mode="json")
        values["command"] = dumps(record.command)
        values["labels"] = dumps(record.labels)
        cols = ", ".join(_COLUMNS)
        marks = ", ".join("?" for _ in _COLUMNS)
        updates = ", ".join(f"{c}=excluded.{c}" for c in _COLUMNS[2:])
        with self.db.write() as conn:
            conn.execute(
                f"INSERT INTO workloads({cols}) VALUES({marks}) "
                f"ON CONFLICT(backend, name) DO UPDATE SET {updates}",
                [values[c] for c in _COLUMNS],
            )

    def update(self, name: str, **fields: Any) -> WorkloadRecord:
        """Change some fields of an existing row atomically; returns the new record."""
        with self.db.write() as conn:
            row = conn.execute(
                "SELECT * FROM workloads WHERE backend=? AND name=?", (self.backend, name)
            ).fetchone()
            if row is None:
                raise errors.NotFound(
                    f"no workload {self.backend}:{name}",
                    hint=f"list them with {errors.step('list_workloads')}",
                )
            record = _row_to_record(row).model_copy(update=fields)
            record.updated_at = utcnow()
            values = record.model_dump(mode="json")
            values["command"] = dumps(record.command)
            values["labels"] = dumps(record.labels)
            sets = ", ".join(f"{c}=?" for c in _COLUMNS[2:])
            conn.execute(
                f"UPDATE workloads SET {sets} WHERE backend=? AND name=?",
                [values[c] for c in _COLUMNS[2:]] + [self.backend, name],
            )
        return record

    def get(self, name: str) -> WorkloadRecord | None:
        with self.db.read() as conn:
            row = conn.execute(
                "SELECT * FROM workloads WHERE backend=? AND name=?", (self.backend, name)
            ).fetchone()
        return _row_to_record(row) if row else None

    def require(self, name: str) -> WorkloadRecord:
        record = self.get(name)
        if record is None:
            raise errors.NotFound(
                f"no workload {self.backend}:{name}",
                hint=f"see the existing ids with {errors.step('list_workloads')}",
            )
        return record

    def list(self) -> list[WorkloadRecord]:
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT * FROM workloads WHERE backend=? ORDER BY name", (self.backend,)
            ).fetchall()
        return [_row_to_record(r) for r in rows]

    def delete(self, name: str) -> None:
        with self.db.write() as conn:
            conn.execute("DELETE FROM workloads WHERE backend=? AND name=?", (self.backend, name))
