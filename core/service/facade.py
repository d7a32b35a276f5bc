"""The service facade: the one object the CLI, the MCP server and the watch loop call.

Every mutating operation goes plan -> decide -> execute -> audit:
- ``plan`` asks the target's backend for a draft, adds the risk class and seals it with a
  stable hash; planning is read-only and always allowed;
- ``perform`` decides whether the plan may run for this principal (``core.guardrails``: policy, standing approvals, approvals), runs it
  step by step through the journaled executor, and appends every stage to the audit chain;
- ``recover`` finishes executions a killed clawpoint left half-done.

Inventory calls fan out to the configured backends. Nothing here knows about MCP or the CLI.
"""

from __future__ import annotations

import sqlite3

from core import logs
from core.backends.base import Backend
from core.config import Settings, ensure_dirs
from core.guardrails import schema as guard_schema
from core.guardrails.audit import AuditLog
from core.guardrails.dry_runs import DryRunAudit
from core.guardrails.guard import Guard
from core.model import Execution
from core.service import evidence_check
from core.service.acting import Acting
from core.service.executor import Executor
from core.service.inventory import ClusterStatus
from core.service.journal import Journal
from core.service.journal import release as release_execution
from core.service.launching import Launching
from core.service.moves import MoveLog
from core.service.outcomes import ActionResult, ClientAnswer, ClientAsker
from core.service.people import PeopleDesk
from core.service.planning import RawParams
from core.signals.nvml import ReportCache
from core.state.db import Database

__all__ = [
    "ActionResult",
    "ClientAnswer",
    "ClientAsker",
    "ClusterStatus",
    "RawParams",
    "Service",
    "bootstrap",
]

log = logs.get_logger("clawpoint.service")


class Service(PeopleDesk, Acting, Launching):
    """The facade: lookup and inventory (``inventory``), planning (``planning``), the perform
    path (``acting``), starting workloads (``launching``), approvals (``people``) and
    recovery (here), over one state database and the configured backends."""

    def __init__(
        self, settings: Settings, db: Database, backends: dict[str, Backend], *, guard: Guard
    ) -> None:
        self.settings = settings
        self.db = db
        self.backends = backends
        self.journal = Journal(db)
        self.executor = Executor(self.journal)
        self.audit = AuditLog(db)
        self.guard = guard
        self.moves = MoveLog(db)  # each workload's last move, for its SLA projection
        # A grant's claim asks whether the evidence it rests on still holds (the world now).
        guard.grants.evidence.checker = lambda seen: evidence_check.contradiction(self, seen)
        guard.situation = self.situation  # the approval message says what the world says
        self.dry_runs = DryRunAudit()  # which dry runs are audited (a per-principal budget)
        # This host's GPU report, shared by the read tools (core.service.insights.observe).
        self.gpu_reports = ReportCache()

    # ------------------------------------------------------------------ recovery
    def recover(self) -> list[Execution]:
        """Finish executions whose clawpoint process died mid-way: the one reconciliation.

        Every CLI command calls it once at start, the watch loop at the start of each pass
        and the MCP server periodically (``[recovery] every_s``), so an interrupted move is
        finished even when no person runs a command. Safe at any time and from several
        processes at once: only orphans are claimed (never an execution that a live process
        or a thread of this one drives), each by exactly one caller. A recovery that breaks
        unexpectedly is logged and released for the next pass; it never stops the caller.
        """
        done: list[Execution] = []
        for execution in self.journal.claim_orphans(backends=self.backends):
            try:
                plan = self.journal.get_plan(execution.plan_hash)
                backend = self.backends[plan.backend]
                log.warning(
                    "recovering interrupted execution",
                    execution=execution.id,
                    action=plan.action.value,
                )

                def audited(
                    conn: sqlite3.Connection, done: Execution, target: str = plan.target
                ) -> None:
                    self.audit.append_in(conn, "recovery", principal="system:recovery",
                                         subject=target,
                                         data={"execution": done.id, "status": done.status.value})  # fmt: skip

                # Audited in the transaction that finishes it: a recovery that dies right
                # after leaves no finished execution without its entry (none would add it).
                finished = self.executor.resume(execution, plan, backend, then=audited)
            except Exception:  # a periodic caller must survive; the next pass retries
                log.exception("recovery failed; will retry", execution=execution.id)
                release_execution(execution.id)
                continue
            done.append(finished)
        return done


def bootstrap(settings: Settings) -> Service:
    """Wire every enabled backend of the registry over one state database."""
    from core.backends import registry

    registry.sections(settings)  # a bad backend section: InvalidInput before anything is made
    ensure_dirs(settings)
    guard_schema.install()
    db = Database(settings.state_db, keep_open=True)  # see Database: no log rebuilt per call
    db.migrate()
    backends = registry.build(settings, db)
    guard = Guard.open(
        db,
        home=settings.home,
        policy=settings.policy,
        approvals=settings.approvals,
        notify=settings.notify,
    )
    return Service(settings, db, backends, guard=guard)
