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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import structlog
from pydantic import BaseModel, Field

from core import actions, errors
from core.actions import ActionParams, Interface, Target
from core.backends.base import (
    Backend,
    BatchSubmitter,
    CheckpointKeeper,
    Launcher,
    ProgressFn,
    ProgressSource,
    QueueDepthSource,
    no_progress,
)
from core.config import Settings, ensure_dirs
from core.guardrails import schema as guard_schema
from core.guardrails.approvals import ApprovalStatus, ApprovalView, not_usable
from core.guardrails.audit import AuditLog
from core.guardrails.dry_runs import DryRunAudit
from core.guardrails.guard import Guard
from core.guardrails.policy import ApprovalKind, Decision, Outcome
from core.guardrails.prompts import ApprovalPath
from core.model import (
    KILLED,
    Action,
    CheckpointInfo,
    CheckpointStatus,
    Execution,
    ExecutionStatus,
    NodeInfo,
    Plan,
    Preconditions,
    Principal,
    PrincipalKind,
    RiskClass,
    WorkloadInfo,
    WorkloadState,
    parse_ref,
    utcnow,
    validate_name,
)
from core.service import drains, evidence_check
from core.service.context import WorldContext
from core.service.executor import Executor
from core.service.journal import Journal
from core.service.journal import release as release_execution
from core.service.moves import MoveLog
from core.service.people import PeopleDesk
from core.signals.nvml import ReportCache
from core.signals.queue import QueueDepth, coerce, from_workloads
from core.signals.sla import Progress
from core.specs import BatchSpec, RunSpec
from core.state.db import Database
from core.store.store import CheckpointStore

log = structlog.get_logger("clawpoint.service")

RawParams = Mapping[str, Any] | ActionParams | None


def _comparable(state: WorkloadState) -> WorkloadState:
    # A periodic checkpoint in progress is still a running workload (the wrapper serialises
    # control requests, so a plan's step simply follows that checkpoint).
    return WorkloadState.RUNNING if state is WorkloadState.CHECKPOINTING else state


class ClusterStatus(BaseModel):
    backends: list[str]
    nodes: list[NodeInfo]
    workloads_by_state: dict[str, int]
    checkpoints: int
    engine: dict[str, Any] = Field(default_factory=dict)
    unavailable: dict[str, str] = Field(default_factory=dict)


class ActionResult(BaseModel):
    status: Literal["executed", "approval_required", "denied", "failed", "planned"]
    plan: Plan | None  # None only when the backend cannot do the action at all
    message: str
    execution: Execution | None = None
    approval: dict[str, Any] | None = None


class ClientAnswer(BaseModel):
    """The answer given in the agent's own client to an approval question (elicitation).

    The server cannot tell whether a person or the client itself answered, so it is recorded
    as confirmed by the client's user, never as a named person."""

    approved: bool
    note: str = ""


@dataclass(frozen=True)
class ClientAsker:
    """How to ask the user of the calling agent's client, and who that client says it is.

    ``client`` is the client's self-declared name (clientInfo.name, unverified) and
    ``transport`` ``stdio`` or ``http``: the operator's ``[mcp]`` settings decide whether
    such an answer may approve anything. ``ask`` returns None when it could not ask."""

    client: str
    transport: str
    ask: Callable[[Plan, ApprovalView], ClientAnswer | None]


def _label(text: str) -> str:
    """A client-chosen name made safe for principal ids and audit entries."""
    cleaned = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "._-") else "_" for ch in text)
    return cleaned[:64] or "client"


def _dry_run_message(decision: Decision, principal: Principal) -> str:
    """What would happen if the plan ran for real, in words that cannot be read as a yes:
    it would run now, it needs a person's approval (or the person's own confirmation), or
    it would be refused; and why."""
    if decision.outcome is Outcome.ALLOW:
        under = f" under standing approval {decision.grant_id}" if decision.grant_id else ""
        will = f"it would run now{under}"
    elif decision.outcome is Outcome.DENY:
        will = "it would be refused"
    elif principal.kind is PrincipalKind.PERSON:
        will = "it needs your confirmation"
    else:
        will = "it needs a person's approval"
    return f"dry run: nothing was changed. For real, {will}: {decision.reason}"


