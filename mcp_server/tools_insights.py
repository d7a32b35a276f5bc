"""Read-only MCP tools over the signals and the planner: queue depth, SLA risk, spot market,
cluster health and ranked action proposals.

Mount with ``register(mcp, service)`` from ``build_server``. Every tool is read-only (it
never acts and never writes state) and turns ``ClawpointError`` into ``ToolError`` with the
hint. ``spot_market``, ``cluster_health`` and ``plan_actions`` read the cloud notices and
GPU health through ``insights.observe``, the function the watch loop uses, so an agent sees
what watch acts on. Outputs (composed in ``core.service.briefs``) are concise records by
default; ``detail=true`` returns the full signal models (sources, raw counters, every price). ``plan_actions`` proposes; acting on a
proposal is the ordinary action tools' job (or the watch loop's, under standing approvals).
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server import MCPServer
from pydantic import Field

from core.service import briefs
from core.service.facade import Service
from mcp_server.common import READ, Detail, call


def register(mcp: MCPServer[Any], service: Service) -> None:
    """Add the insight tools to ``mcp``; each is a single call into ``core.service.briefs``."""

    @mcp.tool(title="Queue depth", annotations=READ)
    async def queue_depth(
        backend: Annotated[str | None, Field(description="Omit for all")] = None,
    ) -> briefs.QueueDepthList:
        """Pending and running work per backend/partition: pending by reason, oldest wait,
        GPUs requested (a long wait: a 'backlog' the planner may free room for)."""
        return await call(lambda: briefs.queue_depth(service, backend))

    @mcp.tool(title="SLA risk", annotations=READ)
    async def sla_risk(detail: Detail = False) -> briefs.SlaRiskList:
        """Workloads with a deadline: ETA, slack, risk (high: ETA past the deadline or slack
        < 10% of the time left) and the node speed that would make it low."""
        return await call(lambda: briefs.sla_risk(service, detail))

    @mcp.tool(title="Spot market", annotations=READ)
    async def spot_market(detail: Detail = False) -> briefs.SpotMarketOut:
        """Spot interruption and maintenance notices the clouds announce now (AWS, GCP,
        Azure; with the workloads on each noticed node), and each node's price."""
        return await call(lambda: briefs.spot_market(service, detail))

    @mcp.tool(title="Cluster health", annotations=READ)
    async def cluster_health(detail: Detail = False) -> briefs.ClusterHealthOut:
        """Node health of every backend, this host's GPUs from NVML (Xid errors, ECC, row
        remapping, lost GPUs) and the notices announced now."""
        return await call(lambda: briefs.cluster_health(service, detail))

    @mcp.tool(title="Plan actions", annotations=READ)
    async def plan_actions(detail: Detail = False) -> briefs.PlanReportOut:
        """Ranked proposals from the current signals (notices, health, SLA risk, queues,
        prices), most urgent first, with the evidence and why. Each names a tool and its
        arguments, ready to call (add reason; dry_run=true first). Executes nothing."""
        return await call(lambda: briefs.plan_actions(service, detail))
