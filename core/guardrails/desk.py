"""The people's desk: pending requests grouped by workload, the most urgent first, a page at
a time, each with the facts a person weighs (``core.guardrails.request_facts``).

Order: the targets with a deadline from the evidence (a notice on their node, or the
workload's SLA deadline), soonest first; then every other target by name; within a target,
newest first. A page holds
``size`` requests; a target whose requests continue on the next page says how many wait in
all. Built over the approval store with the deadlines the service read once per page
(``core.service.situation.deadlines``), so 20,000 pending cost one sort of ids and ``size``
plans parsed. Limits: page numbers (offsets), so a request decided meanwhile shifts the
later pages by one; an SLA deadline orders the list by the deadline itself (the slack, which
needs the workload's progress, shows on the request's own page).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import Field

from core.guardrails.approvals import ApprovalStatus, ApprovalStore
from core.guardrails.evidence import Evidence
from core.guardrails.request_facts import (
    RequestFacts,
    Situation,
    notice_deadline,
    notices_for,
    request_facts,
)
from core.model import Execution, utcnow
from core.schema_base import Model

PAGE_SIZE = 25  # requests per page: a phone screen or two
MAX_PAGE_SIZE = 100


class DeskGroup(Model):
    """The requests of one target on this page."""

    target: str
    waiting: int  # pending for this target in all (this page may show fewer)
    deadline_at: datetime | None = None
    deadline: str = ""
    requests: list[RequestFacts] = Field(default_factory=list)


class DeskPage(Model):
    groups: list[DeskGroup]
    total: int  # pending in all
    page: int
    pages: int
    size: int


class Outcome(Model):
    """What happened after a decision: the execution (None: not run yet) and the workload
    as the backend reads it now."""

    execution: Execution | None = None
    workload_now: str = ""


def unsafe_from(live: Sequence[Evidence]) -> dict[str, str]:
    """Nodes with a live notice: never an undo's destination."""
    out: dict[str, str] = {}
    for e in live:
        deadline = notice_deadline(e)
        when = f" at {deadline:%H:%M:%S} UTC" if deadline else ""
        out.setdefault(e.subject, f"being reclaimed ({e.source} notice{when})")
    return out


def desk_page(
    store: ApprovalStore,
    *,
    live: Sequence[Evidence] = (),
    deadlines: dict[str, datetime | None] | None = None,
    sla: dict[str, datetime] | None = None,
    page: int = 1,
    size: int = PAGE_SIZE,
) -> DeskPage:
    """Page ``page`` (from 1) of the pending requests. ``live``: the live notices;
    ``deadlines``: target -> its deadline from them (None: a notice without a time);
    ``sla``: workload target -> its SLA deadline."""
    sla = sla or {}
    far = datetime.max.replace(tzinfo=utcnow().tzinfo)
    soonest: dict[str, datetime] = {}
    for target in {*(deadlines or {}), *sla}:
        noticed = (deadlines or {}).get(target) or far
        soonest[target] = min(noticed, sla.get(target, far))
    size = max(1, min(size, MAX_PAGE_SIZE))
    first = sorted(soonest, key=lambda t: (soonest[t], t))
    total = store.count(status=ApprovalStatus.PENDING)
    pages = max(1, -(-total // size))
    page = max(1, min(page, pages))
    views, waiting = store.desk(first=first, limit=size, offset=(page - 1) * size)
    now = utcnow()
    unsafe = unsafe_from(live)
    groups: list[DeskGroup] = []
    for view in views:
        situation = Situation(now=now, notices=notices_for(view.plan, list(live)),
                              unsafe_nodes=unsafe, sla_deadline=sla.get(view.target))  # fmt: skip
        facts = request_facts(view, situation)
        if not groups or groups[-1].target != view.target:
            groups.append(
                DeskGroup(
                    target=view.target,
                    waiting=waiting.get(view.target, 1),
                    deadline_at=facts.deadline_at,
                    deadline=facts.deadline if facts.urgent else "",
                )
            )
        groups[-1].requests.append(facts)
    return DeskPage(groups=groups, total=total, page=page, pages=pages, size=size)
