"""The service facade: the one object the CLI, the MCP server and the watch loop call.

Every mutating operation goes plan -> decide -> execute -> audit:
- ``plan`` asks the target's backend for a draft, adds the risk class and seals it with a
  stable hash; planning is read-only and always allowed;
- ``perform`` decides whether the plan may run for this principal (see ``_decide``), runs it
  step by step through the journaled executor, and appends every stage to the audit chain;
- ``recover`` finishes executions a killed clawpoint left half-done.

Inventory calls fan out to the configured backends. Nothing here knows about MCP or the CLI.
"""

from __future__ import annotations

from typing import Any, Literal

import structlog
from pydantic import BaseModel, Field

from core import errors
from core.backends.base import Backend, ProgressFn, no_progress
from core.config import Settings, ensure_dirs
from core.guardrails.audit import AuditLog
from core.model import (
    Action,
    CheckpointInfo,
    Execution,
    ExecutionStatus,
    NodeInfo,
    Plan,
    Principal,
    PrincipalKind,
    RiskClass,
    WorkloadInfo,
    parse_ref,
    risk_of,
)
from core.service.executor import Executor
from core.service.journal import Journal
from core.state.db import Database
from core.wrapper.spec import RunSpec

log = structlog.get_logger("clawpoint.service")

# Actions whose target is a checkpoint or a node rather than a workload.
_CHECKPOINT_TARGETS = {Action.RESTORE, Action.DELETE_CHECKPOINT}
_NODE_TARGETS = {Action.DRAIN_NODE}


class ClusterStatus(BaseModel):
    backends: list[str]
    nodes: list[NodeInfo]
    workloads_by_state: dict[str, int]
    checkpoints: int
    engine: dict[str, Any] = Field(default_factory=dict)
    unavailable: dict[str, str] = Field(default_factory=dict)


class ActionResult(BaseModel):
    status: Literal["executed", "approval_required", "denied", "failed", "planned"]
    plan: Plan
    message: str
    execution: Execution | None = None
    approval: dict[str, Any] | None = None


