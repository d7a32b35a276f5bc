"""Planning: a sealed, persisted plan, and the check that the world still fits it.

``plan`` parses the parameters against the catalogue (``core.actions``), resolves the
target, asks its backend for a draft, adds the risk class, scope and preconditions and seals
it; it is read-only and always allowed. ``check_preconditions`` refuses, right before the
first step, a plan drafted for a world that has changed since (``Conflict``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core import actions, errors
from core.actions import ActionParams, Interface, Target
from core.backends.base import Backend, CheckpointKeeper, PlanDraft
from core.model import (
    KILLED,
    Action,
    CheckpointStatus,
    Plan,
    PlanScope,
    Preconditions,
    Principal,
    RiskClass,
    WorkloadState,
)
from core.service import drains
from core.service.inventory import Inventory

RawParams = Mapping[str, Any] | ActionParams | None


def _comparable(state: WorkloadState) -> WorkloadState:
    # A periodic checkpoint in progress is still a running workload (the wrapper serialises
    # control requests, so a plan's step simply follows that checkpoint).
    return WorkloadState.RUNNING if state is WorkloadState.CHECKPOINTING else state


def _higher(implied: RiskClass, found: RiskClass | None) -> RiskClass:
    """The parameters' risk, raised (never lowered) to the one the backend found."""
    order = list(RiskClass)  # from the least risky up
    return implied if found is None else max(implied, found, key=order.index)


class Planning(Inventory):
    """Mixin of ``Service``: plans and their preconditions."""

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
        elif spec.target is Target.POOL:
            backend, local_target = self._split(target, what="pool")
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
            risk=_higher(actions.risk_of(action, typed), self._cost_risk(draft)),
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

    def _cost_risk(self, draft: PlanDraft) -> RiskClass | None:
        """The draft's own risk, raised to disruptive when what it adds to the hourly cost
        passes the cap a person set (``[capacity] max_added_per_hour``)."""
        if draft.added_cost_per_hour > self.settings.capacity.max_added_per_hour:
            return _higher(RiskClass.DISRUPTIVE, draft.risk)
        return draft.risk

    def _scope(
        self, backend: Backend, action: Action, local_target: str, scope: PlanScope
    ) -> PlanScope:
        """The backend's scope, plus who drained the node for an undrain (core.service.drains)."""
        if action is not Action.UNDRAIN_NODE:
            return scope
        node = next((n for n in backend.nodes() if n.name == local_target), None)
        return drains.undrain_scope(self.db, node, scope)

    def _preconditions(self, backend: Backend, action: Action, local_target: str) -> Preconditions:
        """What the plan's steps assume (``Preconditions``), read from the world as it is now.

        Every backend reports a workload's state and node the same way, so this is drafted
        here once rather than in each backend's planner."""
        if actions.spec(action).target in (Target.NODE, Target.POOL):
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
        self.audit.for_plan("precondition.failed", plan, principal, {"problems": problems})
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
            self.audit.for_plan("precondition.failed", plan, principal, {"problems": [exc.message]})
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
