"""Read-only MCP tools over the signals and the planner: queue depth, SLA risk, spot market,
cluster health and ranked action proposals.

Mount with ``register(mcp, service)`` from ``build_server``. Every tool is read-only (it
never acts and never writes state) and turns ``ClawpointError`` into ``ToolError`` with the
hint. ``spot_market``, ``cluster_health`` and ``plan_actions`` read the cloud notices and
GPU health through ``insights.observe``, the function the watch loop uses, so an agent sees
what watch acts on. Outputs are concise records by default; ``detail=true`` returns the full
signal models (sources, raw counters, every price). ``plan_actions`` proposes; acting on a
proposal is the ordinary action tools' job (or the watch loop's, under standing approvals).
"""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server import MCPServer
from pydantic import BaseModel, Field

from core.model import utcnow
from core.service import insights
from core.service.facade import Service
from mcp_server.common import READ, Detail, call, records


class QueueDepthList(BaseModel):
    """Per partition: backend, partition, pending, pending_by_reason, oldest_pending_age_s,
    pending_gpus, running."""

    queues: list[dict[str, Any]]


class SlaRiskList(BaseModel):
    """Per workload, highest risk first: workload, level (low|medium|high), deadline, eta,
    slack_s, needed_speed; estimated (true just after a move: the rate it made on the old
    node at the new node's speed, until progress there is seen)."""

    risks: list[dict[str, Any]]


class SpotMarketOut(BaseModel):
    """notices: node, provider, action, kind (spot|rebalance|maintenance), deadline,
    seconds_left, workloads. nodes: node, spot, price_per_hour, source, discount, workloads.
    providers: provider, available, reason."""

    notices: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    providers: list[dict[str, Any]]


class ClusterHealthOut(BaseModel):
    """nodes: node, health (healthy|degraded|down), schedulable, reasons. gpus: node, index,
    verdict (healthy|degraded|failed), reasons. gpu_status: ok|no_library|no_nvml|error.
    notices: as spot_market."""

    summary: str
    nodes: list[dict[str, Any]]
    gpu_status: str | None
    gpus: list[dict[str, Any]]
    notices: list[dict[str, Any]]
    errors: list[str]


class PlanReportOut(BaseModel):
    """proposals, most urgent first: action, target, tool and arguments (call tool with
    arguments, plus reason, to carry it out), trigger, reason, risk, score, to_node,
    notice_deadline. sla: as sla_risk. notices, gpus: as cluster_health."""

    proposals: list[dict[str, Any]]
    sla: list[dict[str, Any]]
    notices: list[dict[str, Any]]
    gpus: list[dict[str, Any]]
    errors: list[str]


def _spot_market(service: Service, detail: bool) -> SpotMarketOut:
    now = utcnow()
    inventory = service.nodes()  # one inventory read for the prices and the brief
    market = insights.spot_market(service, now=now, nodes=inventory)
    brief = insights.Briefer(service, now, nodes=inventory)
    nodes: list[dict[str, Any]]
    if detail:
        nodes = records(market.nodes)
    else:
        nodes = [
            {"node": m.node, "spot": m.spot, "price_per_hour": m.price_per_hour,
             "source": m.source, "discount": round(m.discount, 3) if m.discount else None,
             "workloads": m.workloads}
            for m in market.nodes
        ]  # fmt: skip
    return SpotMarketOut(
        notices=[brief.notice(n) | (n.model_dump(mode="json") if detail else {})
                 for n in market.notices],
        nodes=nodes,
        providers=records(market.providers) if detail
        else [brief.provider(p) for p in market.providers],
    )  # fmt: skip


