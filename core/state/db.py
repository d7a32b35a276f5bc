"""SQLite state (WAL) shared by the CLI, the MCP server and every workload wrapper.

Several processes write at once (a wrapper records its workload's state while the CLI
journals an execution), so each operation has a connection of its own with a busy timeout
(opened for it, or reused by a long-lived handle, see ``Database``) and writes inside
``BEGIN IMMEDIATE``. Schema versioning is per component: each component
(``core``, ``guardrails``, ``runbooks``, ...) registers an ordered list of migrations and
``migrate()`` applies the missing ones, so capabilities can add tables without touching one
another's. Limits: one machine's file system (SQLite over NFS is not supported; on Slurm the
state lives on the host where clawpoint runs, checkpoint images on the shared filesystem).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from core import errors

# component -> ordered migrations (each a SQL script). Append only: never edit a shipped one.
MIGRATIONS: dict[str, list[str]] = {
    "core": [
        """
        CREATE TABLE workloads (
            backend TEXT NOT NULL,
            name TEXT NOT NULL,
            node TEXT,
            state TEXT NOT NULL,
            engine TEXT NOT NULL,
            pid INTEGER,
            wrapper_pid INTEGER,
            socket TEXT,
            command TEXT NOT NULL DEFAULT '[]',
            cwd TEXT,
            labels TEXT NOT NULL DEFAULT '{}',
            checkpoint_every REAL,
            last_checkpoint TEXT,
            exit_status TEXT,
            message TEXT NOT NULL DEFAULT '',
            started_at TEXT,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (backend, name)
        );
        CREATE TABLE plans (
            hash TEXT PRIMARY KEY,
            body TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE TABLE executions (
            id TEXT PRIMARY KEY,
            plan_hash TEXT NOT NULL,
            action TEXT NOT NULL,
            target TEXT NOT NULL,
            status TEXT NOT NULL,
            principal TEXT NOT NULL,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            result TEXT NOT NULL DEFAULT '{}',
            error TEXT
        );
        CREATE INDEX executions_status ON executions(status);
        CREATE TABLE execution_steps (
            execution_id TEXT NOT NULL REFERENCES executions(id),
            idx INTEGER NOT NULL,
            name TEXT NOT NULL,
            status TEXT NOT NULL,
            started_at TEXT,
            finished_at TEXT,
            output TEXT NOT NULL DEFAULT '{}',
            error TEXT,
            PRIMARY KEY (execution_id, idx)
        );
        CREATE TABLE audit (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            ts TEXT NOT NULL,
            kind TEXT NOT NULL,
            principal TEXT NOT NULL,
            subject TEXT NOT NULL,
            data TEXT NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL
        );
        """,
        # v2: which process runs an execution, so recovery never resumes a live one.
        "ALTER TABLE executions ADD COLUMN owner_pid INTEGER",
        # v3: the owner's start time, so a recycled pid is never taken for a live owner.
        "ALTER TABLE executions ADD COLUMN owner_start TEXT",
        # v4: a workload whose checkpoint interval is auto (its wrapper re-times it).
        "ALTER TABLE workloads ADD COLUMN checkpoint_auto INTEGER NOT NULL DEFAULT 0",
        # v5, v6: a workload's size, its limits on every start (``resize``).
        "ALTER TABLE workloads ADD COLUMN cpus REAL",
        "ALTER TABLE workloads ADD COLUMN memory_mb INTEGER",
        # v7: a workload started under clawpoint's init (``run --init``).
        "ALTER TABLE workloads ADD COLUMN init INTEGER NOT NULL DEFAULT 0",
        # v8: root's workload in a user namespace of its own (``run --user-namespace``).
        "ALTER TABLE workloads ADD COLUMN user_namespace INTEGER NOT NULL DEFAULT 0",
    ],
}


# Idle connections a ``keep_open`` handle keeps for reuse: as many as operations usually
# run at once in one process (the MCP server's worker threads); more are opened and closed.
IDLE_MAX = 8


def register_migrations(component: str, scripts: Sequence[str]) -> None:
    """Declare a component's migrations (idempotent; call before ``Database.migrate``)."""
    MIGRATIONS[component] = list(scripts)


class Database:
    """A handle on the state file; cheap to create, opens connections per operation.

    With ``keep_open`` (what long-lived processes such as the MCP server ask for) the
    handle also holds one idle connection for its own lifetime, opened by ``migrate``.
    SQLite checkpoints the write-ahead log and deletes it, with its shared-memory index,
    whenever the last connection to the file closes, and builds both again on the next
    open: with every operation opening and closing its own connection that was most of a
    read tool's database time (a write 2.2 ms instead of 0.2 ms, a read twice as slow).
    The idle connection runs no statement, so it holds no lock and no snapshot; the log is
    still checkpointed as it grows (SQLite's automatic checkpoint on commit).

    A ``keep_open`` handle also reuses the connections of finished operations (up to
    ``IDLE_MAX`` idle ones, each used by one operation at a time): opening one costs a
    ``connect`` and four pragmas, most of a read's database time (twelve statements per MCP
    read tool, nine of them pragmas). A connection goes back only when its operation left
    no transaction open; its statements are reset when their cursors are freed, so an idle
    one holds no snapshot either."""

    def __init__(self, path: Path, *, timeout_s: float = 30.0, keep_open: bool = False) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self.keep_open = keep_open
        self._keeper: sqlite3.Connection | None = None
        self._migrated = False
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._idle_lock = threading.Lock()

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=self.timeout_s, isolation_level=None, check_same_thread=False
            )
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
        except (sqlite3.Error, OSError) as exc:
            raise errors.OperationFailed(
                f"cannot open the state database {self.path}: {exc}",
                hint="check that CLAWPOINT_HOME is writable and not on a network filesystem",
            ) from exc
        return conn

    def _acquire(self) -> sqlite3.Connection:
        if self.keep_open:
            with self._idle_lock:
                if self._idle:
                    return self._idle.pop()
        return self._open()

    def _release(self, conn: sqlite3.Connection) -> None:
        """Back to the idle ones (``keep_open``, nothing left open), else closed."""
        if self.keep_open and not conn.in_transaction:
            with self._idle_lock:
                if len(self._idle) < IDLE_MAX:
                    self._idle.append(conn)
                    return
        conn.close()

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        self.migrate()
        conn = self._acquire()
        try:
            yield conn
        except sqlite3.Error as exc:
            raise errors.OperationFailed(
                f"state database error: {exc}", hint="run 'clawpoint config check'"
            ) from exc
        finally:
            self._release(conn)

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A transaction that holds the write lock from its first statement."""
        self.migrate()
        conn = self._acquire()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise errors.OperationFailed(
                f"state database error: {exc}",
                hint="retry; if it persists run 'clawpoint config check'",
            ) from exc
        finally:
            self._release(conn)

    def migrate(self) -> None:
        if self._migrated:
            return
        with self._lock:
            if self._migrated:
                return
            conn = self._open()
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_versions "
                    "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
                )
                for component, scripts in MIGRATIONS.items():
                    row = conn.execute(
                        "SELECT version FROM schema_versions WHERE component=?", (component,)
                    ).fetchone()
                    have = row[0] if row else 0
                    if have > len(scripts):
                        conn.execute("ROLLBACK")
                        raise errors.OperationFailed(
                            f"state database {self.path} has {component} schema v{have}, newer "
                            f"than this clawpoint knows (v{len(scripts)})",
                            hint="upgrade clawpoint, or point CLAWPOINT_HOME elsewhere",
                        )
                    for script in scripts[have:]:
                        for statement in _split_sql(script):
                            conn.execute(statement)
                    if len(scripts) > have:
                        conn.execute(
                            "INSERT INTO schema_versions(component, version) VALUES(?, ?) "
                            "ON CONFLICT(component) DO UPDATE SET version=excluded.version",
                            (component, len(scripts)),
                        )
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise errors.OperationFailed(
                    f"cannot migrate the state database {self.path}: {exc}",
                    hint="check the file is not corrupt (sqlite3 state.db 'PRAGMA integrity_check')",
                ) from exc
            finally:
                conn.close()
            if self.keep_open:
                self._keeper = self._open()
            self._migrated = True

    def schema_versions(self) -> dict[str, int]:
        with self.read() as conn:
            return {
                r[0]: r[1] for r in conn.execute("SELECT component, version FROM schema_versions")
            }


def _split_sql(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def loads(value: str | None) -> Any:
    return json.loads(value) if value else None


register_migrations(
    "local",
    [
        """
        CREATE TABLE local_nodes (
            name TEXT PRIMARY KEY,
            schedulable INTEGER NOT NULL DEFAULT 1,
            health TEXT NOT NULL DEFAULT 'healthy',
            reason TEXT NOT NULL DEFAULT '',
            updated_at TEXT NOT NULL
        );
        """,
        # A node a pool released (scale_pool down): not listed as a node until provisioned
        # again; the row keeps it, so a restart does not bring it back by itself.
        "ALTER TABLE local_nodes ADD COLUMN released INTEGER NOT NULL DEFAULT 0",
    ],
)
