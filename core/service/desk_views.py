"""The desk's read views for people: workloads, nodes, recent executions, the audit trail.

Each view is a page (``Paged``) of plain rows the approval page renders; nothing here knows
HTML or HTTP. Reads go through the service (inventory, journal, audit chain), a page at a
time: the workloads view reads checkpoints only for the rows on its page; executions and
the audit trail are paged in SQL (newest first).

Limits: the inventory is read whole and sorted by id before paging (backends list all
their workloads and nodes anyway); a backend that cannot be read is left out, its name
listed in ``unreadable``; ``audit verify`` walks the whole chain on each audit page view.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import Field

from core import errors, logs
from core.guardrails.audit import AuditEntry, AuditVerification
from core.guardrails.request_facts import human_duration, notice_deadline
from core.model import CheckpointStatus, Execution, NodeInfo, WorkloadInfo, utcnow
from core.schema_base import Model

if TYPE_CHECKING:
    from core.service.facade import Service

log = logs.get_logger(__name__)

VIEW_PAGE_SIZE = 25


class Paging(Model):
    total: int
    page: int
    pages: int
    size: int


class WorkloadRow(Model):
    id: str
    state: str
    node: str = ""
    last_good: str = ""  # checkpoint id; "" when none
    last_good_age: str = ""  # "4 min" ago
    labels: dict[str, str] = Field(default_factory=dict)


class NoticeRow(Model):
    source: str
    trigger: str
    deadline: datetime | None = None
    countdown: str = ""  # "reclaimed in 1 min 50 s", "time unknown", "overdue"


class NodeRow(Model):
    id: str
    health: str
    state: str
    drained: bool
    reason: str = ""
    workloads: int = 0
    notices: list[NoticeRow] = Field(default_factory=list)


class WorkloadsView(Model):
    rows: list[WorkloadRow]
    paging: Paging
    unreadable: list[str] = Field(default_factory=list)


class NodesView(Model):
    rows: list[NodeRow]
    paging: Paging
    unreadable: list[str] = Field(default_factory=list)


class ExecutionsView(Model):
    rows: list[Execution]
    paging: Paging


class AuditView(Model):
    verdict: AuditVerification
    rows: list[AuditEntry]
    paging: Paging


def paging(total: int, page: int, size: int = VIEW_PAGE_SIZE) -> Paging:
    """Clamp ``page`` into 1..pages (a page past the end shows the last)."""
    pages = max(1, -(-total // size))
    return Paging(total=total, page=max(1, min(page, pages)), pages=pages, size=size)


def _each_backend(service: Service, read: str) -> tuple[list[Any], list[str]]:
    found: list[Any] = []
    unreadable: list[str] = []
    for name in sorted(service.backends):
        try:
            found.extend(getattr(service.backends[name], read)())
        except errors.ClawpointError as exc:  # one backend down must not blank the view
            log.debug("desk view: backend unreadable", backend=name, error=str(exc))
            unreadable.append(name)
    return found, unreadable


def workloads_view(service: Service, page: int = 1) -> WorkloadsView:
    """Workloads by id: state, node, newest good checkpoint and its age, labels."""
    found: list[WorkloadInfo]
    found, unreadable = _each_backend(service, "workloads")
    found.sort(key=lambda w: w.id)
    p = paging(len(found), page)
    now = utcnow()
    rows = []
    for w in found[(p.page - 1) * p.size : p.page * p.size]:
        row = WorkloadRow(id=w.id, state=w.state.value, node=w.node or "", labels=w.labels)
        try:
            good = [c for c in service.checkpoints(w.id) if c.status is CheckpointStatus.GOOD]
        except errors.ClawpointError:
            good = []
        if good:
            newest = max(good, key=lambda c: c.created_at)
            row.last_good = newest.id
            row.last_good_age = human_duration((now - newest.created_at).total_seconds())
        rows.append(row)
    return WorkloadsView(rows=rows, paging=p, unreadable=unreadable)


def nodes_view(service: Service, page: int = 1) -> NodesView:
    """Nodes by id: health, drained or not (and why), live notices with their countdown."""
    from core.service.situation import live_notices

    found: list[NodeInfo]
    found, unreadable = _each_backend(service, "nodes")
    found.sort(key=lambda n: n.id)
    p = paging(len(found), page)
    live = live_notices(service)
    now = utcnow()
    rows = []
    for n in found[(p.page - 1) * p.size : p.page * p.size]:
        notices = []
        for ev in live:
            if ev.subject not in (n.id, f"{n.backend}:{n.name}"):
                continue
            deadline = notice_deadline(ev)
            if deadline is None:
                countdown = "time unknown"
            elif deadline <= now:
                countdown = "overdue"
            else:
                countdown = f"reclaimed in {human_duration((deadline - now).total_seconds())}"
            notices.append(
                NoticeRow(
                    source=ev.source, trigger=ev.trigger, deadline=deadline, countdown=countdown
                )
            )
        rows.append(
            NodeRow(
                id=n.id,
                health=n.health.value,
                state=n.state,
                drained=not n.schedulable,
                reason=n.reason,
                workloads=len(n.workloads),
                notices=notices,
            )
        )
    return NodesView(rows=rows, paging=p, unreadable=unreadable)


def executions_view(service: Service, page: int = 1) -> ExecutionsView:
    """Executions, newest first, with their steps, status and error."""
    with service.db.read() as conn:
        total = conn.execute("SELECT COUNT(*) FROM executions").fetchone()[0]
        p = paging(total, page)
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM executions ORDER BY started_at DESC, id DESC LIMIT ? OFFSET ?",
                (p.size, (p.page - 1) * p.size),
            )
        ]
    return ExecutionsView(rows=[service.journal.get(i) for i in ids], paging=p)


def audit_view(service: Service, page: int = 1) -> AuditView:
    """The audit chain, newest first, with ``audit verify``'s verdict on the whole chain."""
    verdict = service.audit.verify()
    p = paging(service.audit.count(), page)
    entries = service.audit.newest(limit=p.size, offset=(p.page - 1) * p.size)
    return AuditView(verdict=verdict, rows=entries, paging=p)
