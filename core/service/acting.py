"""The perform path: decide, approve, execute, audit.

``perform`` decides whether a sealed plan may run for this principal (``core.guardrails``:
policy, standing approvals, approvals), runs it step by step through the journaled
executor, and appends every stage to the audit chain; ``act`` plans and performs in one
call. Each stage of ``perform`` is a short method of its own.
"""

from __future__ import annotations

import sqlite3

from core import errors
from core.actions import Interface
from core.backends.base import ProgressFn, no_progress
from core.guardrails.approvals import ApprovalStatus, ApprovalView, not_usable
from core.guardrails.policy import ApprovalKind, Decision, Outcome
from core.model import (
    Action,
    Execution,
    ExecutionStatus,
    Plan,
    Principal,
    PrincipalKind,
    RiskClass,
    utcnow,
)
from core.service.moves import current_id
from core.service.outcomes import (
    ActionResult,
    ClientAsker,
    approval_info,
    client_label,
    dry_run_message,
    waiting_message,
)
from core.service.planning import Planning, RawParams


class Acting(Planning):
    """Mixin of ``Service``: deciding on plans and running them."""

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
        self._check_sealed(plan)
        dry_run = dry_run or self.guard.policy.dry_run
        decision = self._decide(plan, principal, trigger=trigger, dry_run=dry_run)
        if dry_run:
            return ActionResult(
                status="planned", plan=plan, message=dry_run_message(decision, principal)
            )
        if decision.outcome is Outcome.DENY:
            return ActionResult(status="denied", plan=plan, message=decision.reason)
        if decision.outcome is Outcome.ALLOW:
            return self._execute(plan, principal=principal, progress=progress)
        if principal.kind is PrincipalKind.PERSON:
            return self._confirm_in_person(
                plan, decision, principal=principal, confirmed=confirmed, progress=progress
            )
        return self._request_approval(
            plan, decision, principal=principal, ask_client=ask_client, progress=progress
        )

    @staticmethod
    def _check_sealed(plan: Plan) -> None:
        """Refuse a plan changed after it was sealed (its hash no longer matches)."""
        if plan.hash != plan.compute_hash():
            raise errors.InvalidInput(
                "the plan was changed after it was made",
                hint="make a new plan and use it unchanged",
            )

    def _decide(
        self, plan: Plan, principal: Principal, *, trigger: str | None, dry_run: bool
    ) -> Decision:
        """The guard's decision, with the plan audited first. A dry run beyond the
        principal's audit budget (core.guardrails.dry_runs) is only previewed, and the first
        one past the budget leaves a note that later ones go unaudited."""
        admitted = self.dry_runs.admit(str(principal), plan.hash) if dry_run else "audit"
        if admitted == "audit":
            self._audit_plan(plan, principal, trigger=trigger)
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
        return decision

    def _audit_plan(self, plan: Plan, principal: Principal, *, trigger: str | None) -> None:
        self.audit.for_plan(
            "plan",
            plan,
            principal,
            {
                "action": plan.action.value,
                "risk": plan.risk.value,
                "reason": plan.reason,
                "summary": plan.summary,
                "trigger": trigger,
            },
        )

    def _confirm_in_person(
        self,
        plan: Plan,
        decision: Decision,
        *,
        principal: Principal,
        confirmed: bool,
        progress: ProgressFn,
    ) -> ActionResult:
        """A person acting directly approves by confirming this exact plan (audited)."""
        if not confirmed:
            return ActionResult(
                status="approval_required",
                plan=plan,
                message=f"{decision.reason} Confirm this plan (interactively or with --yes).",
            )
        self.audit.for_plan("approval.confirmed", plan, principal, {"via": "terminal"})
        return self._execute(plan, principal=principal, progress=progress)

    def _request_approval(
        self,
        plan: Plan,
        decision: Decision,
        *,
        principal: Principal,
        ask_client: ClientAsker | None,
        progress: ProgressFn,
    ) -> ActionResult:
        """A pending approval bound to the plan and principal; the client's user is asked
        when the operator and the rule allow it, and their answer may run the plan now."""
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
            answered = self._ask_client(asker, view, plan, principal=principal, progress=progress)
            if answered is not None:
                return answered
        return ActionResult(
            status="approval_required",
            plan=view.plan,
            message=waiting_message(view, plan, decision, asked_at=asked_at),
            approval=approval_info(view, paths),
        )

    def _ask_client(
        self,
        asker: ClientAsker,
        view: ApprovalView,
        plan: Plan,
        *,
        principal: Principal,
        progress: ProgressFn,
    ) -> ActionResult | None:
        """Ask the user of the agent's client; None when it could not ask. The answer is
        recorded as the client's user's, never as a named person's."""
        answer = asker.ask(plan, view)
        if answer is None:
            return None
        user = Principal(
            id=f"elicitation:{client_label(asker.client)}@{principal.id}",
            kind=PrincipalKind.CLIENT_USER,
        )
        self.guard.approvals.confirm_by_client(
            view.id,
            user,
            approved=answer.approved,
            note=answer.note or ("" if answer.approved else "declined"),
        )
        if answer.approved:
            return self._execute_approved(view.id, plan, principal=principal, progress=progress)
        return ActionResult(
            status="denied",
            plan=plan,
            message=f"the user of your client declined: {answer.note or 'no reason given'}",
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
            self.audit.for_plan(
                "execution",
                plan,
                principal,
                {
                    "execution": execution.id,
                    "status": execution.status.value,
                    "steps": [s.model_dump(mode="json") for s in execution.steps],
                    "error": execution.error,
                },
                conn=conn,
            )

        departure = self.moves.departure(self, plan)  # None unless the plan moves a workload
        # Audited in the transaction that finishes the execution: both or neither.
        execution = self.executor.run(
            plan, backend, principal=str(principal), progress=progress, then=audited
        )
        if execution.status is ExecutionStatus.SUCCEEDED:
            outputs = [s.output or {} for s in execution.steps]
            self.moves.arrived(self, departure, outputs)
            message = plan.summary + ": done"
            if departure is not None and (now := current_id(departure.workload, outputs)) != (
                departure.workload
            ):  # a live move's new job, a pod's copy: the id to use from now on
                message += f"; it runs as {now} now"
            return ActionResult(status="executed", plan=plan, execution=execution, message=message)
        what = "rolled back" if execution.status is ExecutionStatus.ROLLED_BACK else "failed"
        return ActionResult(
            status="failed",
            plan=plan,
            execution=execution,
            message=f"{plan.summary}: {what}: {execution.error}",
            message_neutral=f"{plan.summary}: {what}: {execution.error_neutral}",
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
