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
   -> deny while exceeded;
5. the ordered ``rules``: the first that matches decides;
6. ``defaults`` per risk class.

Standing approvals (grants) are applied on top by ``core.guardrails.guard``; they can turn
"approve" into "allow", never "deny" into anything else. Limits: scope matching reads the
plan's ``scope`` keys (``namespace``, ``partition``, ``node``, ``pool``, ``labels``,
``node_labels``, ``gpus``); a rule that names a key the plan lacks does not match.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core import errors
from core.actions import risk_of
from core.model import Action, Plan, PrincipalKind, RiskClass, utcnow

Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HOURS_RE = re.compile(r"^(\d{1,2})-(\d{1,2})$")
# "any": a person on a people path or, where the operator allows it, the user of the agent's
# client answering an elicitation; "out-of-band": a person on a people path only.
ApprovalKind = Literal["any", "out-of-band"]
_RISK_ORDER = [RiskClass.READ, RiskClass.SAFE, RiskClass.DISRUPTIVE, RiskClass.DESTRUCTIVE]


class Outcome(StrEnum):
    ALLOW = "allow"
    APPROVE = "approve"  # a person must approve this exact plan (or a standing grant covers it)
    DENY = "deny"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TimeWindow(_Section):
    """Days and hours in UTC; ``hours = "22-06"`` wraps past midnight; end hour is exclusive."""

    days: list[Weekday] = Field(default_factory=lambda: list(WEEKDAYS))
    hours: str = "0-24"

    @field_validator("hours")
    @classmethod
    def _check_hours(cls, value: str) -> str:
        match = _HOURS_RE.match(value.strip())
        if not match or int(match.group(1)) > 23 or int(match.group(2)) > 24:
            raise ValueError("hours must look like '8-18' (UTC, start 0-23, end 1-24)")
        if int(match.group(1)) == int(match.group(2)):
            raise ValueError("hours start and end are equal: the window would be empty")
        return value.strip()

    def contains(self, now: datetime) -> bool:
        start, end = (int(x) for x in self.hours.split("-"))
        hour = now.hour
        in_hours = start <= hour < end if start < end else (hour >= start or hour < end)
        # A wrapped window that started yesterday belongs to yesterday's day entry.
        day_index = now.weekday()
        if start > end and hour < end:
            day_index = (day_index - 1) % 7
        return in_hours and WEEKDAYS[day_index] in self.days


