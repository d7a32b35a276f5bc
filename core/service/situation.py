"""The situation around an approval request: what the world says about its workload now.

Gathers, for one plan, the ``Situation`` that ``core.guardrails.request_facts`` turns into
what a person reads: live notices about its nodes (evidence the watch observed itself), the
workload's node, last good checkpoint and start time, its SLA deadline and slack, and the
nodes it must not be sent back to (being reclaimed, drained, down). Also the cheap form for
lists (``notice_index``): one read of the live evidence shared by every row of a page.

Limits: a backend that cannot be read leaves those facts out (the request still shows, with
the plan's own words); nothing here is cached, so a detail page reads the world once per view.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from core import errors, logs
from core.guardrails.approvals import ApprovalView
from core.guardrails.desk import Outcome, unsafe_from
from core.guardrails.evidence import Evidence
from core.guardrails.request_facts import (
    NOTICE_TRIGGERS,
    Situation,
    human_duration,
    notice_deadline,
    notices_for,
)
from core.model import (
    CheckpointStatus,
    NodeHealth,
    Plan,
    WorkloadInfo,
    WorkloadState,
    utcnow,
)

if TYPE_CHECKING:
    from core.service.facade import Service

log = logs.get_logger(__name__)

_LIVE = (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING)


def live_notices(service: Service) -> list[Evidence]:
    """The live notice evidence (spot, maintenance), read once."""
    return [e for e in service.guard.grants.evidence.live() if e.trigger in NOTICE_TRIGGERS]


def deadlines(service: Service, live: list[Evidence]) -> dict[str, datetime | None]:
    """Target -> its deadline from the live notices: the noticed nodes themselves and the
    workloads running on them (one inventory read; a backend that cannot be read adds none)."""
    noticed = {e.subject: notice_deadline(e) for e in live}
    out: dict[str, datetime | None] = dict(noticed)
    if not noticed:
        return out
    for name in {n.partition(":")[0] for n in noticed}:
        try:
            workloads = service.workloads(name)
        except errors.ClawpointError:
            continue
        for w in workloads:
            node = f"{w.backend}:{w.node}" if w.node else None
            if node in noticed:
                out[w.id] = noticed[node]
    return out


def sla_deadlines(service: Service, targets: list[str]) -> dict[str, datetime]:
    """Workload target -> its SLA deadline (``clawpoint.io/deadline``), for the ``targets``
    that have one: one inventory read per backend among them; one that cannot be read adds
    none. The deadline, not the slack: the slack needs each workload's progress, which the
    request's own page reads."""
    from core.signals.sla import workload_deadline  # the SLA model: only with targets

    wanted = set(targets)
    out: dict[str, datetime] = {}
    for name in sorted({t.partition(":")[0] for t in wanted}):
        try:
            workloads = service.workloads(name)
        except errors.ClawpointError:
            continue
        for w in workloads:
            if w.id in wanted and w.state in _LIVE:
                deadline = workload_deadline(w)
                if deadline is not None:
                    out[w.id] = deadline
    return out


def outcome_of(service: Service, view: ApprovalView) -> Outcome:
    """After a decision: the plan's newest execution and where the workload stands now."""
    with service.db.read() as conn:
        row = conn.execute(
            "SELECT id FROM executions WHERE plan_hash=? ORDER BY started_at DESC LIMIT 1",
            (view.plan_hash,),
        ).fetchone()
    execution = service.journal.get(row["id"]) if row else None
    situation = situation_of(service, view.plan)
    now = ""
    if situation.workload:
        node = situation.node.partition(":")[2] if situation.node else "no node"
        now = f"{situation.workload} is {situation.state} on {node}"
        if situation.last_good_at is not None:
            age = human_duration((situation.now - situation.last_good_at).total_seconds())
            now += f"; newest good checkpoint {situation.last_good_checkpoint}, taken {age} ago"
        else:
            now += "; it has no good checkpoint"
    return Outcome(execution=execution, workload_now=now)


def situation_of(service: Service, plan: Plan, *, live: list[Evidence] | None = None) -> Situation:
    """The world around ``plan`` now; parts that cannot be read are left out."""
    now = utcnow()
    live = live_notices(service) if live is None else live
    situation = Situation(now=now, notices=notices_for(plan, live))
    situation.unsafe_nodes.update(unsafe_from(live))
    ref = plan.preconditions.workload or plan.target
    try:
        backend = service.backend(plan.backend)
        for node in backend.nodes():
            if node.health is NodeHealth.DOWN:
                situation.unsafe_nodes.setdefault(node.id, "down")
            elif not node.schedulable:
                situation.unsafe_nodes.setdefault(node.id, "drained (not taking work)")
        w = service.get_workload(ref)
    except errors.ClawpointError as exc:  # not a workload (a node plan), or unreadable now
        log.debug("request situation partly unknown", target=ref, error=str(exc))
        return situation
    situation.workload, situation.state = w.id, w.state.value
    situation.node = f"{w.backend}:{w.node}" if w.node else None
    situation.started_at = w.started_at
    try:
        good = [c for c in service.checkpoints(w.id) if c.status is CheckpointStatus.GOOD]
    except errors.ClawpointError:
        good = []
    if good:
        newest = max(good, key=lambda c: c.created_at)
        situation.last_good_checkpoint, situation.last_good_at = newest.id, newest.created_at
    if w.state in _LIVE:
        _add_sla(service, situation, w)
    return situation


def _add_sla(service: Service, situation: Situation, w: WorkloadInfo) -> None:
    """The workload's SLA deadline and slack, when it has one (progress is read once)."""
    from core.signals.sla import assess  # the SLA model: only needed for a live workload

    try:
        risk = assess(
            w,
            now=situation.now,
            progress=service.progress(w.backend, w.name),
            history=(),
        )
    except (errors.ClawpointError, ValueError, TypeError) as exc:
        log.debug("no SLA reading", error=str(exc))
        return
    if risk is not None:
        situation.sla_deadline, situation.sla_slack_s = risk.deadline, risk.slack_s
