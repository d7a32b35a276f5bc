"""Read-only MCP tools over the signals and the planner: queue depth, SLA risk, spot market,
cluster health and ranked action proposals.

Mount with ``register(mcp, service)`` from ``build_server``. Every tool is read-only (it
never acts and never writes state), returns a pydantic model, and turns ``ClawpointError``
into ``ToolError`` with the hint. ``plan_actions`` proposes; acting on a proposal is the
ordinary action tools' job (or the watch loop's, under standing approvals).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from core import errors
from core.service import insights
from core.service.facade import Service
from core.signals.queue import QueueDepth
from core.signals.sla import SlaRisk

T = TypeVar("T")

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


class QueueDepthList(BaseModel):
    queues: list[QueueDepth]


class SlaRiskList(BaseModel):
    risks: list[SlaRisk]


def _tool_error(exc: errors.ClawpointError) -> ToolError:
    text = f"{exc.message} (error: {exc.code})"
    if exc.hint:
        text += f" Next step: {exc.hint}"
    return ToolError(text)


async def _call(fn: Callable[[], T]) -> T:
    try:
        return await anyio.to_thread.run_sync(fn)
    except errors.ClawpointError as exc:
        raise _tool_error(exc) from exc


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
        return QueueDepthList(queues=await _call(lambda: insights.queue_depth(service, backend)))

    @mcp.tool(title="SLA risk", annotations=READ_ONLY)
    async def sla_risk() -> SlaRiskList:
        """Workloads with a deadline: progress, ETA, slack and risk level (high when the ETA
        is past the deadline or slack < 10% of the remaining time), and the node speed that
        would bring the risk back to low."""
        return SlaRiskList(risks=await _call(lambda: insights.sla_risk(service)))

    @mcp.tool(title="Spot market", annotations=READ_ONLY)
    async def spot_market() -> insights.SpotMarket:
        """Each node's current price (configured price sources, else the inventory),
        spot flag, on-demand price and discount when known."""
        return await _call(lambda: insights.spot_market(service))

    @mcp.tool(title="Cluster health", annotations=READ_ONLY)
    async def cluster_health() -> insights.ClusterHealth:
        """Node health of every backend (with the flags/conditions that decided it) and this
        host's GPU health from NVML (Xid errors, ECC, row remapping, throttling)."""
        return await _call(lambda: insights.cluster_health(service))

    @mcp.tool(title="Plan actions", annotations=READ_ONLY)
    async def plan_actions() -> insights.PlanReport:
        """Ranked proposals from the current signals, most urgent first. Each gives the
        action, target and params to pass to the action tools, a one-sentence reason, the
        expected effect in numbers, the risk class and a score. Nothing is executed."""
        return await _call(lambda: insights.propose(service))
