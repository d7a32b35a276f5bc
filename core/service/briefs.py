"""What the read-only insight tools show: compact briefs by default, full signal models with
``detail``.

Composes ``core.service.insights`` (collection and ranking) with its ``Briefer`` (the compact
record of each signal) into one output model per tool (``queue_depth``, ``sla_risk``,
``spot_market``, ``cluster_health``, ``plan_actions``); each model's docstring names the
fields an agent reads. Read-only: never acts, never writes state. The MCP server only
registers these as tools (``mcp_server.tools_insights``).
"""

from __future__ import annotations

from typing import Any

from core.model import utcnow
from core.schema_base import Model
from core.service import insights
from core.service.facade import Service
from core.service.views import records


class QueueDepthList(Model):
    """Per partition: backend, partition, pending, pending_by_reason, oldest_pending_age_s,
    pending_gpus, running."""

    queues: list[dict[str, Any]]


class SlaRiskList(Model):
    """Per workload, highest risk first: workload, level (low|medium|high), deadline, eta,
    slack_s, needed_speed; estimated (true just after a move: the rate it made on the old
    node at the new node's speed, until progress there is seen)."""

    risks: list[dict[str, Any]]


class SpotMarketOut(Model):
    """notices: node, provider, action, kind (spot|rebalance|maintenance), deadline,
    seconds_left, workloads. nodes: node, spot, price_per_hour, source, discount, workloads.
    providers: provider, available, reason."""

    notices: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    providers: list[dict[str, Any]]


class ClusterHealthOut(Model):
    """nodes: node, health (healthy|degraded|down), schedulable, reasons. gpus: node, index,
    verdict (healthy|degraded|failed), reasons. gpu_status: ok|no_library|no_nvml|error.
    notices: as spot_market."""

    summary: str
    nodes: list[dict[str, Any]]
    gpu_status: str | None
    gpus: list[dict[str, Any]]
    notices: list[dict[str, Any]]
    errors: list[str]


class PlanReportOut(Model):
    """proposals, most urgent first: action, target, tool and arguments (call tool with
    arguments, plus reason, to carry it out), trigger, reason, risk, score, to_node,
    notice_deadline. sla: as sla_risk. notices, gpus: as cluster_health."""

    proposals: list[dict[str, Any]]
    sla: list[dict[str, Any]]
    notices: list[dict[str, Any]]
    gpus: list[dict[str, Any]]
    errors: list[str]


def queue_depth(service: Service, backend: str | None = None) -> QueueDepthList:
    return QueueDepthList(queues=records(insights.queue_depth(service, backend)))


def sla_risk(service: Service, detail: bool) -> SlaRiskList:
    risks = insights.sla_risk(service)
    if detail:
        return SlaRiskList(risks=records(risks))
    return SlaRiskList(risks=[insights.Briefer.risk(r) for r in risks])


def spot_market(service: Service, detail: bool) -> SpotMarketOut:
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


def cluster_health(service: Service, detail: bool) -> ClusterHealthOut:
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


def plan_actions(service: Service, detail: bool) -> PlanReportOut:
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
