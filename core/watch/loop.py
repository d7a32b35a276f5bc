"""The watch loop: signals -> planner -> ``Service.act`` under guardrails, quiet unless news.

``watch_once`` runs one pass:

0. reconcile (``Service.recover``): finish executions whose process died, so a move cut
   short is completed and no orphan holds a slot of the policy's limits;
1. collect signals: cloud interruption notices (``NoticePoller``, when a provider is enabled
   in ``settings.signals``), GPU health (``NvmlMonitor``, when ``signals.nvml.enabled``),
   node health, SLA risk (with progress history from ``WatchState``) and queue depth;
2. plan (``core.service.insights.propose``);
3. for each proposal not already asked for (see ``core.watch.state``) call
   ``service.act(..., principal=SCHEDULER, trigger=...)``: the guardrails either run it
   (a standing grant covers it) or create an approval request and notify people;
4. report what changed (``WatchReport``), including, for interruption moves, the notice
   deadline and when the move finished.

Exit codes of ``clawpoint watch --once`` (``WatchReport.exit_code``), distinct from the
CLI's general codes: 0 nothing new; 20 approvals waiting (created this pass or still
pending); 21 actions executed (or interrupted executions recovered) this pass; 1 an error
(a signal source, an action or a recovery failed).
When several apply: 1, then 21, then 20.

Limits: one pass acts sequentially, most urgent first; a notice 120 s out leaves time for
a few checkpoints of moderate size, not dozens. Reaction latency is at most one poll
interval (``watch(every=...)``) plus the time of the proposals ranked before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import structlog
from pydantic import BaseModel, Field

from core import errors
from core.model import Execution, ExecutionStatus, Principal, PrincipalKind, utcnow
from core.planner.planner import PlannerConfig, Proposal
from core.service.facade import Service
from core.service.insights import propose
from core.signals.cloud import NoticePoller
from core.signals.model import GpuHealth, InterruptionNotice
from core.signals.nvml import NvmlMonitor, NvmlReport, NvmlStatus
from core.signals.sla import read_progress
from core.watch.state import Request, WatchState

log = structlog.get_logger("clawpoint.watch")

SCHEDULER = Principal(id="watch", kind=PrincipalKind.SCHEDULER)
EXIT_NOTHING, EXIT_ERROR, EXIT_APPROVALS, EXIT_ACTED = 0, 1, 20, 21


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


class WatchReport(BaseModel):
    observed_at: datetime
    proposals: list[Proposal] = Field(default_factory=list)
    actions: list[WatchAction] = Field(default_factory=list)
    still_pending: list[str] = Field(default_factory=list, description="keys awaiting approval")
    skipped: list[str] = Field(default_factory=list, description="keys asked for recently")
    notices: list[InterruptionNotice] = Field(default_factory=list)
    gpu_status: str | None = None
    errors: list[str] = Field(default_factory=list)
    recovered: list[Execution] = Field(
        default_factory=list, description="interrupted executions finished this pass"
    )

    @property
    def changed(self) -> bool:
        return bool(self.actions or self.errors or self.recovered)

    @property
    def exit_code(self) -> int:
        failed_recovery = any(e.status is not ExecutionStatus.SUCCEEDED for e in self.recovered)
        if (
            self.errors
            or failed_recovery
            or any(a.status in ("failed", "error") for a in self.actions)
        ):
            return EXIT_ERROR
        if self.recovered or any(a.status == "executed" for a in self.actions):
            return EXIT_ACTED
        if self.still_pending or any(a.status == "approval_required" for a in self.actions):
            return EXIT_APPROVALS
        return EXIT_NOTHING

    def summary(self) -> str:
        """One line for people (empty when nothing changed)."""
        if not self.changed:
            return ""
        parts = [
            f"recovered: {e.action.value} {e.target} -> {e.status.value}" for e in self.recovered
        ]
        parts += [f"{a.trigger}: {a.action} {a.target} -> {a.status}" for a in self.actions]
        parts += [f"error: {e}" for e in self.errors]
        return "; ".join(parts)


NoticeSource = NoticePoller | Sequence[InterruptionNotice] | None
GpuSource = NvmlMonitor | NvmlReport | Any


def _notices(
    service: Service, source: NoticeSource, report: WatchReport
) -> list[InterruptionNotice]:
    cfg = service.settings.signals
    if source is None:
        if not (cfg.aws.enabled or cfg.gcp.enabled or cfg.azure.enabled):
            return []
        with NoticePoller(cfg) as poller:
            return _notices(service, poller, report)
    if isinstance(source, NoticePoller):
        result = source.poll()
        return result.notices
    return list(source)


def _gpus(service: Service, source: GpuSource, report: WatchReport) -> list[GpuHealth]:
    cfg = service.settings.signals
    if source is None and not cfg.nvml.enabled:
        return []
    if isinstance(source, NvmlReport):
        nv = source
    elif isinstance(source, NvmlMonitor):
        nv = source.report()
    else:  # None (the real pynvml) or an injected nvml module
        with NvmlMonitor(source, node=cfg.node, event_wait_ms=cfg.nvml.event_wait_ms) as mon:
            nv = mon.report()
    report.gpu_status = nv.status.value
    if nv.status is NvmlStatus.ERROR:
        report.errors.append(f"NVML: {nv.message}")
    node = nv.node or cfg.node
    return [g if g.node else g.model_copy(update={"node": node}) for g in nv.gpus]


def _record_progress(service: Service, state: WatchState, now: datetime) -> None:
    live: set[str] = set()
    for w in service.workloads("local") if "local" in service.backends else []:
        live.add(w.id)
        progress = read_progress(service.settings.run_dir, w.name)
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


def watch_once(
    service: Service,
    *,
    notices: NoticeSource = None,
    nvml: GpuSource = None,
    now: datetime | None = None,
    config: PlannerConfig | None = None,
    state: WatchState | None = None,
) -> WatchReport:
    """One pass: collect, plan, act on what is new, report (see the module docstring)."""
    now = now or utcnow()
    state = state or WatchState(service.db)
    report = WatchReport(observed_at=now)
    try:
        report.recovered = service.recover()
    except errors.ClawpointError as exc:
        report.errors.append(f"recovery: {exc}")
    try:
        report.notices = _notices(service, notices, report)
    except errors.ClawpointError as exc:
        report.errors.append(f"notices: {exc}")
    try:
        gpus = _gpus(service, nvml, report)
    except errors.ClawpointError as exc:
        gpus = []
        report.errors.append(f"gpus: {exc}")
    _record_progress(service, state, now)
    plans = propose(
        service, now=now, notices=report.notices, gpus=gpus, history=state.history(),
        config=config,
    )  # fmt: skip
    report.proposals = plans.proposals
    for p in plans.proposals:
        prev = state.request(p.key)
        if prev is not None and prev.blocks(now):
            (report.still_pending if prev.status == "approval_required" else report.skipped).append(
                p.key
            )
            continue
        action = _act(service, p, p.effect.notice_deadline)
        report.actions.append(action)
        state.remember(
            Request(
                key=p.key, plan_hash=action.plan_hash or "", status=action.status,
                approval_id=action.approval_id, message=action.message[:500],
                updated_at=action.finished_at,
            )
        )  # fmt: skip
    listed = set(report.still_pending)
    report.still_pending += [
        r.key
        for r in state.pending(now)
        if r.key not in listed and r.key not in {a.key for a in report.actions}
    ]
    return report


def watch(
    service: Service,
    *,
    every_s: float,
    on_report: Callable[[WatchReport], None],
    nvml: Any | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Poll every ``every_s`` seconds until ``stop()``; long-lived notice and NVML clients."""
    cfg = service.settings.signals
    state = WatchState(service.db)
    with NoticePoller(cfg) as poller:
        monitor = NvmlMonitor(nvml, node=cfg.node, event_wait_ms=cfg.nvml.event_wait_ms)
        try:
            while not stop():
                began = time.monotonic()
                report = watch_once(
                    service, notices=poller, nvml=monitor if cfg.nvml.enabled else None,
                    state=state,
                )  # fmt: skip
                on_report(report)
                time.sleep(max(0.0, every_s - (time.monotonic() - began)))
        finally:
            monitor.close()
