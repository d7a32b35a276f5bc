"""Workload moves: the node a workload left and how fast it went there, and where and at
which step it started again, so its SLA projection holds across the move.

Before the progress it makes on its new node can be measured, the SLA signal would
otherwise keep the old node's rate (from the watch loop's sightings) or divide all its steps
by the time since the restore (``started_at`` is the restore time): either contradicts the
projection a migration's dry run showed. The service calls ``departure`` before it executes
a move (migrate, resume, restore, failover, requeue) and ``arrived`` once it succeeded; one
row per workload (``workload_moves``, component ``moves`` of the state database) keeps the
last move as ``core.signals.sla.Moved``, which ``core.signals.sla.estimate`` applies (the
old rate scaled by node speed, ``estimated``, until progress on the new node is seen).

Limits: bookkeeping only, and best effort: a workload or progress that cannot be read
records nothing, and a failure here never fails the move. Moves made outside clawpoint are
not seen. A workload that was not running when it moved (resume, failover) has no old rate.
Rows older than ``KEEP_S`` are dropped when a move is recorded.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from core import errors, logs
from core.model import Action, Plan, WorkloadState, utcnow
from core.schema_base import Model
from core.signals.sla import Moved, estimate, node_speed
from core.state.db import Database, register_migrations

if TYPE_CHECKING:
    from core.service.inventory import Inventory

log = logs.get_logger("clawpoint.moves")

MOVES = frozenset({Action.MIGRATE, Action.RESUME, Action.RESTORE, Action.FAILOVER, Action.REQUEUE})
KEEP_S = 7 * 86400.0

MIGRATIONS = [
    """
    CREATE TABLE workload_moves (
        workload TEXT PRIMARY KEY,
        at TEXT NOT NULL,
        node TEXT,
        step INTEGER,
        from_node TEXT,
        from_speed REAL NOT NULL DEFAULT 1.0,
        rate REAL
    );
    """,
]


def current_id(workload: str, outputs: list[dict[str, Any]]) -> str:
    """The id a workload has after a plan whose steps answered ``outputs``: the last that
    names a ``workload`` (a live Slurm move's new job, a pod's copy), else ``workload``."""
    return next((str(o["workload"]) for o in reversed(outputs) if o.get("workload")), workload)


def install() -> None:
    register_migrations("moves", MIGRATIONS)


install()


class Departure(Model):
    """What a move leaves behind: the workload, its node, that node's speed, its rate."""

    workload: str
    node: str | None = None
    speed: float = 1.0
    rate: float | None = None


def workload_of(plan: Plan) -> str:
    """The workload a move plan moves (a restore targets one of its checkpoints)."""
    return plan.target.split("@", 1)[0] if plan.action is Action.RESTORE else plan.target


class MoveLog:
    def __init__(self, db: Database) -> None:
        self.db = db
        install()
        if db.schema_versions().get("moves", 0) < len(MIGRATIONS):
            # The handle may have migrated before this module registered its table.
            db._migrated = False
            db.migrate()

    def all(self) -> dict[str, Moved]:
        """Workload id -> its last recorded move."""
        with self.db.read() as conn:
            rows = conn.execute("SELECT * FROM workload_moves").fetchall()
        return {
            r["workload"]: Moved(
                at=datetime.fromisoformat(r["at"]), node=r["node"], step=r["step"],
                from_node=r["from_node"], from_speed=r["from_speed"], rate=r["rate"],
            )
            for r in rows
        }  # fmt: skip

    def departure(self, service: Inventory, plan: Plan) -> Departure | None:
        """Where the workload of a move plan is now and how fast it goes (None: no move)."""
        if plan.action not in MOVES:
            return None
        wid = workload_of(plan)
        try:
            w = service.get_workload(wid)
            nodes = {n.name: n for n in service.nodes(w.backend)}
            speed = node_speed(nodes.get(w.node or ""))
            rate = None
            if w.state is WorkloadState.RUNNING:
                progress = service.progress(w.backend, w.name)
                rate = estimate(w, now=utcnow(), progress=progress,
                                moved=self.all().get(wid), speed=speed).rate  # fmt: skip
        except (errors.ClawpointError, sqlite3.Error, OSError) as exc:
            log.warning("move.departure_unknown", workload=wid, error=str(exc))
            return None
        return Departure(workload=wid, node=w.node, speed=speed, rate=rate)

    def arrived(
        self, service: Inventory, before: Departure | None, outputs: list[dict[str, Any]]
    ) -> None:
        """Record the move that just succeeded: where it runs now and from which step.
        ``outputs``: its steps' outputs; the last that names a ``workload`` says its id now
        (a live Slurm move's new job, a pod's copy), else it kept its id."""
        if before is None:
            return
        now_as = current_id(before.workload, outputs)
        try:
            w = service.get_workload(now_as)
            if w.state is not WorkloadState.RUNNING or not w.node:
                return  # requeued and waiting, or stopped: nothing runs anywhere yet
            progress = service.progress(w.backend, w.name)
            now = utcnow()
            with self.db.write() as conn:
                conn.execute(
                    "INSERT OR REPLACE INTO workload_moves(workload, at, node, step, from_node, "
                    "from_speed, rate) VALUES(?,?,?,?,?,?,?)",
                    (now_as, now.isoformat(), w.node,
                     progress.step if progress else None, before.node, before.speed,
                     before.rate),
                )  # fmt: skip
                cutoff = (now - timedelta(seconds=KEEP_S)).isoformat()
                conn.execute("DELETE FROM workload_moves WHERE at < ?", (cutoff,))
        except (errors.ClawpointError, sqlite3.Error, OSError) as exc:
            log.warning("move.not_recorded", workload=now_as, error=str(exc))
