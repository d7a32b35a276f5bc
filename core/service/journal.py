"""The execution journal: one row per execution, one row per step, persisted as they happen.

The journal is what lets clawpoint finish or roll back an execution that was interrupted
(the process killed mid-migration): each step's recorded output feeds the steps after it,
and ``claim_orphans`` hands over executions still marked running whose owner is gone.

An execution is *in flight* while its owner drives it: for another process, that process
is alive and is the same process (its start time, so a recycled pid is not mistaken for
the owner); for this process, the execution is in the in-process set of executions it
drives (``start`` adds, ``finish`` removes), so a long-running server can reconcile
periodically without claiming what its own threads are running. Only in-flight executions
count against the concurrency and blast-radius limits. Limits: liveness is judged on this
machine (the state file is local, see ``core.state.db``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

from core import errors, processes
from core.model import (
    STORED_CONTEXT,
    Action,
    Execution,
    ExecutionStatus,
    Plan,
    PrincipalKind,
    StepRecord,
    utcnow,
)
from core.state.db import Database, dumps, loads

# Runs inside the transaction that finishes an execution, given the finished execution.
OnFinish = Callable[[sqlite3.Connection, Execution], object]

# Executions this process is driving right now (ids). Process-wide: several Service objects
# in one process share the same pid, so they must share this set too.
_DRIVING: set[str] = set()
_DRIVING_LOCK = threading.Lock()


def _drive(execution_id: str) -> None:
    with _DRIVING_LOCK:
        _DRIVING.add(execution_id)


def release(execution_id: str) -> None:
    """This process no longer drives ``execution_id`` (finished, or given up for a later pass)."""
    with _DRIVING_LOCK:
        _DRIVING.discard(execution_id)


def _driving(execution_id: str) -> bool:
    with _DRIVING_LOCK:
        return execution_id in _DRIVING


def process_start(pid: int) -> str | None:
    """The start time of process ``pid`` as the journal stores it (text), None when unknown.

    Together with the pid it names one process: a pid reused after its owner died gets a
    different start time (``core.processes``)."""
    start = processes.start_time(pid)
    return None if start is None else str(start)


def owner_alive(execution_id: str, pid: int | None, start: str | None) -> bool:
    """Whether the recorded owner of a running execution still drives it (see module doc)."""
    if pid is None:
        return False
    if pid == os.getpid() and (start is None or start == process_start(pid)):
        return _driving(execution_id)
    if not processes.alive(pid):
        return False
    return start is None or process_start(pid) in (None, start)


class Journal:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save_plan(self, plan: Plan) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO plans(hash, body, created_at) VALUES(?, ?, ?)",
                (
                    plan.hash,
                    plan.model_dump_json(context=STORED_CONTEXT),
                    plan.created_at.isoformat(),
                ),
            )

    def get_plan(self, plan_hash: str) -> Plan:
        with self.db.read() as conn:
            row = conn.execute("SELECT body FROM plans WHERE hash=?", (plan_hash,)).fetchone()
        if row is None:
            raise errors.NotFound(
                f"no plan with hash {plan_hash}", hint="create the plan again with a plan tool"
            )
        return Plan.model_validate_json(row["body"])

    def start(self, plan: Plan, principal: str) -> Execution:
        execution = Execution(
            id=f"ex-{uuid.uuid4().hex[:12]}",
            plan_hash=plan.hash,
            action=plan.action,
            target=plan.target,
            status=ExecutionStatus.RUNNING,
            principal=principal,
            started_at=utcnow(),
            steps=[StepRecord(name=s.name, status="pending") for s in plan.steps],
        )
        with self.db.write() as conn:
            if not overrides_lease(plan, principal):
                self._lease(conn, plan)
            conn.execute(
                "INSERT INTO executions(id, plan_hash, action, target, status, principal, "
                "started_at, owner_pid, owner_start) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    execution.id,
                    plan.hash,
                    plan.action.value,
                    plan.target,
                    execution.status.value,
                    principal,
                    execution.started_at.isoformat(),
                    os.getpid(),
                    process_start(os.getpid()),
                ),
            )
            for idx, step in enumerate(plan.steps):
                conn.execute(
                    "INSERT INTO execution_steps(execution_id, idx, name, status) VALUES(?, ?, ?, ?)",
                    (execution.id, idx, step.name, "pending"),
                )
            _drive(execution.id)
        return execution

    def check_lease(self, plan: Plan) -> None:
        """Raise the lease's Conflict now, without starting anything: used before a person's
        approval is spent, so a plan that cannot start yet keeps its approval unused.
        ``start`` checks again inside its transaction (the check that really decides)."""
        with self.db.read() as conn:
            self._lease(conn, plan)

    def _lease(self, conn: sqlite3.Connection, plan: Plan) -> None:
        """A lease per workload: refuse ``plan`` while another execution still marked running
        touches one of its workloads (its target, or a workload in its scope: a drain holds
        every workload it moves). Checked in the transaction that inserts the execution, so
        of two processes racing on one workload exactly one starts; the other gets Conflict
        before anything changes. An orphan (owner dead) keeps its lease until recovery
        finishes it, since its remaining steps would fight the new plan. A person's kill
        takes no lease (``overrides_lease``)."""
        mine = touched(plan)
        rows = conn.execute(
            "SELECT e.id, e.action, e.target, p.body FROM executions e "
            "JOIN plans p ON p.hash = e.plan_hash WHERE e.status='running'"
        ).fetchall()
        for row in rows:
            other = touched(Plan.model_validate_json(row["body"]))
            shared = sorted(mine & other)
            if shared:
                raise errors.Conflict(
                    f"{shared[0]} is already being changed by execution {row['id']} "
                    f"({row['action']} {row['target']})",
                    hint="wait for it to finish (the audit log (resource clawpoint://audit/recent, or 'clawpoint audit') shows it), then plan again",
                )

    def step_started(self, execution_id: str, idx: int) -> datetime:
        now = utcnow()
        with self.db.write() as conn:
            conn.execute(
                "UPDATE execution_steps SET status='started', started_at=? "
                "WHERE execution_id=? AND idx=?",
                (now.isoformat(), execution_id, idx),
            )
        return now

    def step_finished(
        self,
        execution_id: str,
        idx: int,
        *,
        status: str,
        output: dict[str, Any],
        error: str | None = None,
    ) -> None:
        with self.db.write() as conn:
            conn.execute(
                "UPDATE execution_steps SET status=?, finished_at=?, output=?, error=? "
                "WHERE execution_id=? AND idx=?",
                (status, utcnow().isoformat(), dumps(output), error, execution_id, idx),
            )

    def finish(
        self,
        execution_id: str,
        *,
        status: ExecutionStatus,
        result: dict[str, Any],
        error: str | None = None,
        then: OnFinish | None = None,
    ) -> None:
        """Mark the execution finished. ``then`` runs in the same transaction with the
        finished execution (the caller's audit entry): a process that dies right after
        leaves both written or neither, never a finished execution nobody audited."""
        with self.db.write() as conn:
            conn.execute(
                "UPDATE executions SET status=?, finished_at=?, result=?, error=? WHERE id=?",
                (status.value, utcnow().isoformat(), dumps(result), error, execution_id),
            )
            if then is not None:
                then(conn, self._get(conn, execution_id))
        release(execution_id)

    def get(self, execution_id: str) -> Execution:
        with self.db.read() as conn:
            return self._get(conn, execution_id)

    def _get(self, conn: sqlite3.Connection, execution_id: str) -> Execution:
        row = conn.execute("SELECT * FROM executions WHERE id=?", (execution_id,)).fetchone()
        if row is None:
            raise errors.NotFound(
                f"no execution {execution_id}",
                hint="executions are in the audit log (resource clawpoint://audit/recent, or 'clawpoint audit')",
            )
        steps = conn.execute(
            "SELECT * FROM execution_steps WHERE execution_id=? ORDER BY idx", (execution_id,)
        ).fetchall()
        result = loads(row["result"]) or {}
        return Execution(
            id=row["id"],
            plan_hash=row["plan_hash"],
            action=row["action"],
            target=row["target"],
            status=ExecutionStatus(row["status"]),
            principal=row["principal"],
            started_at=datetime.fromisoformat(row["started_at"]),
            finished_at=datetime.fromisoformat(row["finished_at"]) if row["finished_at"] else None,
            result=_with_rendered_error(result),
            result_error_neutral=result.get("error")
            if isinstance(result.get("error"), dict)
            else None,
            error=_rendered(row["error"]),
            error_neutral=row["error"],
            steps=[
                StepRecord(
                    name=s["name"],
                    status=s["status"],
                    started_at=datetime.fromisoformat(s["started_at"]) if s["started_at"] else None,
                    finished_at=datetime.fromisoformat(s["finished_at"])
                    if s["finished_at"]
                    else None,
                    output=loads(s["output"]) or {},
                    error=_rendered(s["error"]),
                    error_neutral=s["error"],
                )
                for s in steps
            ],
        )

    def claim_orphans(self, *, backends: Collection[str] | None = None) -> list[Execution]:
        """Running executions whose owner is gone (see ``owner_alive``), now driven by this
        process; only those on ``backends`` when given (a process never claims what it
        cannot finish, or it would hide the orphan from one that can).

        The claim is one conditional UPDATE, so two processes recovering at once never both
        resume the same execution, and an execution still driven by a live owner (another
        process, or a thread of this one) is left alone.
        """
        claimed: list[str] = []
        me, my_start = os.getpid(), process_start(os.getpid())
        with self.db.write() as conn:
            rows = conn.execute(
                "SELECT id, target, owner_pid, owner_start FROM executions WHERE status='running'"
            ).fetchall()
            for row in rows:
                if backends is not None and row["target"].partition(":")[0] not in backends:
                    continue
                if owner_alive(row["id"], row["owner_pid"], row["owner_start"]):
                    continue
                cur = conn.execute(
                    "UPDATE executions SET owner_pid=?, owner_start=? WHERE id=? "
                    "AND status='running' AND owner_pid IS ? AND owner_start IS ?",
                    (me, my_start, row["id"], row["owner_pid"], row["owner_start"]),
                )
                if cur.rowcount == 1:
                    claimed.append(row["id"])
                    _drive(row["id"])
        return [self.get(i) for i in claimed]

    def in_flight(self, conn: sqlite3.Connection | None = None) -> list[tuple[str, str]]:
        """(execution id, plan hash) of every running execution whose owner still drives it.

        An orphan (owner dead, not yet recovered) is not in flight: it must not hold a slot
        of the concurrency or blast-radius limits while nobody works on it."""
        if conn is None:
            with self.db.read() as own:
                return self.in_flight(own)
        rows = conn.execute(
            "SELECT id, plan_hash, owner_pid, owner_start FROM executions WHERE status='running'"
        ).fetchall()
        return [
            (r["id"], r["plan_hash"])
            for r in rows
            if owner_alive(r["id"], r["owner_pid"], r["owner_start"])
        ]

    def count_running(self, *, actions: set[str] | None = None) -> int:
        """Executions in flight (see ``in_flight``), optionally only of these actions."""
        with self.db.read() as conn:
            flying = {i for i, _ in self.in_flight(conn)}
            rows = conn.execute("SELECT id, action FROM executions WHERE status='running'")
            return sum(1 for r in rows if r[0] in flying and (actions is None or r[1] in actions))

    def recent(self, *, limit: int = 50) -> list[Execution]:
        with self.db.read() as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM executions ORDER BY started_at DESC LIMIT ?", (limit,)
                )
            ]
        return [self.get(i) for i in ids]


def overrides_lease(plan: Plan, principal: str) -> bool:
    """A person's kill stops a workload whatever else is changing it: the way out of a move
    stuck in a hung dump. The other execution's next step then meets a workload that is gone
    and fails (a first step that fails undoes nothing; later ones restart nothing killed)."""
    return plan.action is Action.KILL and principal.startswith(f"{PrincipalKind.PERSON.value}:")


def touched(plan: Plan) -> set[str]:
    """The workloads a plan changes: its target and the workloads in its scope."""
    return {plan.target, *(plan.scope.workloads or [])}


def _rendered(text: str | None) -> str | None:
    """An error as recorded (next steps neutral, ``core.errors``), named as tools: what every
    reader but the command line shows (it re-renders ``error_neutral``)."""
    return errors.render(text) if text else text


def _with_rendered_error(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with its ``error`` record (``ClawpointError.to_dict``) rendered as tools."""
    error = result.get("error")
    if not isinstance(error, dict):
        return result
    said = {k: _rendered(v) if k in ("message", "hint") and isinstance(v, str) else v
            for k, v in error.items()}  # fmt: skip
    return {**result, "error": said}
