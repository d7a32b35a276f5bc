"""The watch pass: the heartbeat that polls, acts under standing approvals, and says what is new.

``watch_once`` runs one pass; ``watch`` runs the same pass every interval. A pass:

0. reconciles (``Service.recover``): finishes executions whose process died;
1. collects signals: cloud interruption notices (``NoticePoller``, when a provider is
   enabled in ``settings.signals``), GPU health (``NvmlMonitor``, when
   ``signals.nvml.enabled``), node health, SLA risk (progress history from ``WatchState``)
   and queue depth;
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

Limits: one pass acts sequentially, most urgent first; a notice 120 s out leaves time for
a few checkpoints of moderate size, not dozens. Reaction latency is at most one poll
interval plus the time of the proposals ranked before it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

import structlog
from pydantic import BaseModel, Field

from core import errors
from core.backends.base import ProgressSource
from core.guardrails.approvals import ApprovalStatus, ApprovalView
from core.guardrails.evidence import NOTICE_GRACE_S, EvidenceStore, plan_subjects
from core.model import (
    Execution,
    ExecutionStatus,
    NodeHealth,
    Principal,
    PrincipalKind,
    utcnow,
)
from core.planner.planner import PlannerConfig, Proposal
from core.service import evidence_check, insights
from core.service.facade import Service
from core.service.insights import PlanReport, propose
from core.signals.cloud import NoticePoller, ProviderStatus
from core.signals.model import GpuHealth, GpuVerdict, InterruptionAction, InterruptionNotice
from core.signals.nodes import node_health
from core.signals.nvml import NvmlMonitor
from core.watch.state import Request, WatchState

log = structlog.get_logger("clawpoint.watch")

SCHEDULER = Principal(id="watch", kind=PrincipalKind.SCHEDULER)
EXIT_NOTHING, EXIT_ERROR, EXIT_APPROVALS, EXIT_ACTED = 0, 1, 20, 21
REMIND_S = 3600.0  # a condition still there is reported again after this long
# Pending approvals reported one by one per pass (the newest); the rest in one finding, so a
# flood of requests cannot make a pass slow or its report long.
APPROVAL_FINDINGS = 20
# Notice actions that are planned maintenance rather than a spot reclaim (also recorded
# as "spot-interruption", the trigger the planner gives every notice).
_MAINTENANCE = frozenset(
    {InterruptionAction.REBOOT, InterruptionAction.REDEPLOY, InterruptionAction.FREEZE,
     InterruptionAction.DRAIN}
)  # fmt: skip
# Triggers whose evidence is the raw sighting of a node's signal (recorded per node).
SIGNAL_TRIGGERS = frozenset({"spot-interruption", "maintenance", "gpu-failure", "node-down"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")

Level = Literal["acted", "attention", "error"]


class WatchAction(BaseModel):
    key: str
    trigger: str
    action: str
    target: str
    params: dict[str, Any] = Field(default_factory=dict)
    reason: str
    status: str  # executed | approval_required | denied | failed | planned | error
    message: str = ""
    plan_hash: str | None = None
    approval_id: str | None = None
    started_at: datetime
    finished_at: datetime
    notice_deadline: datetime | None = None
    met_deadline: bool | None = None


class Finding(BaseModel):
    """One thing a person or an agent may want to know, with a stable key."""

    key: str
    level: Level
    kind: str  # action | recovered | withdrawn | runbook | approval | sla | dead | error
    message: str
    subject: str | None = None
    approval_id: str | None = None
    new: bool = True

    def line(self) -> str:
        return _CONTROL.sub(" ", f"{self.level}: {self.message}")


class Withdrawn(BaseModel):
    approval_id: str
    target: str
    reason: str


class WatchReport(BaseModel):
    observed_at: datetime
    proposals: list[Proposal] = Field(default_factory=list)
    actions: list[WatchAction] = Field(default_factory=list)
    still_pending: list[str] = Field(
        default_factory=list,
        description="ids of approvals waiting for a person: the newest APPROVAL_FINDINGS",
    )
    pending_total: int = Field(default=0, description="approvals waiting for a person, in all")
    skipped: list[str] = Field(default_factory=list, description="keys asked for recently")
    notices: list[InterruptionNotice] = Field(default_factory=list)
    gpu_status: str | None = None
    errors: list[str] = Field(default_factory=list)
    recovered: list[Execution] = Field(
        default_factory=list, description="interrupted executions finished this pass"
    )
    withdrawn: list[Withdrawn] = Field(default_factory=list)
    runs: list[dict[str, Any]] = Field(
        default_factory=list, description="runbook runs advanced this pass (timeouts)"
    )
    evidence: list[dict[str, Any]] = Field(
        default_factory=list, description="signals recorded as evidence this pass"
    )
    ended: list[dict[str, Any]] = Field(
        default_factory=list, description="evidence this pass contradicted, and why"
    )
    findings: list[Finding] = Field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Something new since the previous pass (what gets printed)."""
        return any(f.new for f in self.findings)

    @property
    def exit_code(self) -> int:
        levels = {f.level for f in self.findings}
        if "error" in levels:
            return EXIT_ERROR
        if "acted" in levels:
            return EXIT_ACTED
        if "attention" in levels:
            return EXIT_APPROVALS
        return EXIT_NOTHING

    def lines(self) -> list[str]:
        """One line per new finding (none when nothing changed)."""
        return [f.line() for f in self.findings if f.new]

    def summary(self) -> str:
        """The new findings on one line (empty when nothing changed)."""
        return "; ".join(self.lines())


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


