"""The policy: which plans may run at once, which need a person, which are refused.

``evaluate(plan, policy, context)`` is a pure function (no I/O, no clock: ``now`` comes in the
context) so it can be tested exhaustively and explained: every ``Decision`` carries a
sentence saying why and the id of the rule or limit that decided. Order of evaluation:

1. read -> allow (planning and looking are always allowed);
2. the global dry-run switch -> deny every mutating plan;
3. protection of the newest good checkpoint of a live workload -> deny its deletion ("good"
   means it verifies: newer corrupt checkpoints do not make it deletable);
3b. checkpoints agents take of one workload per rolling hour -> deny past the limit (each
   pauses the workload, and a checkpoint is "safe", so no person sees them);
4. limits (concurrent disruptive executions, rate per risk class per hour, blast radius)
   -> deny while exceeded; a person's kill passes the concurrency and blast-radius limits
   (it is how a person stops a workload whose move hangs), and its decision says which it
   passed (``passed_limit``, audited with the decision);
5. the ordered ``rules``: the first that matches decides;
6. ``defaults`` per risk class;
7. a plan that sets a person-only parameter (``core.actions.ActionSpec.person_only``, e.g.
   failover's ``fenced``: a fact about the world only a person can vouch for), or that
   restores a workload a person killed (its preconditions say ``killed``), is never
   allowed outright: an "allow" or "approve" becomes "approve" by a person out of band (the
   agent's own client cannot answer it, and ``core.guardrails.guard`` spends no grant on it);
   a "deny" stays a deny. So is an undrain that someone other than a person asks for of
   a node that is down or that a person (or someone outside clawpoint) drained: its plan's
   scope says so (``drained_by``, ``node_down``: ``core.service.drains``); a person at the
   CLI undrains as before, an agent's or watch's undrain of its own drain needs nobody.

Standing approvals (grants) are applied on top by ``core.guardrails.guard``; they can turn
"approve" into "allow", never "deny" into anything else. Limits: scope matching reads the
plan's ``scope`` keys (``namespace``, ``partition``, ``node``, ``pool``, ``labels``,
``node_labels``, ``gpus``); a rule that names a key the plan lacks does not match.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from pydantic import Field

from core.actions import person_claims, risk_of
from core.guardrail_settings import (
    WEEKDAYS,
    ApprovalKind,
    Outcome,
    PolicyConfig,
    PolicyLimits,
    PolicyRule,
    TimeWindow,
    Weekday,
)
from core.model import (
    Action,
    Plan,
    PlanScope,
    PrincipalKind,
    RiskClass,
    WorkloadState,
    utcnow,
)
from core.schema_base import Model

# The [policy] section's models live in core.guardrail_settings (core.config gathers them);
# they are imported above under their own names so callers keep importing them from here.
_RISK_ORDER = [RiskClass.READ, RiskClass.SAFE, RiskClass.DISRUPTIVE, RiskClass.DESTRUCTIVE]


class PoolLoad(Model):
    """How much of one pool (partition, namespace, node group) is disrupted right now."""

    nodes: int = Field(default=0, ge=0)
    nodes_drained: int = Field(default=0, ge=0)
    workloads: int = Field(default=0, ge=0)
    workloads_disrupted: int = Field(default=0, ge=0)


class PolicyContext(Model):
    """What the service knows about the world when it asks; the policy itself never looks."""

    running_disruptive: int = Field(default=0, ge=0)
    actions_last_hour: dict[RiskClass, int] = Field(default_factory=dict)
    pools: dict[str, PoolLoad] = Field(default_factory=dict)
    # True when the plan deletes the newest good checkpoint of a workload that is running.
    deletes_newest_good_checkpoint: bool = False
    # Checkpoints of the plan's workload that agents ran in the last hour (checkpoint plans).
    agent_checkpoints_last_hour: int = Field(default=0, ge=0)
    now: datetime = Field(default_factory=utcnow)
    principal_kind: PrincipalKind | None = None  # filled in by Guard.decide


class Decision(Model):
    outcome: Outcome
    # Who may approve when the outcome is "approve" (see ``PolicyRule.approval``).
    approval: ApprovalKind = "any"
    reason: str  # one sentence a person can read
    rule_id: str  # a rule id, "default:<risk>", "limit:<name>", "dry-run", ...
    grant_id: str | None = None
    # A limit a person's kill was not held back by ("limit:blast-radius"), else None.
    passed_limit: str | None = None
    # The sighting a trigger-scoped grant rested on (``core.guardrails.evidence``).
    evidence: dict[str, Any] | None = None
    risk: RiskClass
    plan_hash: str = ""
    dry_run: bool = False


def effective_risk(plan: Plan) -> RiskClass:
    """The higher of the plan's declared risk and the risk its action and params imply."""
    implied = risk_of(plan.action, plan.params)
    return max(plan.risk, implied, key=_RISK_ORDER.index)


