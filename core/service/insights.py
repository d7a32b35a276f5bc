"""Insights: collect signals through a ``Service`` and turn them into ranked proposals.

What the read-only MCP tools (``queue_depth``, ``sla_risk``, ``spot_market``,
``cluster_health``, ``plan_actions``), the CLI and the watch loop call. Each function reads
inventory and signals and returns pydantic models; nothing here acts or writes state.

``observe`` is the one place the signal sources are read: the cloud interruption notices
(AWS, GCP, Azure metadata endpoints, when enabled in ``settings.signals``) and this host's
GPUs (NVML, when ``signals.nvml.enabled``). The watch loop passes its long-lived poller and
monitor; the MCP tools call it with none, which polls the clouds once and reuses the
service's GPU report for up to ``core.signals.nvml.REPORT_TTL_S`` seconds (``ReportCache``:
an NVML probe per read tool call cost more than the call). Either way the same clients,
the same node attribution and the same error reporting apply. ``planner_input`` also hands
the planner each running workload's checkpoint interval advice (``economics.cases``, from the
same read of the checkpoints), where its backend can change the interval, and the node pools
with when each last scaled (``capacity_facts``: a backend whose pools cannot be read is an
error in the report, not a failed plan).

Limits: a workload's own progress is read only where its backend offers it
(``core.backends.base.ProgressSource``: local progress files); others report progress
through labels such as ``clawpoint.io/expected-duration``. On a host without NVIDIA's
library the GPU report says so. A one-shot poll sees a GCP preemption from the moment of
the poll (its 30 s grace is counted from then), where the watch loop's poller remembers
the first sighting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import Field

from core import actions, errors, timings
from core.model import (
    Action,
    CheckpointInfo,
    NodeInfo,
    Principal,
    WorkloadInfo,
    WorkloadState,
    utcnow,
)
from core.planner.planner import PlannerConfig, PlannerInput, Proposal, plan_actions
from core.schema_base import Model
from core.service import economics
from core.service.capacity_facts import pool_facts
from core.service.facade import Service
from core.signals.cloud import NoticePoller, ProviderStatus
from core.signals.model import (
    GpuHealth,
    InterruptionAction,
    InterruptionNotice,
    NodeHealthSignal,
    SpotPrice,
)
from core.signals.nodes import node_health
from core.signals.nvml import NvmlMonitor, NvmlReport, NvmlStatus
from core.signals.prices import build_price_sources, price_at
from core.signals.queue import QueueDepth
from core.signals.sla import Observation, SlaRisk, assess, estimate, node_speed

_LIVE = (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING)


class NodeMarket(Model):
    node: str
    spot: bool
    price_per_hour: float = Field(description="current price (market when known, else inventory)")
    inventory_price_per_hour: float
    on_demand_per_hour: float | None = None
    discount: float | None = None
    source: str
    workloads: int


class SpotMarket(Model):
    observed_at: datetime
    nodes: list[NodeMarket]
    prices: list[SpotPrice] = Field(default_factory=list)
    notices: list[InterruptionNotice] = Field(default_factory=list)
    providers: list[ProviderStatus] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


# Where notices come from: the watch loop's long-lived poller, notices already in hand (tests,
# replays), or None (poll the enabled providers once). GPUs likewise: a monitor, a report in
# hand, an injected nvml module, or None (the real pynvml, loaded lazily).
NoticeSource = NoticePoller | Sequence[InterruptionNotice] | None
GpuSource = NvmlMonitor | NvmlReport | Any


class Observations(Model):
    """What the signal sources said in one reading (see ``observe``)."""

    notices: list[InterruptionNotice] = Field(default_factory=list)
    providers: list[ProviderStatus] = Field(default_factory=list)
    gpu_report: NvmlReport | None = None
    gpus: list[GpuHealth] = Field(default_factory=list, description="with their node set")
    errors: list[str] = Field(default_factory=list)

    @property
    def gpu_status(self) -> str | None:
        return self.gpu_report.status.value if self.gpu_report is not None else None


def _poll_notices(service: Service, source: NoticeSource, seen: Observations) -> None:
    cfg = service.settings.signals
    if source is None:
        if not (cfg.aws.enabled or cfg.gcp.enabled or cfg.azure.enabled):
            return
        with NoticePoller(cfg) as poller:
            _poll_notices(service, poller, seen)
        return
    if isinstance(source, NoticePoller):
        result = source.poll()
        seen.notices, seen.providers = result.notices, result.providers
        return
    seen.notices = list(source)


def _read_gpus(service: Service, source: GpuSource, seen: Observations) -> None:
    cfg = service.settings.signals
    if source is None and not cfg.nvml.enabled:
        return
    if isinstance(source, NvmlReport):
        nv = source
    elif isinstance(source, NvmlMonitor):
        nv = source.report()
    elif source is None:  # the real pynvml: one probe serves every caller for a few seconds
        nv = service.gpu_reports.report(node=cfg.node, event_wait_ms=cfg.nvml.event_wait_ms)
    else:  # an injected nvml module
        with NvmlMonitor(source, node=cfg.node, event_wait_ms=cfg.nvml.event_wait_ms) as mon:
            nv = mon.report()
    seen.gpu_report = nv
    if nv.status is NvmlStatus.ERROR:
        seen.errors.append(f"NVML: {nv.message}")
    node = nv.node or cfg.node
    seen.gpus = [g if g.node else g.model_copy(update={"node": node}) for g in nv.gpus]


def observe(
    service: Service,
    *,
    notices: NoticeSource = None,
    nvml: GpuSource = None,
    read_gpus: bool = True,
) -> Observations:
    """Read the cloud interruption notices and this host's GPU health once.

    The one function both the watch loop and the read tools use, so an agent sees exactly
    what the watch acts on. A provider that cannot be reached is reported in ``providers``
    (not an error: the host is simply not on that cloud); a source that fails is reported
    in ``errors`` and the other sources are still read. ``read_gpus=False`` skips NVML."""
    seen = Observations()
    try:
        _poll_notices(service, notices, seen)
    except errors.ClawpointError as exc:
        seen.errors.append(f"notices: {exc}")
    if not read_gpus:
        return seen
    try:
        _read_gpus(service, nvml, seen)
    except errors.ClawpointError as exc:
        seen.errors.append(f"gpus: {exc}")
    return seen


class ClusterHealth(Model):
    observed_at: datetime
    nodes: list[NodeHealthSignal]
    gpus: NvmlReport | None = None
    unavailable: dict[str, str] = Field(default_factory=dict)
    notices: list[InterruptionNotice] = Field(default_factory=list)
    providers: list[ProviderStatus] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


class PlanReport(Model):
    observed_at: datetime
    proposals: list[Proposal]
    sla: list[SlaRisk] = Field(default_factory=list)
    notices: list[InterruptionNotice] = Field(default_factory=list)
    gpus: list[GpuHealth] = Field(default_factory=list)
    queues: list[QueueDepth] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list, description="signal sources that failed")


def queue_depth(service: Service, backend: str | None = None) -> list[QueueDepth]:
    return service.queue_depth(backend)


def _progress(service: Service, backend: str, name: str) -> Any:
    return service.progress(backend, name)


def sla_risk(
    service: Service,
    *,
    now: datetime | None = None,
    history: Mapping[str, Sequence[Observation]] | None = None,
    nodes: Sequence[NodeInfo] | None = None,
) -> list[SlaRisk]:
    """SLA risk of every live workload with a deadline, highest risk first."""
    now = now or utcnow()
    by_id = {n.id: n for n in (nodes if nodes is not None else service.nodes())}
    moves = service.moves.all()
    out: list[SlaRisk] = []
    for w in service.workloads():
        if w.state not in _LIVE:
            continue
        risk = assess(
            w,
            now=now,
            progress=_progress(service, w.backend, w.name),
            history=(history or {}).get(w.id, ()),
            speed=node_speed(by_id.get(f"{w.backend}:{w.node}")),
            moved=moves.get(w.id),
        )
        if risk is not None:
            out.append(risk)
    order = {"high": 0, "medium": 1, "low": 2}
    return sorted(out, key=lambda r: (order[r.level.value], r.slack_s or 0.0))


def _market(service: Service, now: datetime, nodes: Sequence[NodeInfo] | None = None) -> SpotMarket:
    """Each node's current price: the configured price sources first, else the inventory
    (``nodes``: the inventory already read by the caller)."""
    sources = build_price_sources(service.settings.signals.prices)
    rows: list[NodeMarket] = []
    prices: list[SpotPrice] = []
    for n in nodes if nodes is not None else service.nodes():
        found: SpotPrice | None = None
        for key in (n.id, n.name, n.labels.get("instance-type", "")):
            if key:
                try:
                    found = price_at(sources, key, now)
                except errors.ClawpointError:
                    found = None  # a broken feed must not hide the other nodes' prices
                if found is not None:
                    break
        if found is not None:
            prices.append(found)
        rows.append(
            NodeMarket(
                node=n.id,
                spot=n.spot,
                price_per_hour=found.price_per_hour if found else n.price_per_hour,
                inventory_price_per_hour=n.price_per_hour,
                on_demand_per_hour=found.on_demand_per_hour if found else None,
                discount=found.discount if found else None,
                source=found.source if found else "inventory",
                workloads=len(n.workloads),
            )
        )
    return SpotMarket(observed_at=now, nodes=rows, prices=prices)


def spot_market(
    service: Service,
    *,
    now: datetime | None = None,
    seen: Observations | None = None,
    nodes: Sequence[NodeInfo] | None = None,
) -> SpotMarket:
    """Each node's current price and the interruption notices the clouds announce now
    (``seen``: an ``observe`` reading already in hand, default: read the sources once;
    ``nodes``: the inventory already in hand, default: read it)."""
    now = now or utcnow()
    seen = seen if seen is not None else observe(service, read_gpus=False)
    market = _market(service, now, nodes)
    market.notices, market.providers = seen.notices, seen.providers
    market.errors = list(seen.errors)
    return market


def cluster_health(
    service: Service,
    *,
    nvml: Any | None = None,
    gpu_report: NvmlReport | None = None,
    seen: Observations | None = None,
) -> ClusterHealth:
    """Node health of every backend, this host's GPUs (NVML, when enabled) and the
    interruption and maintenance notices the clouds announce now."""
    now = utcnow()
    signals: list[NodeHealthSignal] = []
    unavailable: dict[str, str] = {}
    for name, backend in service.backends.items():
        try:
            signals.extend(node_health(n, observed_at=now) for n in backend.nodes())
        except errors.BackendUnavailable as exc:
            unavailable[name] = str(exc)
    if seen is None:
        seen = observe(service, nvml=gpu_report if gpu_report is not None else nvml)
    return ClusterHealth(
        observed_at=now, nodes=signals, gpus=seen.gpu_report, unavailable=unavailable,
        notices=seen.notices, providers=seen.providers, errors=seen.errors,
    )  # fmt: skip


def _checkpoint_facts(
    checkpoints: Sequence[CheckpointInfo],
) -> tuple[dict[str, float], dict[str, datetime]]:
    """Expected pause (from the newest checkpoint's timings) and its time, per workload."""
    pause: dict[str, float] = {}
    last: dict[str, datetime] = {}
    for c in checkpoints:
        backend = c.id.partition(":")[0]
        wid = f"{backend}:{c.lineage}"
        if wid in last and last[wid] >= c.created_at:
            continue
        last[wid] = c.created_at
        estimate = timings.estimate_pause(c)  # the estimate the local backend plans with
        if estimate is not None:
            pause[wid] = estimate
    return pause, last


def planner_input(
    service: Service,
    *,
    now: datetime | None = None,
    notices: Sequence[InterruptionNotice] = (),
    gpus: Sequence[GpuHealth] = (),
    history: Mapping[str, Sequence[Observation]] | None = None,
    nodes: Sequence[NodeInfo] | None = None,
    workloads: Sequence[WorkloadInfo] | None = None,
    problems: list[str] | None = None,
) -> tuple[PlannerInput, list[SlaRisk]]:
    """What the planner needs, read once: ``nodes`` and ``workloads`` may be the inventory
    the caller already read (a tool that also briefs on them reads it once per call).
    A source that fails without failing the plan (a backend's pools) is appended to
    ``problems``."""
    now = now or utcnow()
    nodes = list(nodes) if nodes is not None else service.nodes()
    workloads = list(workloads) if workloads is not None else service.workloads()
    by_id = {n.id: n for n in nodes}
    moves = service.moves.all()
    sla: list[SlaRisk] = []
    remaining: dict[str, float] = {}
    rate: dict[str, float] = {}
    for w in workloads:
        if w.state not in _LIVE:
            continue
        progress = _progress(service, w.backend, w.name)
        hist = (history or {}).get(w.id, ())
        speed = node_speed(by_id.get(f"{w.backend}:{w.node}"))
        moved = moves.get(w.id)
        _, _, r, left, _ = estimate(w, now=now, progress=progress, history=hist, moved=moved,
                                    speed=speed)  # fmt: skip
        if left is not None:
            remaining[w.id] = left
        if r:
            rate[w.id] = r
        risk = assess(w, now=now, progress=progress, history=hist, speed=speed, moved=moved)
        if risk is not None:
            sla.append(risk)
    checkpoints = service.checkpoints()
    pause, last = _checkpoint_facts(checkpoints)
    # The interval advice of the running workloads whose backend can change it.
    retimable = [
        w for w in workloads
        if w.state is WorkloadState.RUNNING and w.backend in service.backends
        and Action.SET_CHECKPOINT_INTERVAL in service.backends[w.backend].capabilities()
    ]  # fmt: skip
    market = _market(service, now, nodes)
    pools = pool_facts(service)
    if problems is not None:
        problems.extend(pools.errors)
    data = PlannerInput(
        nodes=nodes,
        workloads=workloads,
        notices=list(notices),
        gpus=list(gpus),
        node_health=[node_health(n, observed_at=now) for n in nodes],
        sla=sla,
        queues=queue_depth(service),
        remaining_s=remaining,
        rate=rate,
        pause_s=pause,
        last_checkpoint_at=last,
        prices={m.node: m.price_per_hour for m in market.nodes if m.source != "inventory"},
        intervals=economics.cases(service, retimable, nodes=nodes, checkpoints=checkpoints),
        pools=pools.pools,
        pools_scaled_at=pools.scaled_at,
        pool_cost_cap=service.settings.capacity.max_added_per_hour,
        release_idle=service.settings.capacity.release_idle,
        resize_backends=[
            name for name, b in service.backends.items() if Action.RESIZE in b.capabilities()
        ],
    )
    return data, sla


def propose(
    service: Service,
    *,
    now: datetime | None = None,
    notices: Sequence[InterruptionNotice] | None = None,
    gpus: Sequence[GpuHealth] | None = None,
    history: Mapping[str, Sequence[Observation]] | None = None,
    config: PlannerConfig | None = None,
    nodes: Sequence[NodeInfo] | None = None,
    workloads: Sequence[WorkloadInfo] | None = None,
) -> PlanReport:
    """Collect signals, plan, and return ranked proposals (nothing is executed).

    ``notices`` / ``gpus``: what the caller already observed (the watch loop); when either
    is None, the sources are read once with ``observe``."""
    now = now or utcnow()
    errors_seen: list[str] = []
    if notices is None or gpus is None:
        seen = observe(service, notices=notices, read_gpus=gpus is None)
        notices = seen.notices if notices is None else notices
        gpus = seen.gpus if gpus is None else gpus
        errors_seen = seen.errors
    data, sla = planner_input(service, now=now, notices=notices, gpus=gpus, history=history,
                              nodes=nodes, workloads=workloads, problems=errors_seen)  # fmt: skip
    if config is None:  # the site's own thresholds ([capacity] in config.toml)
        config = PlannerConfig(pool_min_wait_s=service.settings.capacity.grow_after_wait_s)
    return PlanReport(
        observed_at=now,
        proposals=plan_actions(data, now=now, config=config),
        sla=sla,
        notices=list(notices),
        gpus=list(gpus),
        queues=data.queues,
        errors=errors_seen,
    )


# --- concise views ------------------------------------------------------------------------
# What an agent reads by default: one small record per notice, node, GPU, risk and proposal,
# with full ids (the MCP layer then leaves out null and empty fields). The full models above
# are what ``detail`` returns.

_MAINTENANCE = frozenset(
    {InterruptionAction.REBOOT, InterruptionAction.REDEPLOY, InterruptionAction.FREEZE,
     InterruptionAction.DRAIN}
)  # fmt: skip


def notice_kind(notice: InterruptionNotice) -> str:
    """``spot`` (the instance is reclaimed), ``rebalance`` (elevated risk, no deadline) or
    ``maintenance`` (planned reboot, redeploy, freeze or drain)."""
    if notice.action is InterruptionAction.REBALANCE:
        return "rebalance"
    return "maintenance" if notice.action in _MAINTENANCE else "spot"


class Briefer:
    """Turns signals into concise records with full ids, from one inventory read (``nodes``
    and ``workloads``: the one the caller already made, else its own)."""

    def __init__(
        self,
        service: Service,
        now: datetime,
        *,
        nodes: Sequence[NodeInfo] | None = None,
        workloads: Sequence[WorkloadInfo] | None = None,
    ) -> None:
        self.now = now
        nodes = nodes if nodes is not None else service.nodes()
        self._ids: dict[str, str] = {}
        for n in nodes:
            self._ids.setdefault(n.name, n.id)
            self._ids[n.id] = n.id
        self._on: dict[str, list[str]] = {}
        for w in workloads if workloads is not None else service.workloads():
            if w.node and w.state in _LIVE:
                self._on.setdefault(f"{w.backend}:{w.node}", []).append(w.id)

    def node_id(self, raw: str | None) -> str | None:
        return self._ids.get(raw, raw) if raw else None

    def notice(self, n: InterruptionNotice) -> dict[str, Any]:
        node = self.node_id(n.node or n.subject)
        left = n.seconds_left(self.now)
        return {
            "node": node, "provider": n.provider.value, "action": n.action.value,
            "kind": notice_kind(n), "deadline": n.deadline.isoformat() if n.deadline else None,
            "seconds_left": round(left, 1) if left is not None else None,
            "workloads": sorted(self._on.get(node or "", [])),
        }  # fmt: skip

    @staticmethod
    def gpu(g: GpuHealth) -> dict[str, Any]:
        return {"node": g.node, "index": g.index, "verdict": g.verdict.value,
                "reasons": g.reasons}  # fmt: skip

    @staticmethod
    def node(h: NodeHealthSignal) -> dict[str, Any]:
        return {"node": h.node, "health": h.health.value, "schedulable": h.schedulable,
                "reasons": h.reasons}  # fmt: skip

    @staticmethod
    def risk(r: SlaRisk) -> dict[str, Any]:
        return {
            "workload": r.workload, "level": r.level.value, "deadline": r.deadline.isoformat(),
            "eta": r.eta.isoformat() if r.eta else None,
            "slack_s": round(r.slack_s) if r.slack_s is not None else None,
            "needed_speed": r.needed_speed,
            # Only when true (just moved: the old node's rate scaled by speed), to stay short.
            "estimated": True if r.estimated else None,
        }  # fmt: skip

    @staticmethod
    def proposal(p: Proposal) -> dict[str, Any]:
        deadline = p.effect.notice_deadline
        return {
            "action": p.action.value, "target": p.target, "tool": p.tool,
            "arguments": p.arguments, "trigger": p.trigger, "reason": p.reason, "risk": p.risk.value,
            "score": round(p.score, 2), "to_node": p.to_node,
            "notice_deadline": deadline.isoformat() if deadline else None,
        }  # fmt: skip

    @staticmethod
    def provider(s: ProviderStatus) -> dict[str, Any]:
        return {"provider": s.provider.value, "available": s.available, "reason": s.reason}


def grant_covers(
    service: Service,
    p: Proposal,
    principal: Principal,
    *,
    interface: actions.Interface = actions.Interface.MCP,
) -> bool:
    """Whether an active standing grant covers ``p``'s plan run by ``principal``: how the
    watch loop and a runbook decide to act on advice (a checkpoint interval) that waits for
    a person otherwise. A plan that cannot be made is covered by nothing."""
    now = utcnow()
    if not any(g.action is p.action and g.active(now) for g in service.guard.grants.list()):
        return False  # the common case: nothing is planned for the check
    try:
        plan = service.plan(p.action, p.target, p.params, reason=p.reason, interface=interface)
    except errors.ClawpointError:
        return False
    return service.guard.grants.match(plan, p.trigger, principal) is not None
