"""What the planner takes and gives: its configuration and input, and the proposals it
returns with their expected effect. Plain pydantic models (no logic beyond a proposal's
computed call); the rules are in ``core.planner.planner`` and its ``*_advice`` modules.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field, computed_field

from core.actions import spec
from core.model import Action, NodeInfo, PoolInfo, RiskClass, WorkloadInfo
from core.planner.capacity_advice import DEADLINE_HORIZON_S, MIN_WAIT_S, SETTLE_S
from core.planner.interval_advice import MIN_FRACTION, MIN_S_PER_H, IntervalCase
from core.planner.resize_advice import GROWTH, PRESSURE
from core.schema_base import Model
from core.signals.model import GpuHealth, InterruptionNotice, NodeHealthSignal
from core.signals.queue import QueueDepth
from core.signals.sla import SlaRisk


class PlannerConfig(Model):
    default_pause_s: float = Field(default=30.0, ge=0, description="pause when none is known")
    # A cost move must save this many times what it costs (1.0 = just more than break-even).
    move_margin: float = Field(default=1.0, ge=0)
    max_cost_moves: int = Field(default=20, ge=0, description="cost moves per pass, best first")
    # An interval change must save this share of the lost work + pause per hour, and this
    # many seconds per hour (core.planner.interval_advice).
    interval_min_fraction: float = Field(default=MIN_FRACTION, ge=0, le=1)
    interval_min_s_per_h: float = Field(default=MIN_S_PER_H, ge=0)
    # A pool grows once its queue's oldest job waited this long; it is not shrunk within
    # pool_settle_s of its last scale_pool (core.planner.capacity_advice).
    pool_min_wait_s: float = Field(default=MIN_WAIT_S, ge=0)
    pool_settle_s: float = Field(default=SETTLE_S, ge=0)
    # A pool also grows at once for a pending workload due within this long.
    pool_deadline_horizon_s: float = Field(default=DEADLINE_HORIZON_S, ge=0)
    # A workload using this share of its memory limit gets a resize to growth x its use
    # (core.planner.resize_advice).
    memory_pressure: float = Field(default=PRESSURE, gt=0, le=1)
    memory_growth: float = Field(default=GROWTH, gt=1)


class PlannerInput(Model):
    nodes: list[NodeInfo]
    workloads: list[WorkloadInfo]
    notices: list[InterruptionNotice] = Field(default_factory=list)
    gpus: list[GpuHealth] = Field(default_factory=list)
    node_health: list[NodeHealthSignal] = Field(default_factory=list)
    sla: list[SlaRisk] = Field(default_factory=list)
    queues: list[QueueDepth] = Field(default_factory=list)
    remaining_s: dict[str, float] = Field(
        default_factory=dict, description="work left per workload"
    )
    rate: dict[str, float] = Field(default_factory=dict, description="steps/s per workload")
    pause_s: dict[str, float] = Field(
        default_factory=dict, description="expected pause per workload"
    )
    last_checkpoint_at: dict[str, datetime] = Field(default_factory=dict)
    prices: dict[str, float] = Field(default_factory=dict, description="node id -> current price")
    intervals: dict[str, IntervalCase] = Field(
        default_factory=dict,
        description="workload id -> its checkpoint interval advice (only workloads with a "
        "measured checkpoint cost whose backend can set_checkpoint_interval)",
    )
    pools: list[PoolInfo] = Field(default_factory=list, description="node pools (PoolSource)")
    pools_scaled_at: dict[str, datetime] = Field(
        default_factory=dict, description="pool id -> when a scale_pool of it last succeeded"
    )
    pool_cost_cap: float | None = Field(
        default=None, description="[capacity] max_added_per_hour: a dearer growth is disruptive"
    )
    release_idle: bool = Field(
        default=False, description="[capacity] release_idle: propose releasing idle pool nodes"
    )
    resize_backends: list[str] = Field(
        default_factory=list, description="backends that can resize a workload"
    )


class Effect(Model):
    """What a proposal is expected to change, in numbers (None = not known)."""

    work_at_risk_s: float | None = None
    work_at_risk_steps: int | None = None
    pause_s: float | None = None
    cost_per_hour_before: float | None = None
    cost_per_hour_after: float | None = None
    slack_before_s: float | None = None
    slack_after_s: float | None = None
    net_saving: float | None = Field(default=None, description="money saved minus move cost")
    # The queue wait a pool growth addresses: its oldest pending job's wait, seconds.
    queue_wait_s: float | None = None
    move_cost: float | None = None
    notice_deadline: datetime | None = None
    # Expected lost work + checkpoint pause, seconds per hour (the interval rule).
    checkpoint_s_per_h_before: float | None = None
    checkpoint_s_per_h_after: float | None = None


class Proposal(Model):
    action: Action
    target: str
    params: dict[str, Any] = Field(default_factory=dict)
    trigger: str
    reason: str
    effect: Effect
    risk: RiskClass
    score: float
    node: str | None = None
    to_node: str | None = None

    # What makes a proposal callable as it stands: the MCP tool (also the runbook call) and
    # the arguments valid against its input schema. Computed, so they cannot drift from
    # ``action``/``target``/``params``; ``reason`` and ``dry_run`` are the caller's to add.
    @computed_field  # type: ignore[prop-decorator]
    @property
    def tool(self) -> str:
        return spec(self.action).mcp_tool

    @computed_field  # type: ignore[prop-decorator]
    @property
    def arguments(self) -> dict[str, Any]:
        return {spec(self.action).target.value: self.target, **self.params}

    @property
    def key(self) -> str:
        return f"{self.trigger}|{self.action.value}|{self.target}"