class PolicyRule(_Section):
    """One rule. Every condition given must hold; conditions left out match anything."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    outcome: Outcome
    reason: str = ""
    risk: list[RiskClass] | None = None
    actions: list[Action] | None = None
    backends: list[str] | None = None
    namespaces: list[str] | None = None
    partitions: list[str] | None = None
    nodes: list[str] | None = None
    node_labels: dict[str, str] = Field(default_factory=dict)
    # Labels of the node a plan moves work ONTO (migrate, failover, resume, restore, drain).
    target_node_labels: dict[str, str] = Field(default_factory=dict)
    workload_labels: dict[str, str] = Field(default_factory=dict)
    gpus_min: int | None = Field(default=None, ge=0)
    gpus_max: int | None = Field(default=None, ge=0)
    when: list[TimeWindow] | None = None  # matches inside any of these windows
    principals: list[PrincipalKind] | None = None  # who asks: agent, person, scheduler
    # For outcome "approve": "out-of-band" demands a person on a people path (CLI, approval
    # page, webhook code); an answer from the agent's own client (elicitation) never counts.
    approval: ApprovalKind = "any"

    def matches(
        self, plan: Plan, risk: RiskClass, now: datetime, principal: PrincipalKind | None = None
    ) -> bool:
        scope = plan.scope
        if self.principals is not None and principal not in self.principals:
            return False
        if self.risk is not None and risk not in self.risk:
            return False
        if self.actions is not None and plan.action not in self.actions:
            return False
        if self.backends is not None and plan.backend not in self.backends:
            return False
        for key, allowed in (
            ("namespace", self.namespaces),
            ("partition", self.partitions),
            ("node", self.nodes),
        ):
            if allowed is not None and scope.get(key) not in allowed:
                return False
        if not _labels_match(self.node_labels, scope.get("node_labels")):
            return False
        if not _labels_match(self.target_node_labels, scope.get("target_node_labels")):
            return False
        if not _labels_match(self.workload_labels, scope.get("labels")):
            return False
        if self.gpus_min is not None or self.gpus_max is not None:
            gpus = scope.get("gpus")
            if not isinstance(gpus, int):
                return False
            if self.gpus_min is not None and gpus < self.gpus_min:
                return False
            if self.gpus_max is not None and gpus > self.gpus_max:
                return False
        return self.when is None or any(w.contains(now) for w in self.when)


def _labels_match(wanted: dict[str, str], have: Any) -> bool:
    if not wanted:
        return True
    if not isinstance(have, dict):
        return False
    return all(k in have and str(have[k]) == v for k, v in wanted.items())


class PolicyLimits(_Section):
    # Disruptive or destructive executions running at the same time (0 = none at all).
    max_concurrent_disruptive: int = Field(default=2, ge=0)
    # Share of a pool that may be disrupted at once: nodes drained for drain_node, workloads
    # paused or moved otherwise. At least one is always allowed so small pools still work.
    max_blast_radius: float = Field(default=0.5, gt=0, le=1)
    # Executions per risk class in any rolling hour; a class left out is unlimited.
    rate_per_hour: dict[RiskClass, int] = Field(
        default_factory=lambda: {RiskClass.DISRUPTIVE: 30, RiskClass.DESTRUCTIVE: 10}
    )
    # Checkpoints agents may take of ONE workload in any rolling hour (each one pauses it;
    # a person's are not counted). 0 = agents may not checkpoint at all.
    agent_checkpoints_per_hour: int = Field(default=6, ge=0)

    @field_validator("rate_per_hour")
    @classmethod
    def _non_negative(cls, value: dict[RiskClass, int]) -> dict[RiskClass, int]:
        for risk, count in value.items():
            if count < 0:
                raise ValueError(f"rate for {risk.value} must be >= 0")
        return value


def _default_outcomes() -> dict[RiskClass, Outcome]:
    return {
        RiskClass.READ: Outcome.ALLOW,
        RiskClass.SAFE: Outcome.ALLOW,
        RiskClass.DISRUPTIVE: Outcome.APPROVE,
        RiskClass.DESTRUCTIVE: Outcome.APPROVE,
    }


class PolicyConfig(_Section):
    """The ``[policy]`` section. With no section at all these defaults apply."""

    dry_run: bool = False  # plan everything, execute nothing
    protect_newest_checkpoint: bool = True  # never delete a live workload's newest good image
    defaults: dict[RiskClass, Outcome] = Field(default_factory=_default_outcomes)
    rules: list[PolicyRule] = Field(default_factory=list)
    limits: PolicyLimits = Field(default_factory=PolicyLimits)

    @model_validator(mode="after")
    def _check(self) -> PolicyConfig:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.id in seen:
                raise ValueError(f"rule id {rule.id!r} is used twice; ids must be unique")
            seen.add(rule.id)
        if self.defaults.get(RiskClass.READ, Outcome.ALLOW) is not Outcome.ALLOW:
            raise ValueError("defaults.read must stay 'allow' (plans and reads are never gated)")
        # Missing classes fall back to the documented defaults, so a partial table is fine.
        self.defaults = {**_default_outcomes(), **self.defaults}
        return self

    @classmethod
    def from_mapping(cls, data: dict[str, Any], *, source: str = "[policy]") -> PolicyConfig:
        """Validate a parsed TOML section; InvalidInput names each bad key (policy.rules.0.x)."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"policy.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
            )
            raise errors.InvalidInput(
                f"{source} has problems: {problems}",
                hint="fix these keys (see docs/guardrails.md), then run 'clawpoint config check'",
            ) from exc


class PoolLoad(BaseModel):
    """How much of one pool (partition, namespace, node group) is disrupted right now."""

    nodes: int = Field(default=0, ge=0)
    nodes_drained: int = Field(default=0, ge=0)
    workloads: int = Field(default=0, ge=0)
    workloads_disrupted: int = Field(default=0, ge=0)


class PolicyContext(BaseModel):
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


class Decision(BaseModel):
    outcome: Outcome
    # Who may approve when the outcome is "approve" (see ``PolicyRule.approval``).
    approval: ApprovalKind = "any"
    reason: str  # one sentence a person can read
    rule_id: str  # a rule id, "default:<risk>", "limit:<name>", "dry-run", ...
    grant_id: str | None = None
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
    for key in ("pool", "partition", "namespace"):
        value = plan.scope.get(key)
        if isinstance(value, str) and value:
            return value
    return plan.backend


def evaluate(plan: Plan, policy: PolicyConfig, context: PolicyContext) -> Decision:
    risk = effective_risk(plan)

    def decide(
        outcome: Outcome, rule_id: str, reason: str, approval: ApprovalKind = "any"
    ) -> Decision:
        return Decision(
            outcome=outcome,
            approval=approval,
            reason=reason,
            rule_id=rule_id,
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


def _agent_checkpoints_exhausted(plan: Plan, limits: PolicyLimits, context: PolicyContext) -> bool:
    return (
        plan.action is Action.CHECKPOINT
        and context.principal_kind is PrincipalKind.AGENT
        and context.agent_checkpoints_last_hour >= limits.agent_checkpoints_per_hour
    )


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
