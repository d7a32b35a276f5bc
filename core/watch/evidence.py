"""What a watch pass records as evidence for trigger-scoped grants, and what it ends.

A standing grant scoped to a trigger applies only to plans about a subject with live evidence
of that trigger (``core.guardrails.evidence``). A pass records what it observed itself: a
cloud notice (``spot-interruption``, and ``maintenance`` for planned ones), a failed GPU, a
node down, and the planner's own readings for their targets; and it ends the evidence it saw
contradicted (a node up, its GPUs healthy, this host's notice gone: ``evidence_check``).

Limits: only a positive observation ends evidence (a source that does not answer ends
nothing); notices are ended for this host only, another node's expire.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from core.guardrails.evidence import NOTICE_GRACE_S, EvidenceStore
from core.model import NodeHealth
from core.service import evidence_check
from core.service.insights import PlanReport
from core.signals.cloud import ProviderStatus
from core.signals.model import GpuHealth, GpuVerdict, InterruptionAction
from core.signals.nodes import node_health
from core.watch.report import WatchReport

# Notice actions that are planned maintenance rather than a spot reclaim (also recorded
# as "spot-interruption", the trigger the planner gives every notice).
_MAINTENANCE = frozenset(
    {InterruptionAction.REBOOT, InterruptionAction.REDEPLOY, InterruptionAction.FREEZE,
     InterruptionAction.DRAIN}
)  # fmt: skip
# Triggers whose evidence is the raw sighting of a node's signal (recorded per node).
SIGNAL_TRIGGERS = frozenset({"spot-interruption", "maintenance", "gpu-failure", "node-down"})


def record_evidence(
    evidence: EvidenceStore,
    report: WatchReport,
    *,
    now: datetime,
    ids: dict[str, str],
    nodes: Sequence[Any],
    gpus: Sequence[GpuHealth],
    plans: PlanReport,
    providers: Sequence[ProviderStatus] = (),
    here: str | None = None,
) -> None:
    """What this pass observed itself becomes evidence for trigger-scoped grants; what it
    observed to the contrary ends earlier evidence (only a positive observation does)."""

    def put(trigger: str, subject: str, source: str, until: datetime | None, detail: str) -> None:
        got = evidence.record(trigger, subject, source=source, observed_at=now, expires_at=until,
                              detail=detail)  # fmt: skip
        report.evidence.append(got.brief())

    for n in report.notices:
        raw = n.node or n.subject or ""
        if not raw:
            continue
        subject = ids.get(raw, raw)
        until = n.deadline + timedelta(seconds=NOTICE_GRACE_S) if n.deadline else None
        what = f"{n.provider.value} {n.action.value}" + (
            f" at {n.deadline:%H:%M:%S} UTC" if n.deadline else ""
        )
        put("spot-interruption", subject, n.source, until, what)
        if n.action in _MAINTENANCE:
            put("maintenance", subject, n.source, until, what)
    for g in gpus:
        raw = g.node or g.subject or ""
        if g.verdict is GpuVerdict.FAILED and raw:
            put("gpu-failure", ids.get(raw, raw), g.source, None,
                f"GPU {g.index}: {'; '.join(g.reasons)[:200]}")  # fmt: skip
    for node in nodes:
        h = node_health(node, observed_at=now)
        if h.health is NodeHealth.DOWN:
            put("node-down", node.id, h.source, None, "; ".join(h.reasons)[:200])
    _end_contradicted(evidence, report, now=now, nodes=nodes, gpus=gpus, providers=providers,
                      here=here)  # fmt: skip
    for p in plans.proposals:
        # The planner's own readings (SLA, queue, cost): evidence for its target only. Its
        # notice, GPU and node proposals rest on the sightings above, which expire with them.
        if p.trigger not in SIGNAL_TRIGGERS:
            put(p.trigger, p.target, "watch:planner", None, p.reason[:200])


def _end_contradicted(
    evidence: EvidenceStore,
    report: WatchReport,
    *,
    now: datetime,
    nodes: Sequence[Any],
    gpus: Sequence[GpuHealth],
    providers: Sequence[ProviderStatus],
    here: str | None,
) -> None:
    """End the live evidence this pass saw contradicted: a node not down, a node whose GPUs
    all read healthy, this host's notice gone while a provider answered."""
    live = evidence.live(now)

    def end(trigger: str, subject: str, why: str | None) -> None:
        if why is None or not any(e.trigger == trigger and e.subject == subject for e in live):
            return
        for e in evidence.end(trigger, subject, reason=why, now=now):
            report.ended.append({**e.brief(), "reason": why})

    for node in nodes:
        end("node-down", node.id, evidence_check.node_is_up(node))
    for subject in {e.subject for e in live if e.trigger == "gpu-failure"}:
        end("gpu-failure", subject, evidence_check.gpus_are_healthy(subject, gpus))
    # The metadata endpoints speak for this host only: another node's notice is left to
    # expire (or to that node's own watch).
    for trigger in evidence_check.NOTICE_TRIGGERS:
        for subject in {e.subject for e in live if e.trigger == trigger}:
            if evidence_check.same_node(here, subject):
                end(trigger, subject,
                    evidence_check.notice_is_gone(subject, report.notices, providers))  # fmt: skip