class Service:
    def __init__(self, settings: Settings, db: Database, backends: dict[str, Backend]) -> None:
        self.settings = settings
        self.db = db
        self.backends = backends
        self.journal = Journal(db)
        self.executor = Executor(self.journal)
        self.audit = AuditLog(db)

    # ------------------------------------------------------------------ lookup
    def backend(self, name: str) -> Backend:
        try:
            return self.backends[name]
        except KeyError:
            raise errors.NotFound(
                f"no backend named {name!r} is configured (have: {', '.join(sorted(self.backends))})",
                hint="use an id with one of the configured backends, e.g. local:NAME",
            ) from None

    def _split(self, ref: str, *, what: str) -> tuple[Backend, str]:
        parsed = parse_ref(ref, what=what)
        return self.backend(parsed.backend), parsed.name

    def _split_checkpoint(self, ref: str) -> tuple[Backend, str]:
        backend_name, sep, rest = ref.partition(":")
        lineage, at, seq = rest.partition("@")
        if not sep or not at or not seq.isdigit():
            raise errors.InvalidInput(
                f"malformed checkpoint id {ref!r}: expected BACKEND:WORKLOAD@SEQ",
                hint="list checkpoints with 'clawpoint checkpoints' and copy an id",
            )
        parse_ref(f"{backend_name}:{lineage}", what="checkpoint")
        return self.backend(backend_name), f"{lineage}@{int(seq)}"

    # ------------------------------------------------------------------ inventory
    def _each(self, backend: str | None) -> list[Backend]:
        return [self.backend(backend)] if backend else list(self.backends.values())

    def nodes(self, backend: str | None = None) -> list[NodeInfo]:
        return [n for b in self._each(backend) for n in b.nodes()]

    def workloads(self, backend: str | None = None) -> list[WorkloadInfo]:
        return [w for b in self._each(backend) for w in b.workloads()]

    def get_workload(self, ref: str) -> WorkloadInfo:
        backend, name = self._split(ref, what="workload")
        return backend.get_workload(name)

    def checkpoints(self, workload: str | None = None) -> list[CheckpointInfo]:
        if workload is None:
            return [c for b in self.backends.values() for c in b.checkpoints(None)]
        backend, name = self._split(workload, what="workload")
        backend.get_workload(name)  # unknown workload -> NotFound, not an empty list
        return backend.checkpoints(name)

    def cluster_status(self) -> ClusterStatus:
        from core.checkpoint.criu import criu_status  # local import: probing criu runs a binary

        nodes: list[NodeInfo] = []
        counts: dict[str, int] = {}
        ckpts = 0
        unavailable: dict[str, str] = {}
        for name, backend in self.backends.items():
            try:
                nodes.extend(backend.nodes())
                for w in backend.workloads():
                    counts[w.state.value] = counts.get(w.state.value, 0) + 1
                ckpts += len(backend.checkpoints(None))
            except errors.BackendUnavailable as exc:
                unavailable[name] = str(exc)
        return ClusterStatus(
            backends=sorted(self.backends),
            nodes=nodes,
            workloads_by_state=counts,
            checkpoints=ckpts,
            engine={"criu": criu_status().model_dump()},
            unavailable=unavailable,
        )

    # ------------------------------------------------------------------ planning
    def plan(
        self, action: Action, target: str, params: dict[str, Any] | None = None, *, reason: str = ""
    ) -> Plan:
        """A sealed, persisted plan. Read-only: never changes a workload."""
        params = {k: v for k, v in (params or {}).items() if v is not None}
        if action in _CHECKPOINT_TARGETS:
            backend, local_target = self._split_checkpoint(target)
        elif action in _NODE_TARGETS:
            backend, local_target = self._split(target, what="node")
        else:
            backend, local_target = self._split(target, what="workload")
        if action not in backend.capabilities():
            from core.backends.base import not_supported

            raise not_supported(backend.name, action)
        draft = backend.plan(action, local_target, params)
        plan = Plan(
            action=action,
            target=f"{backend.name}:{local_target}",
            backend=backend.name,
            params=params,
            steps=draft.steps,
            on_failure=draft.on_failure,
            risk=risk_of(action, params),
            summary=draft.summary,
            expected_pause_s=draft.expected_pause_s,
            saves=draft.saves,
            rollback=draft.rollback,
            cost_effect=draft.cost_effect,
            reason=reason,
            scope=draft.scope,
        ).sealed()
        self.journal.save_plan(plan)
        return plan

    # ------------------------------------------------------------------ acting
    def _decide(self, plan: Plan, principal: Principal, *, confirmed: bool) -> tuple[str, str]:
        """Until policy-driven approvals exist: read/safe run; anything riskier needs a person
        at a terminal who confirmed this exact plan. Agents get ``approval_required``."""
        if plan.risk in (RiskClass.READ, RiskClass.SAFE):
            return "allow", f"{plan.risk.value} actions are allowed"
        if principal.kind is PrincipalKind.PERSON and confirmed:
            return "allow", f"{plan.risk.value} action confirmed by {principal}"
        if principal.kind is PrincipalKind.PERSON:
            return "approve", f"{plan.risk.value} action: confirm it interactively or pass --yes"
        return "deny", (
            f"{plan.risk.value} actions are not available to agents yet; a person can run "
            f"it from the CLI: clawpoint {plan.action.value.replace('_', '-')} {plan.target}"
        )

    def perform(
        self,
        plan: Plan,
        *,
        principal: Principal,
        confirmed: bool = False,
        dry_run: bool = False,
        progress: ProgressFn = no_progress,
    ) -> ActionResult:
        """Decide and (if allowed) execute a plan made by ``plan``."""
        if plan.hash != plan.compute_hash():
            raise errors.InvalidInput(
                "the plan was changed after it was made",
                hint="make a new plan and use it unchanged",
            )
        self.audit.append(
            "plan",
            principal=str(principal),
            subject=plan.target,
            data={
                "hash": plan.hash,
                "action": plan.action.value,
                "risk": plan.risk.value,
                "reason": plan.reason,
                "summary": plan.summary,
            },
        )
        if dry_run:
            return ActionResult(status="planned", plan=plan, message="dry run: nothing was changed")
        outcome, why = self._decide(plan, principal, confirmed=confirmed)
        self.audit.append(
            "decision",
            principal=str(principal),
            subject=plan.target,
            data={"hash": plan.hash, "outcome": outcome, "reason": why},
        )
        if outcome == "deny":
            return ActionResult(status="denied", plan=plan, message=why)
        if outcome == "approve":
            return ActionResult(status="approval_required", plan=plan, message=why)
        return self._execute(plan, principal=principal, progress=progress)

    def _execute(self, plan: Plan, *, principal: Principal, progress: ProgressFn) -> ActionResult:
        backend = self.backend(plan.backend)
        execution = self.executor.run(plan, backend, principal=str(principal), progress=progress)
        self.audit.append(
            "execution",
            principal=str(principal),
            subject=plan.target,
            data={
                "hash": plan.hash,
                "execution": execution.id,
                "status": execution.status.value,
                "steps": [s.model_dump(mode="json") for s in execution.steps],
                "error": execution.error,
            },
        )
        if execution.status is ExecutionStatus.SUCCEEDED:
            return ActionResult(
                status="executed", plan=plan, execution=execution, message=plan.summary + ": done"
            )
        what = "rolled back" if execution.status is ExecutionStatus.ROLLED_BACK else "failed"
        return ActionResult(
            status="failed",
            plan=plan,
            execution=execution,
            message=f"{plan.summary}: {what}: {execution.error}",
        )

    def act(
        self,
        action: Action,
        target: str,
        params: dict[str, Any] | None = None,
        *,
        principal: Principal,
        reason: str = "",
        confirmed: bool = False,
        dry_run: bool = False,
        progress: ProgressFn = no_progress,
    ) -> ActionResult:
        """Plan and perform in one call (what the CLI and the action tools use)."""
        plan = self.plan(action, target, params, reason=reason)
        return self.perform(
            plan, principal=principal, confirmed=confirmed, dry_run=dry_run, progress=progress
        )

    # ------------------------------------------------------------------ workloads
    def default_node(self) -> str:
        nodes = [n for n in self.nodes("local") if n.schedulable and n.health.value != "down"]
        if not nodes:
            raise errors.Conflict(
                "no schedulable local node", hint="undrain a node or add one to the [local] config"
            )
        nodes.sort(key=lambda n: (len(n.workloads), n.price_per_hour))
        return nodes[0].name

    def run_workload(
        self, spec: RunSpec, *, detach: bool, principal: Principal
    ) -> int | WorkloadInfo:
        """Start (or restore) a workload under the wrapper on a local node.

        Detached: returns the running workload. Foreground: runs it to completion in this
        process and returns the wrapper's exit code.
        """
        from core.wrapper import launch, supervisor

        local = self.backend("local")
        if spec.node is None:
            spec = spec.model_copy(update={"node": self.default_node()})
        elif spec.node not in {n.name for n in local.nodes()}:
            raise errors.NotFound(
                f"no node local:{spec.node}", hint="run 'clawpoint nodes' to list local nodes"
            )
        self.audit.append(
            "run",
            principal=str(principal),
            subject=f"local:{spec.name}",
            data={
                "node": spec.node,
                "engine": spec.engine,
                "command": spec.command,
                "detach": detach,
            },
        )
        if detach:
            record = launch.launch_detached(self.settings, spec)
            return record.to_info()
        return supervisor.run(self.settings, spec)

    # ------------------------------------------------------------------ recovery
    def recover(self) -> list[Execution]:
        """Finish executions left running by a clawpoint process that died mid-way."""
        done: list[Execution] = []
        for execution in self.journal.claim_orphans():
            plan = self.journal.get_plan(execution.plan_hash)
            backend = self.backends.get(plan.backend)
            if backend is None:
                continue
            log.warning(
                "recovering interrupted execution", execution=execution.id, action=plan.action.value
            )
            finished = self.executor.resume(execution, plan, backend)
            self.audit.append(
                "recovery",
                principal="system:recovery",
                subject=plan.target,
                data={"execution": finished.id, "status": finished.status.value},
            )
            done.append(finished)
        return done


def bootstrap(settings: Settings) -> Service:
    """Wire the configured backends over one state database."""
    from core.backends.local import LocalBackend

    ensure_dirs(settings)
    db = Database(settings.state_db)
    db.migrate()
    backends: dict[str, Backend] = {}
    if settings.local.enabled:
        backends["local"] = LocalBackend(settings, db)
    return Service(settings, db, backends)