def _approval_info(view: ApprovalView, paths: list[ApprovalPath]) -> dict[str, Any]:
    return {
        "id": view.id,
        "status": view.status.value,
        "expires_at": view.expires_at.isoformat(),
        "how_to_approve": [p.model_dump() for p in paths if p.available],
    }


def _same_but_reason(a: Plan, b: Plan) -> bool:
    """Whether two plans do the same thing, whatever reason each gives."""

    def core(plan: Plan) -> str:
        params = {k: v for k, v in plan.params.items() if k != "reason"}
        return plan.model_copy(update={"params": params}).compute_hash()

    return core(a) == core(b)


class Service(PeopleDesk, WorldContext):
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
        self.dry_runs = DryRunAudit()  # which dry runs are audited (a per-principal budget)
        # This host's GPU report, shared by the read tools (core.service.insights.observe).
        self.gpu_reports = ReportCache()

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

    def resolve_node(self, ref: str) -> tuple[Backend, str]:
        """A node id as people and agents write it: ``BACKEND:NAME`` or a bare ``NAME``.

        A bare name is looked up on every backend: one match is that node; none is
        ``NotFound`` listing the nodes there are; several is ``InvalidInput`` listing the
        candidates (the caller must say which)."""
        if not isinstance(ref, str) or ":" in ref:
            return self._split(ref, what="node")
        validate_name(ref, what="node name")
        found: list[str] = []
        known: list[str] = []
        for backend in self.backends.values():
            try:
                nodes = backend.nodes()
            except errors.BackendUnavailable:
                continue  # a backend that does not answer cannot hold the match we report
            known.extend(n.id for n in nodes)
            found.extend(n.id for n in nodes if n.name == ref)
        if len(found) == 1:
            return self._split(found[0], what="node")
        if found:
            raise errors.InvalidInput(
                f"node name {ref!r} is ambiguous: {', '.join(found)} all have it",
                hint=f"pass the full id, one of: {', '.join(found)}",
                details={"candidates": found},
            )
        raise errors.NotFound(
            f"no node named {ref!r}",
            hint=f"known nodes: {', '.join(known) or '(none)'}",
            details={"known": known},
        )

    def _node_on(self, backend: Backend, ref: str) -> str:
        """``to`` as the target's backend names it: ``NAME`` or ``BACKEND:NAME`` of that
        backend (a node of another backend cannot take the workload)."""
        if ":" not in ref:
            return validate_name(ref, what="node name")
        parsed = parse_ref(ref, what="node")
        if parsed.backend != backend.name:
            raise errors.InvalidInput(
                f"node {ref} is on the {parsed.backend} backend, but the target is on "
                f"{backend.name}",
                hint=f"pass a node of {backend.name} (e.g. {backend.name}:NAME) or omit it",
            )
        return parsed.name

    def _split_checkpoint(self, ref: str) -> tuple[Backend, str]:
        backend_name, sep, rest = ref.partition(":")
        lineage, at, seq = rest.partition("@")
        # ASCII digits only: str.isdigit alone reads "@٣" (Arabic-Indic three) as "@3"; and
        # as ids write it, without leading zeros: "@0001" would silently name "@1".
        if (not sep or not at or not (seq.isascii() and seq.isdigit()) or len(seq) > 18
                or seq != str(int(seq))):  # fmt: skip
            raise errors.InvalidInput(
                f"malformed checkpoint id {ref!r}: expected BACKEND:WORKLOAD@SEQ",
                hint=f"list checkpoints with {errors.step('list_checkpoints')} and copy an id "
                "(BACKEND:WORKLOAD@SEQ, the sequence number without leading zeros)",
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
            found = [c for b in self.backends.values() for c in b.checkpoints(None)]
        else:
            backend, name = self._split(workload, what="workload")
            backend.get_workload(name)  # unknown workload -> NotFound, not an empty list
            found = backend.checkpoints(name)
        for c in found:
            if c.status is CheckpointStatus.UNTRUSTED:
                self._audit_untrusted(
                    c.id, action="list", reason=str(c.extra.get("untrusted_reason", "")), once=True
                )
        return found

    def _audit_untrusted(
        self, checkpoint: str, *, action: str, reason: str, once: bool = False
    ) -> None:
        """Record that an untrusted checkpoint was met (someone may have planted or altered
        it): every refused restore, and the first listing that shows it (``once``)."""
        if once and any(
            e.kind == "checkpoint.untrusted" for e in self.audit.entries(subject=checkpoint)
        ):
            return
        outcome = "listed as untrusted" if action == "list" else "refused"
        self.audit.append(
            "checkpoint.untrusted",
            principal="system:store",
            subject=checkpoint,  # BACKEND:LINEAGE@SEQ
            data={"action": action, "outcome": outcome, "reason": reason},
        )

    def reseal_checkpoint(self, checkpoint: str, *, principal: Principal) -> CheckpointInfo:
        """Sign an untrusted checkpoint of ours again (a person vouches that it is theirs:
        one written before manifests were signed, or after its key was replaced). Only its
        owner can, only when every byte still matches its manifest; audited."""
        backend, cid = self._split_checkpoint(checkpoint)
        store = getattr(backend, "store", None)
        if not isinstance(store, CheckpointStore):
            raise errors.NotSupported(
                f"the {backend.name} backend's checkpoints are signed by the jobs' own wrappers",
                hint="re-seal it as its owner on a node of that backend, or take a new checkpoint",
            )
        info = store.reseal(cid)
        self.audit.append(
            "checkpoint.resealed",
            principal=str(principal),
            subject=f"{backend.name}:{cid}",
            data={"files": len(info.files), "size_bytes": info.size_bytes},
        )
        return info

    def queue_depth(self, backend: str | None = None) -> list[QueueDepth]:
        """Each backend's queue: its own (``QueueDepthSource``), else synthesised from its
        workloads' states."""
        out: list[QueueDepth] = []
        for b in self._each(backend):
            if isinstance(b, QueueDepthSource):
                out.extend(coerce(item, backend=b.name) for item in b.queue_depth())
            else:
                out.extend(from_workloads(b.name, b.workloads()))
        return out

    def progress(self, backend: str, name: str) -> Progress | None:
        """The progress workload ``name`` of ``backend`` reports itself, where the backend
        can tell (``ProgressSource``); None otherwise."""
        found = self.backends.get(backend)
        return found.progress(name) if isinstance(found, ProgressSource) else None

    def cluster_status(self) -> ClusterStatus:
        # Local import: engines load lazily (probing criu runs a binary, cuda loads libcuda).
        from core.checkpoint.engine import statuses

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
            engine={
                name: status.model_dump()
                for name, status in statuses(self.settings.checkpoint).items()
            },
            unavailable=unavailable,
        )

    # ------------------------------------------------------------------ planning
    def plan(
        self,
        action: Action,
        target: str,
        params: RawParams = None,
        *,
        reason: str = "",
        interface: Interface = Interface.MCP,
    ) -> Plan:
        """A sealed, persisted plan. Read-only: never changes a workload.

        ``params`` are checked against the action's model in the catalogue
        (``core.actions``); errors name the next step in the words of ``interface``."""
        spec = actions.spec(action)
        typed = actions.parse(action, params, interface=interface)
        if spec.target is Target.CHECKPOINT:
            backend, local_target = self._split_checkpoint(target)
        elif spec.target is Target.NODE:
            backend, local_target = self.resolve_node(target)
        else:
            backend, local_target = self._split(target, what="workload")
        if action not in backend.capabilities():
            from core.backends.base import not_supported

            raise not_supported(backend.name, action)
        updates: dict[str, Any] = {}
        to = getattr(typed, "to", None)
        if isinstance(to, str):
            updates["to"] = self._node_on(backend, to)
        if reason and "reason" in type(typed).model_fields and not getattr(typed, "reason", ""):
            updates["reason"] = reason
        if updates:
            typed = typed.model_copy(update=updates)
        try:
            draft = backend.plan(action, local_target, typed)
        except errors.UntrustedCheckpoint as exc:
            self._audit_untrusted(
                f"{backend.name}:{exc.details.get('checkpoint') or local_target}",
                action=action.value,
                reason=exc.message,
            )
            raise
        recorded = typed.model_dump(mode="json", exclude_defaults=True)
        plan = Plan(
            action=action,
            target=f"{backend.name}:{local_target}",
            backend=backend.name,
            params=recorded,
            steps=draft.steps,
            on_failure=draft.on_failure,
            risk=actions.risk_of(action, typed),
            summary=draft.summary,
            expected_pause_s=draft.expected_pause_s,
            saves=draft.saves,
            rollback=draft.rollback,
            cost_effect=draft.cost_effect,
            reason=reason,
            scope=self._scope(backend, action, local_target, draft.scope),
            preconditions=self._preconditions(backend, action, local_target),
        ).sealed()
        self.journal.save_plan(plan)
        return plan

    def _scope(
        self, backend: Backend, action: Action, local_target: str, scope: dict[str, Any]
    ) -> dict[str, Any]:
        """The backend's scope, plus who drained the node for an undrain (core.service.drains)."""
        if action is not Action.UNDRAIN_NODE:
            return scope
        node = next((n for n in backend.nodes() if n.name == local_target), None)
        if node is None:
            return {**scope, "drained_by": drains.UNKNOWN}
        return {**scope, **drains.undrain_scope(self.db, node)}

    def _preconditions(self, backend: Backend, action: Action, local_target: str) -> Preconditions:
        """What the plan's steps assume (``Preconditions``), read from the world as it is now.

        Every backend reports a workload's state and node the same way, so this is drafted
        here once rather than in each backend's planner."""
        if actions.spec(action).target is Target.NODE:
            return Preconditions()
        if action is Action.DELETE_CHECKPOINT:
            return Preconditions(checkpoint=f"{backend.name}:{local_target}")
        checkpoint = None
        name = local_target
        if action is Action.RESTORE:
            name = local_target.partition("@")[0]
            checkpoint = f"{backend.name}:{local_target}"
        try:
            workload = backend.get_workload(name)
        except (errors.NotFound, errors.InvalidInput):  # not a workload (a Slurm node failover)
            return Preconditions(checkpoint=checkpoint)
        return Preconditions(
            workload=workload.id,
            state=_comparable(workload.state),
            node=workload.node,
            checkpoint=checkpoint,
            killed=True if workload.exit_status == KILLED else None,
        )

    def check_preconditions(self, plan: Plan, *, principal: Principal) -> None:
        """Refuse a plan drafted for a world that has changed since (``Conflict``, exit 10).

        Called right before the first step of every execution, after any approval and
        before it is used, so a stale approved plan changes nothing and its approval stays
        unused. BackendUnavailable when the world cannot be read (nothing runs either)."""
        problems = self._stale(plan)
        if not problems:
            self._check_deletable(plan, principal)
            return
        self.audit.append(
            "precondition.failed",
            principal=str(principal),
            subject=plan.target,
            data={"plan_hash": plan.hash, "problems": problems},
        )
        raise errors.Conflict(
            f"the {plan.action.value} of {plan.target} was planned for a situation that has "
            f"changed: {'; '.join(problems)}. Nothing was done.",
            hint="plan it again with the same command or tool (and, if it needs approval, "
            "ask for a new one): the new plan starts from where things are now",
            details={"plan_hash": plan.hash, "problems": problems},
        )

    def _check_deletable(self, plan: Plan, principal: Principal) -> None:
        """A deletion must not take the checkpoint a workload still needs to come back,
        judged on its newer checkpoints as they verify now, not as they did when the plan was
        made (Conflict ``last-good-checkpoint``; the backend's step checks again under the
        store's lock)."""
        if plan.action is not Action.DELETE_CHECKPOINT:
            return
        backend = self.backend(plan.backend)
        if not isinstance(backend, CheckpointKeeper):
            return
        try:
            backend.check_deletable(plan.target.partition(":")[2])
        except errors.Conflict as exc:
            self.audit.append(
                "precondition.failed",
                principal=str(principal),
                subject=plan.target,
                data={"plan_hash": plan.hash, "problems": [exc.message]},
            )
            raise

    def stale_reasons(self, plan: Plan) -> list[str]:
        """What no longer holds of the plan's preconditions (empty: it still fits); reads only."""
        return self._stale(plan)

    def _stale(self, plan: Plan) -> list[str]:
        pre = plan.preconditions
        problems: list[str] = []
        if pre.workload is not None:
            try:
                now = self.get_workload(pre.workload)
            except errors.NotFound:
                problems.append(f"{pre.workload} no longer exists")
            else:
                if pre.state is not None and _comparable(now.state) is not pre.state:
                    problems.append(
                        f"{pre.workload} is now {now.state.value} (it was {pre.state.value})"
                    )
                if bool(pre.killed) != (now.exit_status == KILLED):
                    problems.append(
                        f"{pre.workload} was killed by a person since"
                        if not pre.killed
                        else f"{pre.workload} is no longer the workload a person killed"
                    )
                if pre.node is not None and now.node != pre.node:
                    problems.append(
                        f"{pre.workload} is now on {now.node or 'no node'} (it was on {pre.node})"
                    )
        if pre.checkpoint is not None:
            lineage = pre.checkpoint.partition(":")[2].partition("@")[0]
            listed = self.backend(plan.backend).checkpoints(lineage)
            found = next((c for c in listed if c.id == pre.checkpoint), None)
            if found is None:
                problems.append(f"checkpoint {pre.checkpoint} no longer exists")
            elif found.status in (CheckpointStatus.CORRUPT, CheckpointStatus.UNTRUSTED):
                problems.append(
                    f"checkpoint {pre.checkpoint} no longer verifies ({found.status.value})"
                )
        return problems

    # ------------------------------------------------------------------ acting
    def plan_needing_person(
        self,
        action: Action,
        target: str,
        params: RawParams,
        *,
        principal: Principal,
        client: str,
        transport: str,
    ) -> Plan | None:
        """The plan when running it for ``principal`` would need an approval that the user of
        the calling client (``client`` over ``transport``) may give; otherwise None.

        None when the operator does not let this client's answers approve (``[mcp]``), when
        a standing approval covers the plan or the policy allows or denies it outright, when
        the rule demands out-of-band approval, or when the plan is invalid (the real call
        then reports why). It is the guard's side-effect-free preview (no grant use, no
        audit entry), so a caller may ask more than once per call."""
        if not self.settings.mcp.allows_elicitation(client, transport):
            return None
        try:
            plan = self.plan(action, target, params)
        except errors.ClawpointError:
            return None
        decision = self.guard.preview(plan, principal, self.policy_context(plan))
        if decision.outcome is Outcome.APPROVE and self._approver_kind(decision) != "out-of-band":
            return plan
        return None

    def _approver_kind(self, decision: Decision) -> ApprovalKind:
        """Who may approve a plan the policy sends to a person: the rule's choice, but a
        destructive plan needs a person on a people path (out-of-band) unless the operator
        opted destructive plans into client answers (``[mcp] elicitation_destructive``): a
        client that declares an allowed name is not a person vouching for lost work."""
        if decision.risk is RiskClass.DESTRUCTIVE and not self.settings.mcp.elicitation_destructive:
            return "out-of-band"
        return decision.approval

    def perform(
        self,
        plan: Plan,
        *,
        principal: Principal,
        confirmed: bool = False,
        dry_run: bool = False,
        progress: ProgressFn = no_progress,
        trigger: str | None = None,
        ask_client: ClientAsker | None = None,
    ) -> ActionResult:
        """Decide and (if allowed) execute a plan made by ``plan``.

        - ``dry_run``: the guard's preview, reported as ``planned``; spends nothing;
        - policy ``allow`` (or a standing approval, whose use is claimed now): execute;
        - ``deny``: return ``denied`` with the reason, change nothing;
        - ``approve``: a person acting directly (CLI) approves by confirming this exact plan;
          anyone else gets a pending approval bound to the plan hash and to the requesting
          principal. When the operator lets this client's answers approve (``[mcp]
          elicitation_approval``), the rule does not demand out-of-band approval and the
          client's user accepts (``ask_client``), the approval is recorded as confirmed by
          the client's user and the plan runs; otherwise ``approval_required`` with the
          ways a person can approve. No way to reach a person = refused (fail closed).
        """
        if plan.hash != plan.compute_hash():
            raise errors.InvalidInput(
                "the plan was changed after it was made",
                hint="make a new plan and use it unchanged",
            )
        dry_run = dry_run or self.guard.policy.dry_run
        # Dry runs are audited within a budget (core.guardrails.dry_runs); everything else is.
        admitted = self.dry_runs.admit(str(principal), plan.hash) if dry_run else "audit"
        if admitted == "audit":
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
                    "trigger": trigger,
                },
            )
            decision = self.guard.decide(
                plan, principal, self.policy_context(plan), trigger=trigger, dry_run=dry_run
            )
        else:
            decision = self.guard.preview(
                plan, principal, self.policy_context(plan), trigger=trigger
            )
        if admitted == "note":
            self.audit.append(
                "dry-run.unaudited",
                principal=str(principal),
                subject=plan.target,
                data={
                    "per_window": self.dry_runs.per_window,
                    "window_s": self.dry_runs.window_s,
                    "resumes_in_s": round(self.dry_runs.resumes_in(str(principal)), 1),
                },
            )
        if dry_run:
            return ActionResult(
                status="planned", plan=plan, message=_dry_run_message(decision, principal)
            )
        if decision.outcome is Outcome.DENY:
            return ActionResult(status="denied", plan=plan, message=decision.reason)
        if decision.outcome is Outcome.ALLOW:
            return self._execute(plan, principal=principal, progress=progress)
        if principal.kind is PrincipalKind.PERSON:
            if confirmed:
                self.audit.append(
                    "approval.confirmed",
                    principal=str(principal),
                    subject=plan.target,
                    data={"plan_hash": plan.hash, "via": "terminal"},
                )
                return self._execute(plan, principal=principal, progress=progress)
            return ActionResult(
                status="approval_required",
                plan=plan,
                message=f"{decision.reason} Confirm this plan (interactively or with --yes).",
            )
        needs = self._approver_kind(decision)
        asker = ask_client
        if asker is not None and not (
            self.settings.mcp.allows_elicitation(asker.client, asker.transport)
            and needs != "out-of-band"
        ):
            asker = None  # the operator did not allow it, or the rule wants a person
        asked_at = utcnow()
        try:
            view, paths = self.guard.request_approval(
                plan,
                principal,
                plan.reason,
                elicitation_available=asker is not None,
                needs=needs,
            )
        except errors.PolicyDenied as exc:
            return ActionResult(status="denied", plan=plan, message=str(exc))
        if asker is not None and view.plan_hash == plan.hash:
            # Only about the exact plan waiting: a repeat of another plan is not asked.
            answer = asker.ask(plan, view)
            if answer is not None:
                user = Principal(
                    id=f"elicitation:{_label(asker.client)}@{principal.id}",
                    kind=PrincipalKind.CLIENT_USER,
                )
                self.guard.approvals.confirm_by_client(
                    view.id,
                    user,
                    approved=answer.approved,
                    note=answer.note or ("" if answer.approved else "declined"),
                )
                if answer.approved:
                    return self._execute_approved(
                        view.id, plan, principal=principal, progress=progress
                    )
                return ActionResult(
                    status="denied",
                    plan=plan,
                    message=f"the user of your client declined: {answer.note or 'no reason given'}",
                )
        if view.created_at < asked_at:  # the same request was already waiting: no new one
            message = (
                f"Approval {view.id} for the {plan.action.value} of {plan.target} was already "
                f"waiting for a person (asked at {view.created_at:%H:%M:%S} UTC"
                + ("" if _same_but_reason(view.plan, plan) else "; it has other parameters")
                + f"); no new request was made. It waits until {view.expires_at:%H:%M:%S} UTC. "
                "Do not retry."
            )
        else:
            message = (
                f"{decision.reason} Approval {view.id} is waiting for a person until "
                f"{view.expires_at:%H:%M:%S} UTC; explain the plan to them. Do not retry."
            )
        return ActionResult(
            status="approval_required",
            plan=view.plan,
            message=message,
            approval=_approval_info(view, paths),
        )

    def execute_approved(
        self,
        approval_id: str,
        *,
        principal: Principal,
        code: str | None = None,
        progress: ProgressFn = no_progress,
    ) -> ActionResult:
        """Run the exact plan a person approved, once. ``code``: the one-time code a person
        gave the agent in chat (counts a failed attempt when wrong)."""
        if code is not None:
            self.guard.approvals.approve_with_code(approval_id, code, principal)
        view = self.guard.approvals.get(approval_id)
        if view.status is ApprovalStatus.PENDING:
            # Wait, never "ask again": asking again would make a person decide twice.
            raise not_usable(view)
        plan = view.plan
        if plan.compute_hash() != view.plan_hash:
            raise errors.PolicyDenied(
                f"approval {approval_id} does not match its stored plan",
                hint="request a new approval",
            )
        return self._execute_approved(approval_id, plan, principal=principal, progress=progress)

    def _execute_approved(
        self, approval_id: str, plan: Plan, *, principal: Principal, progress: ProgressFn
    ) -> ActionResult:
        # Limits (rate, concurrency, blast radius, dry-run) still apply at execution time; a
        # standing approval's budget is not spent on a plan a person already approved.
        decision = self.guard.decide(plan, principal, self.policy_context(plan), approved=True)
        if decision.outcome is Outcome.DENY:
            return ActionResult(status="denied", plan=plan, message=decision.reason)
        if self.guard.approvals.get(approval_id).status is ApprovalStatus.APPROVED:
            # Before the approval is used (a used or expired one is refused by consume): a
            # stale plan, or one another execution is changing the workload under, is
            # refused with its approval still unused.
            self.check_preconditions(plan, principal=principal)
            self.journal.check_lease(plan)
        self.guard.consume(approval_id, plan, principal)
        return self._execute(plan, principal=principal, progress=progress, checked=True)

    def _execute(
        self, plan: Plan, *, principal: Principal, progress: ProgressFn, checked: bool = False
    ) -> ActionResult:
        if not checked:
            self.check_preconditions(plan, principal=principal)
        backend = self.backend(plan.backend)

        def audited(conn: sqlite3.Connection, execution: Execution) -> None:
            self.audit.append_in(
                conn,
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

        departure = self.moves.departure(self, plan)  # None unless the plan moves a workload
        # Audited in the transaction that finishes the execution: both or neither.
        execution = self.executor.run(
            plan, backend, principal=str(principal), progress=progress, then=audited
        )
        if execution.status is ExecutionStatus.SUCCEEDED:
            self.moves.arrived(self, departure)
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
        params: RawParams = None,
        *,
        principal: Principal,
        reason: str = "",
        interface: Interface = Interface.MCP,
        confirmed: bool = False,
        dry_run: bool = False,
        progress: ProgressFn = no_progress,
        trigger: str | None = None,
        ask_client: ClientAsker | None = None,
    ) -> ActionResult:
        """Plan and perform in one call (what the CLI, the action tools and watch use).

        A backend that cannot do the action answers ``denied`` with the reason."""
        try:
            plan = self.plan(action, target, params, reason=reason, interface=interface)
        except errors.NotSupported as exc:
            self.audit.append(
                "decision",
                principal=str(principal),
                subject=target,
                data={"action": action.value, "outcome": "deny", "reason": exc.message},
            )
            return ActionResult(status="denied", plan=None, message=f"{exc.message}. {exc.hint}")
        return self.perform(
            plan,
            principal=principal,
            confirmed=confirmed,
            dry_run=dry_run,
            progress=progress,
            trigger=trigger,
            ask_client=ask_client,
        )

    # ------------------------------------------------------------------ workloads
    def _offering(self, what: str, backend: str | None, has: Callable[[Backend], bool]) -> str:
        """The named backend (or the first configured one) for which ``has`` holds."""
        if backend is not None and backend not in self.backends:
            raise errors.NotSupported(
                f"the {backend} backend is not enabled",
                hint=f"set [{backend}] enabled = true in the config (docs/{backend}.md)",
                details={"backend": backend},
            )
        for name in [backend] if backend else list(self.backends):
            if has(self.backends[name]):
                return name
        who = f"the {backend} backend cannot" if backend else "no configured backend can"
        raise errors.NotSupported(
            f"{who} {what}",
            hint="enable a backend that can (docs/configuration.md lists each backend's section)",
            details={"backend": backend, "capability": what},
        )

    def _launcher(self, backend: str | None) -> tuple[str, Launcher]:
        name = self._offering("start workloads", backend, lambda b: isinstance(b, Launcher))
        return name, cast(Launcher, self.backends[name])

    def _submitter(self, backend: str | None) -> BatchSubmitter:
        name = self._offering("submit batch jobs", backend, lambda b: isinstance(b, BatchSubmitter))
        return cast(BatchSubmitter, self.backends[name])

    def run_workload(
        self, spec: RunSpec, *, detach: bool, principal: Principal, backend: str | None = None
    ) -> int | WorkloadInfo:
        """Start (or restore) a workload under the wrapper on a node of a ``Launcher`` backend
        (the first configured one when ``backend`` is None).

        Detached: returns the running workload. Foreground: runs it to completion in this
        process and returns the wrapper's exit code.
        """
        name, launcher = self._launcher(backend)
        spec = launcher.place(spec)
        self.audit.append(
            "run",
            principal=str(principal),
            subject=f"{name}:{spec.name}",
            data={
                "node": spec.node,
                "engine": spec.engine,
                "command": spec.command,
                "detach": detach,
                "start_mode": spec.start_mode,
            },
        )
        return launcher.launch(spec, detach=detach)

    def render_batch(self, spec: BatchSpec, *, backend: str | None = None) -> str:
        """What ``submit_batch`` would submit (the batch script); submits nothing."""
        return self._submitter(backend).render_batch(spec)

    def submit_batch(
        self, spec: BatchSpec, *, principal: Principal, backend: str | None = None
    ) -> str:
        """Submit a checkpointable batch job (the payload runs under the wrapper); its id."""
        workload = self._submitter(backend).submit_batch(spec)
        self.audit.append("submit", principal=str(principal), subject=workload,
                          data={"lineage": spec.lineage, "command": spec.command,
                                "partition": spec.partition})  # fmt: skip
        return workload

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
