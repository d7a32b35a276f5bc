"""The watch pass: the heartbeat that polls, acts under standing approvals, and says what is new.

``watch_once`` runs one pass; ``watch`` runs the same pass every interval. A pass:

0. reconciles (``Service.recover``): finishes executions whose process died;
1. collects signals: cloud interruption notices (``NoticePoller``, when a provider is
   enabled in ``settings.signals``), GPU health (``NvmlMonitor``, when
   ``signals.nvml.enabled``), node health, SLA risk (progress history from ``WatchState``)
   and queue depth; and guards unsaved work (``core.service.disruption``: Karpenter's
   ``do-not-disrupt`` on pods whose newest checkpoint is stale, removed once fresh; audited
   per change, no plan: it only ever asks the cluster to wait);
2. records what it observed as evidence (``core.guardrails.evidence``): a grant scoped to a
   trigger applies only to plans about a node or workload with live evidence of it; and
   ends the evidence this pass contradicts (the node up again, a provider answering with no
   notice, the GPUs healthy: ``core.service.evidence_check``);
3. plans (``core.service.insights.propose``) and, for each proposal not already asked for,
   calls ``service.act(..., principal=SCHEDULER, trigger=...)``: a standing grant backed by
   evidence runs it, otherwise an approval is requested and people are notified;
4. withdraws its own pending approvals that went stale (the plan's preconditions no longer
   hold, or the evidence of its trigger expired), audited with the reason;
5. advances runbook runs whose gate or question timed out (``Engine.advance_due``);
6. reports findings, including what it cannot fix: an SLA at risk with no proposal, a dead
   workload on a degraded node nobody fails over, approvals still pending (with their ids).

Findings (``Finding``) have a level: ``acted`` (it did something), ``attention`` (a person or
an agent is needed) or ``error``. Events (an action, a recovery, a withdrawal, a runbook
step) are new by nature; conditions (a pending approval, an unfixable risk, a failing
signal source) are new the first pass they appear, when their content changes, and again
every ``remind_s`` while they last (``WatchState.seen``). Only new findings are printed.

Exit codes (``WatchReport.exit_code``), distinct from the CLI's general codes: 0 nothing
needs anyone; 20 something needs a person or an agent (an approval waiting, a risk watch
cannot fix); 21 it acted this pass (executed, recovered, withdrew, advanced a run); 1 an
error this pass (a signal source, an action or a recovery failed). Several: 1, then 21,
then 20. The code describes this pass; the printed lines only what is new.

What a pass records as evidence is ``core.watch.evidence``'s; its report, findings and exit
code ``core.watch.report``'s.

Limits: one pass acts sequentially, most urgent first; a notice 120 s out leaves time for
a few checkpoints of moderate size, not dozens. Reaction latency is at most one poll
interval plus the time of the proposals ranked before it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from core import errors, logs
from core.backends.base import ProgressSource
from core.guardrails.approvals import ApprovalStatus
from core.guardrails.evidence import EvidenceStore, plan_subjects
from core.model import Principal, PrincipalKind, utcnow
from core.planner.planner import PlannerConfig, Proposal
from core.service import insights
from core.service.disruption import guard_unsaved_work
from core.service.facade import Service
from core.service.insights import PlanReport, propose
from core.signals.cloud import NoticePoller, ProviderStatus
from core.signals.model import GpuHealth
from core.signals.nvml import NvmlMonitor
from core.watch.evidence import record_evidence
from core.watch.interruptions import record_interruptions
from core.watch.report import APPROVAL_FINDINGS, WatchAction, WatchReport, Withdrawn, add_findings
from core.watch.state import Request, WatchState

log = logs.get_logger("clawpoint.watch")

SCHEDULER = Principal(id="watch", kind=PrincipalKind.SCHEDULER)
REMIND_S = 3600.0  # a condition still there is reported again after this long


class RunbookAdvancer(Protocol):
    """What the pass needs of the runbook engine: move runs whose wait timed out."""

    def advance_due(self, now: datetime | None = None) -> Sequence[Any]: ...


# The signal sources are read by ``insights.observe``, the same function the read tools
# (spot_market, cluster_health, plan_actions) use, so agents see what watch acts on.
NoticeSource = insights.NoticeSource
GpuSource = insights.GpuSource


def _record_progress(service: Service, state: WatchState, now: datetime) -> None:
    live: set[str] = set()
    for backend in service.backends.values():
        if not isinstance(backend, ProgressSource):
            continue  # its workloads report no progress of their own
        for w in backend.workloads():
            live.add(w.id)
            progress = backend.progress(w.name)
            if progress is not None:
                state.observe(w.id, progress.step, now)
    state.prune(live, now)


# Proposals about economics rather than risk to work: the watch loop reports them and acts
# only where a person's standing grant covers them (``trigger=checkpoint-interval``). A
# workload's interval is its owner's choice (a pause can hurt a latency-bound service more
# than the model knows); ``every=auto`` is how an owner lets the wrapper follow the model.
ADVICE_TRIGGERS = frozenset({"checkpoint-interval"})


def _act(service: Service, p: Proposal, notice_deadline: datetime | None) -> WatchAction:
    started = utcnow()
    status, message, plan_hash, approval_id = "error", "", None, None
    try:
        result = service.act(
            p.action,
            p.target,
            p.params,
            principal=SCHEDULER,
            reason=p.reason,
            trigger=p.trigger,
        )
        status, message = result.status, result.message
        plan_hash = result.plan.hash if result.plan is not None else None
        approval = result.approval or {}
        approval_id = approval.get("id") or approval.get("approval_id")
    except errors.ClawpointError as exc:
        message = str(exc)
    finished = utcnow()
    action = WatchAction(
        key=p.key, trigger=p.trigger, action=p.action.value, target=p.target, params=p.params,
        reason=p.reason, status=status, message=message, plan_hash=plan_hash,
        approval_id=approval_id, started_at=started, finished_at=finished,
        notice_deadline=notice_deadline,
        met_deadline=(finished <= notice_deadline) if notice_deadline and status == "executed" else None,
    )  # fmt: skip
    log.info(
        "watch acted", trigger=p.trigger, action=p.action.value, target=p.target, status=status,
        notice_deadline=notice_deadline.isoformat() if notice_deadline else None,
        finished_at=finished.isoformat(),
    )  # fmt: skip
    return action


def _node_ids(service: Service) -> tuple[dict[str, str], list[Any]]:
    """Every name a node may be called by -> its id, and the nodes (one inventory read)."""
    nodes = service.nodes()
    ids: dict[str, str] = {}
    for n in nodes:
        ids.setdefault(n.name, n.id)
        ids[n.id] = n.id
    return ids, nodes


def _run_approved(service: Service, state: WatchState, report: WatchReport) -> None:
    """Execute the plans a person approved for watch: watch asked, so watch runs them."""
    for req in state.pending(report.observed_at):
        if not req.approval_id:
            continue
        try:
            view = service.guard.approvals.get(req.approval_id)
        except errors.NotFound:
            continue
        if view.status is not ApprovalStatus.APPROVED:
            continue
        started = utcnow()
        status, message = "error", ""
        try:
            result = service.execute_approved(req.approval_id, principal=SCHEDULER)
            status, message = result.status, result.message
        except errors.ClawpointError as exc:
            message = str(exc)
        trigger, _, rest = req.key.partition("|")
        action, _, target = rest.partition("|")
        done = WatchAction(
            key=req.key, trigger=req.trigger or trigger, action=action, target=target,
            reason=view.reason, status=status, message=f"approved by {view.decided_by}: {message}",
            plan_hash=view.plan_hash, approval_id=req.approval_id, started_at=started,
            finished_at=utcnow(),
        )  # fmt: skip
        report.actions.append(done)
        state.remember(req.model_copy(update={"status": status, "updated_at": done.finished_at,
                                              "message": message[:500]}))  # fmt: skip


def _withdraw_stale(
    service: Service, state: WatchState, evidence: EvidenceStore, now: datetime
) -> list[Withdrawn]:
    """Withdraw watch's own pending approvals whose plan no longer fits or whose trigger's
    evidence expired: a person must not approve what can no longer be right."""
    out: list[Withdrawn] = []
    asked = state.triggers_by_approval()
    for view in service.guard.approvals.list(
        status=ApprovalStatus.PENDING, requester=SCHEDULER.id
    ):  # its own only (an index lookup): a flood of other requests costs nothing here
        if view.id not in asked:
            continue
        problems = service.stale_reasons(view.plan)
        trigger = asked[view.id]
        if not problems and evidence.find(trigger, plan_subjects(view.plan), now) is None:
            problems = [f"the {trigger} that prompted it is no longer observed (evidence expired)"]
        if not problems:
            continue
        why = "; ".join(problems)
        try:
            service.guard.approvals.cancel(view.id, SCHEDULER, f"withdrawn by watch: {why}")
        except errors.ClawpointError as exc:  # decided meanwhile: nothing to withdraw
            log.info("approval not withdrawn", approval=view.id, error=str(exc))
            continue
        out.append(Withdrawn(approval_id=view.id, target=view.target, reason=why))
    return out


def _advance_runs(runbooks: RunbookAdvancer | None, service: Service, now: datetime,
                  report: WatchReport) -> None:  # fmt: skip
    try:
        if runbooks is None:
            from core.runbooks.engine import Engine

            runbooks = Engine(service)
        changes = runbooks.advance_due(now)
    except errors.ClawpointError as exc:
        report.errors.append(f"runbooks: {exc}")
        return
    for c in changes:
        dump = getattr(c, "model_dump", None)
        report.runs.append(dump(mode="json") if callable(dump) else dict(c))


def _plan_and_act(
    service: Service, state: WatchState, evidence: EvidenceStore, report: WatchReport,
    gpus: list[GpuHealth], now: datetime, config: PlannerConfig | None,
    providers: Sequence[ProviderStatus] = (),
) -> tuple[PlanReport, list[Any]]:  # fmt: skip
    """Inventory, evidence, plans, and the actions they call for (steps 2-5)."""
    _record_progress(service, state, now)
    ids, nodes = _node_ids(service)
    plans = propose(
        service, now=now, notices=report.notices, gpus=gpus, history=state.history(),
        config=config,
    )  # fmt: skip
    report.proposals = plans.proposals
    report.errors.extend(plans.errors)  # the planner's own sources (a backend's pools)
    record_evidence(evidence, report, now=now, ids=ids, nodes=nodes, gpus=gpus, plans=plans,
                     providers=providers, here=service.settings.signals.node)  # fmt: skip
    record_interruptions(service.db, report, now=now, nodes=nodes, ids=ids)
    _run_approved(service, state, report)
    for p in plans.proposals:
        if p.trigger in ADVICE_TRIGGERS and not insights.grant_covers(service, p, SCHEDULER):
            report.advised.append(p.key)  # plan_actions shows it; a person or a grant decides
            continue
        prev = state.request(p.key)
        if prev is not None and prev.blocks(now):
            if prev.status != "approval_required":
                report.skipped.append(p.key)
            continue
        action = _act(service, p, p.effect.notice_deadline)
        report.actions.append(action)
        state.remember(
            Request(
                key=p.key, plan_hash=action.plan_hash or "", status=action.status,
                approval_id=action.approval_id, message=action.message[:500],
                updated_at=action.finished_at, trigger=p.trigger,
            )
        )  # fmt: skip
    return plans, nodes


def watch_once(
    service: Service,
    *,
    notices: NoticeSource = None,
    nvml: GpuSource = None,
    now: datetime | None = None,
    config: PlannerConfig | None = None,
    state: WatchState | None = None,
    runbooks: RunbookAdvancer | None = None,
    remind_s: float = REMIND_S,
) -> WatchReport:
    """One pass: reconcile, collect, record evidence, act, withdraw, advance runs, report
    (see the module docstring)."""
    now = now or utcnow()
    state = state or WatchState(service.db)
    evidence = service.guard.grants.evidence
    report = WatchReport(observed_at=now)
    try:
        report.recovered = service.recover()
    except errors.ClawpointError as exc:
        report.errors.append(f"recovery: {exc}")
    seen = insights.observe(service, notices=notices, nvml=nvml)
    report.notices, report.gpu_status, gpus = seen.notices, seen.gpu_status, seen.gpus
    report.errors.extend(seen.errors)
    guarded = guard_unsaved_work(service, now, principal=SCHEDULER.id)
    report.guarded = guarded.changes
    report.errors.extend(f"do-not-disrupt: {e}" for e in guarded.errors)
    try:
        plans, nodes = _plan_and_act(service, state, evidence, report, gpus, now, config,
                                     seen.providers)  # fmt: skip
    except errors.ClawpointError as exc:  # e.g. a backend that does not answer: next pass
        plans, nodes = PlanReport(observed_at=now, proposals=[]), []
        report.errors.append(f"planning: {exc}")
    try:
        report.withdrawn = _withdraw_stale(service, state, evidence, now)
    except errors.ClawpointError as exc:
        report.errors.append(f"withdrawing stale approvals: {exc}")
    _advance_runs(runbooks, service, now, report)
    pending, more = service.guard.approvals.page(
        status=ApprovalStatus.PENDING, limit=APPROVAL_FINDINGS
    )
    report.still_pending = [v.id for v in pending]
    report.pending_total = (
        len(pending)
        if more is None
        else service.guard.approvals.count(status=ApprovalStatus.PENDING)
    )
    add_findings(service, report, plans, nodes, state, now, remind_s, pending, more)
    return report


def watch(
    service: Service,
    *,
    every_s: float,
    on_report: Callable[[WatchReport], None],
    nvml: Any | None = None,
    stop: threading.Event | None = None,
) -> None:
    """The same pass as ``watch_once`` every ``every_s`` seconds until ``stop`` is set;
    long-lived notice and NVML clients. A pass that takes longer than the interval is
    followed by the next one at once."""
    cfg = service.settings.signals
    state = WatchState(service.db)
    stop = stop or threading.Event()
    with NoticePoller(cfg) as poller:
        monitor = NvmlMonitor(nvml, node=cfg.node, event_wait_ms=cfg.nvml.event_wait_ms)
        try:
            while not stop.is_set():
                began = time.monotonic()
                report = watch_once(
                    service, notices=poller, nvml=monitor if cfg.nvml.enabled else None,
                    state=state,
                )  # fmt: skip
                on_report(report)
                stop.wait(max(0.0, every_s - (time.monotonic() - began)))
        finally:
            monitor.close()