def pool_of(plan: Plan) -> str:
    """The pool a plan's blast radius is counted in: scope pool, partition, namespace, backend."""
    scope = plan.scope
    return scope.pool or scope.partition or scope.namespace or plan.backend


PERSON_ONLY_RULE = "person-only"


def evaluate(plan: Plan, policy: PolicyConfig, context: PolicyContext) -> Decision:
    decision = _evaluate(plan, policy, context)
    claims = person_claims(plan.action, plan.params)
    if plan.preconditions.killed and plan.action in (Action.FAILOVER, Action.RESTORE):
        claims.append("bringing back a workload a person killed")
    if plan.action is Action.UNDRAIN_NODE and context.principal_kind is not PrincipalKind.PERSON:
        claims += undrain_claims(plan.scope)
    if not claims or decision.outcome is Outcome.DENY:
        return decision
    said = ", ".join(claims)
    return decision.model_copy(
        update={
            "outcome": Outcome.APPROVE,
            "approval": "out-of-band",
            "rule_id": f"{PERSON_ONLY_RULE}:{said}",
            "reason": f"The {plan.action.value} of {plan.target} rests on {said}, which only "
            "a person can decide, so a person must approve it out of band (without it: "
            f"{decision.reason})",
        }
    )


def undrain_claims(scope: PlanScope) -> list[str]:
    """What in an undrain plan's scope only a person may decide (empty: nothing). A plan
    without the facts (``drained_by`` absent) is treated as undoing a person's drain."""
    out: list[str] = []
    if scope.node_down:
        out.append("returning a down node to service")
    by = scope.drained_by
    if by not in (PrincipalKind.AGENT.value, PrincipalKind.SCHEDULER.value):
        who = "a person" if by == PrincipalKind.PERSON.value else "someone outside clawpoint"
        out.append(f"undoing a drain made by {who}")
    return out


def _evaluate(plan: Plan, policy: PolicyConfig, context: PolicyContext) -> Decision:
    risk = effective_risk(plan)

    passed: tuple[str, str] | None = None  # a limit a person's kill passed (below)

    def decide(
        outcome: Outcome, rule_id: str, reason: str, approval: ApprovalKind = "any"
    ) -> Decision:
        if passed is not None:
            reason += f" A person's kill is not held back by {passed[0]} ({passed[1]})"
        return Decision(
            outcome=outcome,
            approval=approval,
            reason=reason,
            rule_id=rule_id,
            passed_limit=passed[0] if passed is not None else None,
            risk=risk,
            plan_hash=plan.hash,
            dry_run=policy.dry_run,
        )

    what = f"{plan.action.value} of {plan.target}"
    if risk is RiskClass.READ:
        return decide(Outcome.ALLOW, "default:read", "Reading and planning are always allowed.")
    if policy.dry_run:
        return decide(
            Outcome.DENY,
            "dry-run",
            f"Dry-run mode is on: clawpoint plans the {what} but does not execute it.",
        )
    if (
        policy.protect_newest_checkpoint
        and plan.action is Action.DELETE_CHECKPOINT
        and context.deletes_newest_good_checkpoint
    ):
        return decide(
            Outcome.DENY,
            "protect-newest-checkpoint",
            f"{plan.target} is the newest good checkpoint of a live workload; deleting it "
            "would leave nothing to restore from.",
        )
    if _agent_checkpoints_exhausted(plan, policy.limits, context):
        done, limit = context.agent_checkpoints_last_hour, policy.limits.agent_checkpoints_per_hour
        return decide(
            Outcome.DENY,
            "limit:agent-checkpoints",
            f"Agents checkpointed {plan.target} {done} times in the last hour; the limit is "
            f"{limit} per workload per hour, since each checkpoint pauses it. Use its newest "
            "checkpoint, wait, or ask a person to checkpoint it (clawpoint checkpoint "
            f"{plan.target}).",
        )
    limited = _check_limits(plan, risk, policy.limits, context)
    if (
        limited is not None
        and limited[0] in _A_PERSONS_KILL_PASSES
        and _persons_kill(plan, context)
    ):
        passed, limited = limited, None
    if limited is not None:
        return decide(Outcome.DENY, limited[0], limited[1])
    for rule in policy.rules:
        if rule.matches(plan, risk, context.now, context.principal_kind):
            reason = rule.reason or f"Rule {rule.id!r} says {rule.outcome.value} for the {what}."
            return decide(rule.outcome, rule.id, reason, rule.approval)
    outcome = policy.defaults[risk]
    sentences = {
        Outcome.ALLOW: f"The {what} is {risk.value} and allowed by default.",
        Outcome.APPROVE: f"The {what} is {risk.value}, so a person must approve it.",
        Outcome.DENY: f"The {what} is {risk.value}, and {risk.value} actions are denied.",
    }
    return decide(outcome, f"default:{risk.value}", sentences[outcome])