def _record_evidence(
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


def _action_finding(a: WatchAction) -> Finding:
    what = f"{a.action} {a.target} ({a.trigger})"
    level: Level
    if a.status == "executed":
        level, text = "acted", f"{what}: {a.message}"
    elif a.status == "approval_required":
        level = "attention"
        text = (f"approval {a.approval_id} waiting: {what}; approve with 'clawpoint approvals "
                f"approve {a.approval_id}' or deny it")  # fmt: skip
    elif a.status in ("failed", "error"):
        level, text = "error", f"{what} failed: {a.message}"
    else:  # denied by policy, or planned only (dry run)
        level, text = "attention", f"{what} {a.status}: {a.message}"
    return Finding(key=f"action:{a.key}:{a.finished_at.isoformat()}", level=level, kind="action",
                   message=text, subject=a.target, approval_id=a.approval_id)  # fmt: skip


def _unfixable(plans: PlanReport, nodes: Sequence[Any], workloads: Sequence[Any]) -> list[Finding]:
    """Risks the planner has no move for: someone has to decide."""
    out: list[Finding] = []
    proposed = {p.target for p in plans.proposals}
    for r in plans.sla:
        if r.level.value != "high" or r.workload in proposed:
            continue
        late = (
            f"late by {-r.slack_s / 60:.0f} min"
            if r.slack_s is not None and r.slack_s < 0
            else (f"slack {r.slack_s / 60:.0f} min" if r.slack_s is not None else "at risk")
        )
        need = f"; needs a node {r.needed_speed:.2f}x as fast" if r.needed_speed else ""
        out.append(Finding(
            key=f"sla:{r.workload}", level="attention", kind="sla", subject=r.workload,
            message=f"{r.workload} will miss its deadline {r.deadline:%Y-%m-%d %H:%M} UTC "
            f"({late}) and no faster node is free{need}: add capacity, preempt lower-priority "
            "work or move the deadline",
        ))  # fmt: skip
    health = {n.id: n.health for n in nodes}
    for w in workloads:
        node = f"{w.backend}:{w.node}" if w.node else None
        if (w.died() and node is not None
                and health.get(node) is NodeHealth.DEGRADED and w.id not in proposed):  # fmt: skip
            out.append(Finding(
                key=f"dead:{w.id}", level="attention", kind="dead", subject=w.id,
                message=f"{w.id} died on degraded node {node} and nothing restarts it: "
                f"fail it over ('clawpoint failover {w.id}') or ask a person",
            ))  # fmt: skip
    return out


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
    _record_evidence(evidence, report, now=now, ids=ids, nodes=nodes, gpus=gpus, plans=plans,
                     providers=providers, here=service.settings.signals.node)  # fmt: skip
    _run_approved(service, state, report)
    for p in plans.proposals:
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
    _findings(service, report, plans, nodes, state, now, remind_s, pending, more)
    return report


def _findings(service: Service, report: WatchReport, plans: PlanReport, nodes: Sequence[Any],
              state: WatchState, now: datetime, remind_s: float, pending: Sequence[ApprovalView],
              more: str | None) -> None:  # fmt: skip
    events: list[Finding] = []
    for e in report.recovered:
        ok = e.status is ExecutionStatus.SUCCEEDED
        events.append(Finding(
            key=f"recovered:{e.id}", level="acted" if ok else "error", kind="recovered",
            subject=e.target, message=f"finished interrupted {e.action.value} of {e.target}: "
            f"{e.status.value}" + ("" if ok else f" ({e.error})"),
        ))  # fmt: skip
    events += [_action_finding(a) for a in report.actions]
    events += [
        Finding(key=f"withdrawn:{w.approval_id}", level="acted", kind="withdrawn",
                subject=w.target, approval_id=w.approval_id,
                message=f"withdrew approval {w.approval_id} for {w.target}: {w.reason}")
        for w in report.withdrawn
    ]  # fmt: skip
    for r in report.runs:
        status = str(r.get("status", ""))
        level: Level = ("error" if status == "failed" else "attention"
                        if status.startswith("waiting") else "acted")  # fmt: skip
        events.append(Finding(
            key=f"run:{r.get('id')}:{r.get('step')}", level=level, kind="runbook",
            subject=str(r.get("id")), message=f"runbook run {r.get('id')} ({r.get('runbook')}): "
            f"step {r.get('step')} timed out; now {status}" + (
                f" at {r['current']}" if r.get("current") else "") + (
                f": {r['message']}" if r.get("message") else ""),
        ))  # fmt: skip
    try:
        conditions = _unfixable(plans, nodes, service.workloads() if nodes else [])
    except errors.ClawpointError as exc:
        conditions = []
        report.errors.append(f"inventory: {exc}")
    conditions += [
        Finding(key=f"error:{e}", level="error", kind="error", message=e) for e in report.errors
    ]
    asked_now = {a.approval_id for a in report.actions if a.approval_id}
    for view in pending:  # the newest page; the rest in one finding below
        if view.id in asked_now:
            state.seen(f"approval:{view.id}", f"approval{view.id}", now, remind_s=remind_s)
            continue
        conditions.append(Finding(
            key=f"approval:{view.id}", level="attention", kind="approval", subject=view.target,
            approval_id=view.id,
            message=f"approval {view.id} still waiting: {view.action} {view.target} asked by "
            f"{view.requester} (expires {view.expires_at:%H:%M:%S} UTC); approve with "
            f"'clawpoint approvals approve {view.id}' or deny it",
        ))  # fmt: skip
    if more is not None:
        rest = report.pending_total - len(pending)
        conditions.append(Finding(
            key="approvals:more", level="attention", kind="approval",
            message=f"{rest} more approvals waiting ({report.pending_total} in all; the newest "
            f"{len(pending)} are reported one by one); see them with 'clawpoint approvals list --cursor {more}'",
        ))  # fmt: skip
    for f in conditions:
        # The fingerprint leaves out times that move every pass (expiry shown, slack).
        f.new = state.seen(f.key, f.kind + (f.approval_id or ""), now, remind_s=remind_s)
    state.forget_others({f.key for f in conditions} | {f"approval:{i}" for i in asked_now})
    report.findings = events + conditions


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