def _summary(report: insights.ClusterHealth, gpus: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for n in report.nodes:
        counts[n.health.value] = counts.get(n.health.value, 0) + 1
    parts = [
        f"{len(report.nodes)} nodes: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    ]
    bad = [g for g in gpus if g["verdict"] != "healthy"]
    if gpus:
        parts.append(f"{len(gpus)} GPUs, {len(bad)} not healthy")
    if report.notices:
        parts.append(f"{len(report.notices)} interruption/maintenance notices")
    if report.unavailable:
        parts.append("unavailable: " + ", ".join(sorted(report.unavailable)))
    return "; ".join(parts)


def _cluster_health(service: Service, detail: bool) -> ClusterHealthOut:
    report = insights.cluster_health(service)
    brief = insights.Briefer(service, report.observed_at)
    gpus = report.gpus.gpus if report.gpus is not None else []
    node = service.settings.signals.node
    compact_gpus = [brief.gpu(g if g.node else g.model_copy(update={"node": node})) for g in gpus]
    return ClusterHealthOut(
        summary=_summary(report, compact_gpus),
        nodes=records(report.nodes) if detail else [brief.node(n) for n in report.nodes],
        gpu_status=report.gpus.status.value if report.gpus is not None else None,
        gpus=records(gpus) if detail else compact_gpus,
        notices=[brief.notice(n) | (n.model_dump(mode="json") if detail else {})
                 for n in report.notices],
        errors=[f"{name}: {why}" for name, why in sorted(report.unavailable.items())]
        + report.errors,
    )  # fmt: skip


def _plan_actions(service: Service, detail: bool) -> PlanReportOut:
    nodes, workloads = service.nodes(), service.workloads()  # one inventory read per call
    report = insights.propose(service, nodes=nodes, workloads=workloads)
    brief = insights.Briefer(service, report.observed_at, nodes=nodes, workloads=workloads)
    notices = [brief.notice(n) for n in report.notices]
    if detail:
        return PlanReportOut(
            proposals=records(report.proposals),
            sla=records(report.sla), notices=notices, gpus=records(report.gpus),
            errors=report.errors,
        )  # fmt: skip
    return PlanReportOut(
        proposals=[brief.proposal(p) for p in report.proposals],
        sla=[brief.risk(r) for r in report.sla], notices=notices,
        gpus=[brief.gpu(g) for g in report.gpus], errors=report.errors,
    )  # fmt: skip


def register(mcp: MCPServer[Any], service: Service) -> None:
    """Add the insight tools to ``mcp``; each is a single call into ``core.service.insights``."""

    @mcp.tool(title="Queue depth", annotations=READ)
    async def queue_depth(
        backend: Annotated[str | None, Field(description="Omit for all")] = None,
    ) -> QueueDepthList:
        """Pending and running work per backend/partition: pending by reason, oldest wait,
        GPUs requested. A long-waiting queue is a 'backlog' the planner may free room for."""
        return QueueDepthList(
            queues=records(await call(lambda: insights.queue_depth(service, backend)))
        )

    @mcp.tool(title="SLA risk", annotations=READ)
    async def sla_risk(detail: Detail = False) -> SlaRiskList:
        """Workloads with a deadline: ETA, slack and risk level (high when the ETA is past
        the deadline or slack < 10% of the time left), and the node speed that would bring
        the risk back to low."""
        risks = await call(lambda: insights.sla_risk(service))
        if detail:
            return SlaRiskList(risks=records(risks))
        return SlaRiskList(risks=[insights.Briefer.risk(r) for r in risks])

    @mcp.tool(title="Spot market", annotations=READ)
    async def spot_market(detail: Detail = False) -> SpotMarketOut:
        """Spot interruption and maintenance notices the clouds announce now (AWS, GCP,
        Azure; with the workloads on each noticed node), and each node's price."""
        return await call(lambda: _spot_market(service, detail))

    @mcp.tool(title="Cluster health", annotations=READ)
    async def cluster_health(detail: Detail = False) -> ClusterHealthOut:
        """Node health of every backend, this host's GPU health from NVML (Xid errors, ECC,
        row remapping, lost GPUs) and the interruption/maintenance notices announced now."""
        return await call(lambda: _cluster_health(service, detail))

    @mcp.tool(title="Plan actions", annotations=READ)
    async def plan_actions(detail: Detail = False) -> PlanReportOut:
        """Ranked proposals from the current signals (notices, GPU and node health, SLA
        risk, queues, prices), most urgent first, with the SLA risks and notices they rest
        on. Each names the action tool and its arguments, ready to call (add reason; try
        dry_run=true first), and why. Executes nothing."""
        return await call(lambda: _plan_actions(service, detail))