# The limits a person's kill passes: they would keep a stuck move's workload running.
_A_PERSONS_KILL_PASSES = frozenset({"limit:concurrency", "limit:blast-radius"})


def _persons_kill(plan: Plan, context: PolicyContext) -> bool:
    return plan.action is Action.KILL and context.principal_kind is PrincipalKind.PERSON


def _agent_checkpoints_exhausted(plan: Plan, limits: PolicyLimits, context: PolicyContext) -> bool:
    return (
        plan.action is Action.CHECKPOINT
        and context.principal_kind is PrincipalKind.AGENT
        and context.agent_checkpoints_last_hour >= limits.agent_checkpoints_per_hour
    )


def _restores_service(plan: Plan) -> bool:
    """A failover of a workload that is already down disrupts nothing that still runs: the
    blast radius (how much of a pool is disrupted at once) does not hold it back. Execution
    re-checks the recorded state first, so a workload that came back is never touched."""
    return plan.action is Action.FAILOVER and plan.preconditions.state is WorkloadState.FAILED


def _check_limits(
    plan: Plan, risk: RiskClass, limits: PolicyLimits, context: PolicyContext
) -> tuple[str, str] | None:
    rate = limits.rate_per_hour.get(risk)
    done = context.actions_last_hour.get(risk, 0)
    if rate is not None and done >= rate:
        return (
            f"limit:rate-{risk.value}",
            f"{done} {risk.value} actions ran in the last hour; the limit is {rate} per hour.",
        )
    if risk not in (RiskClass.DISRUPTIVE, RiskClass.DESTRUCTIVE):
        return None
    if context.running_disruptive >= limits.max_concurrent_disruptive:
        return (
            "limit:concurrency",
            f"{context.running_disruptive} disruptive executions are already running; the "
            f"limit is {limits.max_concurrent_disruptive} at a time.",
        )
    if _restores_service(plan):
        return None
    pool_name = pool_of(plan)
    pool = context.pools.get(pool_name)
    if pool is None:
        return None
    if plan.action is Action.DRAIN_NODE:
        total, busy, unit = pool.nodes, pool.nodes_drained, "nodes drained"
    else:
        total, busy, unit = pool.workloads, pool.workloads_disrupted, "workloads disrupted"
    if total <= 0:
        return None
    allowed = max(1, math.floor(limits.max_blast_radius * total))
    if busy + 1 > allowed:
        return (
            "limit:blast-radius",
            f"Pool {pool_name} already has {busy} of {total} {unit}; at most {allowed} "
            f"({limits.max_blast_radius:.0%}) may be at once.",
        )
    return None


__all__ = [
    "PERSON_ONLY_RULE",
    "WEEKDAYS",
    "ApprovalKind",
    "Decision",
    "Outcome",
    "PolicyConfig",
    "PolicyContext",
    "PolicyLimits",
    "PolicyRule",
    "PoolLoad",
    "TimeWindow",
    "Weekday",
    "effective_risk",
    "evaluate",
    "pool_of",
]
