"""Read-only MCP tools over the signals and the planner: queue depth, SLA risk, spot market,
cluster health and ranked action proposals.

Mount with ``register(mcp, service)`` from ``build_server``. Every tool is read-only (it
never acts and never writes state), returns a pydantic model, and turns ``ClawpointError``
into ``ToolError`` with the hint. ``plan_actions`` proposes; acting on a proposal is the
ordinary action tools' job (or the watch loop's, under standing approvals).
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from mcp.server import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from core.service import insights
from core.service.facade import Service
from mcp_server.common import OpenRecord, call, open_record, records

T = TypeVar("T")

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


class QueueDepthList(BaseModel):
    """Per partition: backend, partition, pending, pending_by_reason, oldest_pending_age_s,
    pending_gpus, running."""

    queues: list[dict[str, Any]]


class SlaRiskList(BaseModel):
    """Per workload: workload, risk (low|medium|high), deadline, eta, slack_s, progress,
    rate, needed_speed, reason."""

    risks: list[dict[str, Any]]


class SpotMarketOut(OpenRecord):
    """Prices per node (price_per_hour, on_demand, discount, source) and interruption notices."""


class ClusterHealthOut(OpenRecord):
    """Node health signals (node, verdict, reasons) and GPU health from NVML when enabled."""


class PlanReportOut(OpenRecord):
    """Ranked proposals: action, target, params, trigger, reason, effect (numbers), risk,
    score. Execute one with the matching action tool (same target and params)."""


def register(mcp: MCPServer[Any], service: Service) -> None:
    """Add the insight tools to ``mcp``; each is a single call into ``core.service.insights``."""

    @mcp.tool(title="Queue depth", annotations=READ_ONLY)
    async def queue_depth(
        backend: Annotated[
            str | None, Field(description="local | slurm | kubernetes; omit for all")
        ] = None,
    ) -> QueueDepthList:
        """Pending and running work per backend/partition: pending by reason, oldest wait,
        GPUs requested. A long-waiting queue is a 'backlog' the planner may free room for."""
        return QueueDepthList(
            queues=records(await call(lambda: insights.queue_depth(service, backend)))
        )

    @mcp.tool(title="SLA risk", annotations=READ_ONLY)
    async def sla_risk() -> SlaRiskList:
        """Workloads with a deadline: progress, ETA, slack and risk level (high when the ETA
        is past the deadline or slack < 10% of the remaining time), and the node speed that
        would bring the risk back to low."""
        return SlaRiskList(risks=records(await call(lambda: insights.sla_risk(service))))

    @mcp.tool(title="Spot market", annotations=READ_ONLY)
    async def spot_market() -> SpotMarketOut:
        """Each node's current price (configured price sources, else the inventory),
        spot flag, on-demand price and discount when known."""
        return open_record(SpotMarketOut, await call(lambda: insights.spot_market(service)))

    @mcp.tool(title="Cluster health", annotations=READ_ONLY)
    async def cluster_health() -> ClusterHealthOut:
        """Node health of every backend (with the flags/conditions that decided it) and this
        host's GPU health from NVML (Xid errors, ECC, row remapping, throttling)."""
        return open_record(ClusterHealthOut, await call(lambda: insights.cluster_health(service)))

    @mcp.tool(title="Plan actions", annotations=READ_ONLY)
    async def plan_actions() -> PlanReportOut:
        """Ranked proposals from the current signals, most urgent first. Each gives the
        action, target and params to pass to the action tools, a one-sentence reason, the
        expected effect in numbers, the risk class and a score. Nothing is executed."""
        return open_record(PlanReportOut, await call(lambda: insights.propose(service)))
