"""What a watch pass reports: its findings, their levels, and its exit code.

``WatchReport`` holds what one pass saw and did; ``add_findings`` turns that into
``Finding``s: events (an action, a recovery, a withdrawal, a runbook step), new by nature,
and conditions (a pending approval, a risk watch cannot fix, a failing source), new the first
pass they appear, when their content changes, and every ``remind_s`` while they last
(``WatchState.seen``). The exit code follows the worst level: 1 error, 21 acted, 20 needs
someone, 0 nothing.

Limits: pending approvals are reported one by one for the newest ``APPROVAL_FINDINGS`` only,
the rest in one finding; a finding's line has control characters replaced, nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from core import errors
from core.backends.disruption_guard import GuardChange
from core.guardrails.approvals import ApprovalView
from core.model import Execution, ExecutionStatus, NodeHealth
from core.planner.planner import Proposal
from core.schema_base import Model
from core.service.facade import Service
from core.service.insights import PlanReport
from core.signals.model import InterruptionNotice
from core.watch.state import WatchState

EXIT_NOTHING, EXIT_ERROR, EXIT_APPROVALS, EXIT_ACTED = 0, 1, 20, 21
# Pending approvals reported one by one per pass (the newest); the rest in one finding, so a
# flood of requests cannot make a pass slow or its report long.
APPROVAL_FINDINGS = 20
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")

Level = Literal["acted", "attention", "error"]


class WatchAction(Model):
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


class Finding(Model):
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


class Withdrawn(Model):
    approval_id: str
    target: str
    reason: str


class WatchReport(Model):
    observed_at: datetime
    proposals: list[Proposal] = Field(default_factory=list)
    actions: list[WatchAction] = Field(default_factory=list)
    still_pending: list[str] = Field(
        default_factory=list,
        description="ids of approvals waiting for a person: the newest APPROVAL_FINDINGS",
    )
    pending_total: int = Field(default=0, description="approvals waiting for a person, in all")
    skipped: list[str] = Field(default_factory=list, description="keys asked for recently")
    advised: list[str] = Field(
        default_factory=list,
        description="keys of advice (a checkpoint interval that pays) reported, not acted on: "
        "no standing grant covers it",
    )
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
    guarded: list[GuardChange] = Field(
        default_factory=list,
        description="protections from voluntary disruption set or cleared this pass",
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


def add_findings(service: Service, report: WatchReport, plans: PlanReport, nodes: Sequence[Any],
              state: WatchState, now: datetime, remind_s: float, pending: Sequence[ApprovalView],
              more: str | None) -> None:  # fmt: skip
    """The pass's events and conditions as findings, conditions marked new or not."""
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
