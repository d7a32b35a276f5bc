"""The models of the guardrails' config sections: ``[policy]``, ``[approvals]``, ``[notify]``.

Role: ``core.config`` gathers every section's model and every layer reads the settings, so
these models live here, below all layers, and the guardrails that act on them import them
from here (``core.guardrails.policy`` re-exports the policy models). Limits: validation and
the pure matching of a rule against a plan only; deciding, approving and notifying stay in
``core.guardrails``.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from core import errors
from core.durations import parse_duration
from core.model import Action, Plan, PrincipalKind, RiskClass
from core.schema_base import Model

Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HOURS_RE = re.compile(r"^(\d{1,2})-(\d{1,2})$")
# "any": a person on a people path or, where the operator allows it, the user of the agent's
# client answering an elicitation; "out-of-band": a person on a people path only.
ApprovalKind = Literal["any", "out-of-band"]


class Outcome(StrEnum):
    ALLOW = "allow"
    APPROVE = "approve"  # a person must approve this exact plan (or a standing grant covers it)
    DENY = "deny"


class _Section(Model):
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
    gpus_min: int | None = Field(default=None, ge=0, le=1024)
    gpus_max: int | None = Field(default=None, ge=0, le=1024)
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
        for have, allowed in (
            (scope.namespace, self.namespaces),
            (scope.partition, self.partitions),
            (scope.node, self.nodes),
        ):
            if allowed is not None and have not in allowed:
                return False
        if not _labels_match(self.node_labels, scope.node_labels):
            return False
        if not _labels_match(self.target_node_labels, scope.target_node_labels):
            return False
        if not _labels_match(self.workload_labels, scope.labels):
            return False
        if self.gpus_min is not None or self.gpus_max is not None:
            gpus = scope.gpus
            if gpus is None:
                return False
            if self.gpus_min is not None and gpus < self.gpus_min:
                return False
            if self.gpus_max is not None and gpus > self.gpus_max:
                return False
        return self.when is None or any(w.contains(now) for w in self.when)


def _labels_match(wanted: dict[str, str], have: dict[str, str] | None) -> bool:
    if not wanted:
        return True
    if have is None:
        return False
    return all(k in have and have[k] == v for k, v in wanted.items())


class PolicyLimits(_Section):
    # Disruptive or destructive executions running at the same time (0 = none at all).
    max_concurrent_disruptive: int = Field(default=2, ge=0, le=1_000_000)
    # Share of a pool that may be disrupted at once: nodes drained for drain_node, workloads
    # paused or moved otherwise. At least one is always allowed so small pools still work.
    max_blast_radius: float = Field(default=0.5, gt=0, le=1)
    # Executions per risk class in any rolling hour; a class left out is unlimited.
    rate_per_hour: dict[RiskClass, int] = Field(
        default_factory=lambda: {RiskClass.DISRUPTIVE: 30, RiskClass.DESTRUCTIVE: 10}
    )
    # Checkpoints agents may take of ONE workload in any rolling hour (each one pauses it;
    # a person's are not counted). 0 = agents may not checkpoint at all.
    agent_checkpoints_per_hour: int = Field(default=6, ge=0, le=1_000_000)

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


class ApprovalsConfig(Model):
    """The ``[approvals]`` section."""

    model_config = ConfigDict(extra="forbid")

    expiry: str = "15m"  # how long a request waits for a person, and then how long it stays usable
    max_code_attempts: int = Field(default=3, ge=1, le=10)
    code_length: int = Field(default=8, ge=6, le=12)
    # Pending requests one agent (all its sessions) or the scheduler may have waiting at
    # once; past it a new request is refused (code approval-cap), so a runaway agent cannot
    # bury the requests that matter. People confirm their own plans and are not counted.
    max_pending_per_principal: int = Field(default=20, ge=1, le=10_000)
    cli_enabled: bool = True  # a person can run 'clawpoint approvals approve ID' on this host
    cli_command: str = "clawpoint"
    page_url: str | None = (
        None  # base URL of the approval page, e.g. http://127.0.0.1:8765/approvals
    )

    @field_validator("expiry")
    @classmethod
    def _check_expiry(cls, value: str) -> str:
        try:
            parse_duration(value, what="approvals.expiry")
        except errors.InvalidInput as exc:
            raise ValueError(exc.message) from exc
        return value

    @property
    def expiry_delta(self) -> timedelta:
        return parse_duration(self.expiry, what="approvals.expiry")


class NotifyConfig(Model):
    """The ``[notify]`` section."""

    model_config = ConfigDict(extra="forbid")

    webhook_url: str | None = None  # e.g. a Slack incoming webhook; absent = no notifications
    timeout_s: float = Field(default=5.0, gt=0, le=60)
    attempts: int = Field(default=3, ge=1, le=10)
    headers: dict[str, str] = Field(default_factory=dict)  # e.g. an Authorization header

    @field_validator("webhook_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError("webhook_url must start with https:// (or http:// for a local relay)")
        return value
