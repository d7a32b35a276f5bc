"""The execution journal: one row per execution, one row per step, persisted as they happen.

The journal is what lets a restarted clawpoint finish or roll back an execution that was
interrupted (the process killed mid-migration): ``unfinished()`` lists executions still
marked running, and each step's recorded output feeds the steps after it.
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime
from typing import Any

from core import errors
from core.model import Execution, ExecutionStatus, Plan, StepRecord, utcnow
from core.state.db import Database, dumps, loads


class Journal:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save_plan(self, plan: Plan) -> None:
        with self.db.write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO plans(hash, body, created_at) VALUES(?, ?, ?)",
                (plan.hash, plan.model_dump_json(), plan.created_at.isoformat()),
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
            conn.execute(
                "INSERT INTO executions(id, plan_hash, action, target, status, principal, "
                "started_at, owner_pid) VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    execution.id,
                    plan.hash,
                    plan.action.value,
                    plan.target,
                    execution.status.value,
                    principal,
                    execution.started_at.isoformat(),
                    os.getpid(),
                ),
            )
            for idx, step in enumerate(plan.steps):
                conn.execute(
                    "INSERT INTO execution_steps(execution_id, idx, name, status) VALUES(?, ?, ?, ?)",
                    (execution.id, idx, step.name, "pending"),
                )
        return execution

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
    ) -> None:
        with self.db.write() as conn:
            conn.execute(
                "UPDATE executions SET status=?, finished_at=?, result=?, error=? WHERE id=?",
                (status.value, utcnow().isoformat(), dumps(result), error, execution_id),
            )

    def get(self, execution_id: str) -> Execution:
        with self.db.read() as conn:
            row = conn.execute("SELECT * FROM executions WHERE id=?", (execution_id,)).fetchone()
            if row is None:
                raise errors.NotFound(
                    f"no execution {execution_id}", hint="list executions with 'clawpoint audit'"
                )
            steps = conn.execute(
                "SELECT * FROM execution_steps WHERE execution_id=? ORDER BY idx", (execution_id,)
            ).fetchall()
        return Execution(
            id=row["id"],
            plan_hash=row["plan_hash"],
            action=row["action"],
            target=row["target"],
            status=ExecutionStatus(row["status"]),
            principal=row["principal"],
            started_at=datetime.fromisoformat(row["started_at"]),
            finished_at=datetime.fromisoformat(row["finished_at"]) if row["finished_at"] else None,
            result=loads(row["result"]) or {},
            error=row["error"],
            steps=[
                StepRecord(
                    name=s["name"],
                    status=s["status"],
                    started_at=datetime.fromisoformat(s["started_at"]) if s["started_at"] else None,
                    finished_at=datetime.fromisoformat(s["finished_at"])
                    if s["finished_at"]
                    else None,
                    output=loads(s["output"]) or {},
                    error=s["error"],
                )
                for s in steps
            ],
        )

    def claim_orphans(self) -> list[Execution]:
        """Running executions whose owning process is gone, now owned by this process.

        The claim is one conditional UPDATE, so two processes recovering at once never both
        resume the same execution, and an execution still driven by a live process is left
        alone.
        """
        claimed: list[str] = []
        with self.db.write() as conn:
            rows = conn.execute(
                "SELECT id, owner_pid FROM executions WHERE status='running'"
            ).fetchall()
            for row in rows:
                owner = row["owner_pid"]
                if owner is not None and owner != os.getpid() and _alive(owner):
                    continue
                cur = conn.execute(
                    "UPDATE executions SET owner_pid=? WHERE id=? AND status='running' "
                    "AND owner_pid IS ?",
                    (os.getpid(), row["id"], owner),
                )
                if cur.rowcount == 1:
                    claimed.append(row["id"])
        return [self.get(i) for i in claimed]

    def count_running(self, *, actions: set[str] | None = None) -> int:
        with self.db.read() as conn:
            rows = conn.execute("SELECT action FROM executions WHERE status='running'").fetchall()
        return sum(1 for r in rows if actions is None or r[0] in actions)

    def recent(self, *, limit: int = 50) -> list[Execution]:
        with self.db.read() as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM executions ORDER BY started_at DESC LIMIT ?", (limit,)
                )
            ]
        return [self.get(i) for i in ids]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
