"""Checkpoint economics of one workload: the interval that pays, for ``get_workload``.

Role: read what the workload's checkpoints cost (the store's ``timings`` of its newest
checkpoints, ``CheckpointCost.from_checkpoints``) and the hazard of the node it runs on
(``[economics]``: a spot node's ``spot_mtbf_h``, an on-demand node's ``on_demand_mtbf_h``),
and return ``core.planner.checkpoint_interval.recommend``'s advice with the interval in
force (``checkpoint_every``) beside it, and its mode (``auto``: the wrapper re-times it after
each checkpoint and records the interval it uses now, which is what ``in_force_s`` reads).
Read-only; nothing here changes the interval.

One computation, three readers: ``get_workload`` (``workload_view``), ``clawpoint workloads
--json`` (``workload_rows``) and the planner (``cases``: what the advice rests on, for
``core.planner.interval_advice``), the last two over one read of the checkpoints and nodes.

The hazard is a constant rate (Young/Daly) per class of nodes (a backend's spot or on-demand
nodes): the configured guess as a prior, updated with the interruptions the watch loop saw
there and the node-hours it watched (``core.state.interruptions``,
``interruption_hazard.learned_mtbf_h``); ``why`` says which.

Limits: the age-dependent estimate (``interruption_hazard.estimate_hazard``) needs each
run's length, which is not stored; only what a watch loop saw counts.
A workload with no timed checkpoint, or on a node the backend does not list, gets none.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from core import errors
from core.config import EconomicsConfig
from core.model import CheckpointInfo, NodeInfo, WorkloadInfo
from core.planner.checkpoint_interval import CheckpointCost, IntervalBounds, recommend
from core.planner.interruption_hazard import Hazard, learned_mtbf_h, mtbf_basis
from core.planner.interval_advice import IntervalCase
from core.schema_base import Model
from core.service import views
from core.service.facade import Service
from core.state.interruptions import InterruptionHistory, Tally

# The newest checkpoints whose costs are pooled (a median: one slow dump does not decide).
RECENT = 10


class CheckpointEconomics(Model):
    """The advice for one workload and the interval it has now."""

    interval_s: float = Field(description="the recommended periodic checkpoint interval")
    in_force_s: float | None = Field(description="the workload's checkpoint_every (None: off)")
    mode: str = Field(description="auto (its wrapper re-times it), fixed or off")
    expected_loss_s_per_h: float
    overhead_s_per_h: float
    why: str
    method: str
    pause_s: float = Field(description="the measured pause (median of recent checkpoints)")
    wall_s: float = Field(description="the measured checkpoint wall time (median)")
    mtbf_h: float = Field(description="the interruption rate assumed, as a mean time between")
    spot: bool

    def brief(self) -> dict[str, object]:
        """The concise view: the interval, what is in force (when periodic checkpoints
        are on), loss and overhead, why."""
        out: dict[str, object] = {"interval_s": self.interval_s}
        if self.in_force_s is not None:
            out["in_force_s"] = self.in_force_s
        if self.mode == "auto":
            out["mode"] = self.mode
        out.update(
            loss_s_per_h=self.expected_loss_s_per_h,
            overhead_s_per_h=self.overhead_s_per_h,
            why=self.why,
        )
        return out


def workload_view(service: Service, workload: str, *, detail: bool) -> dict[str, Any]:
    """``get_workload``'s answer: the workload's view and, when something measured says, the
    interval that pays (concise; every figure with ``detail``)."""
    found = service.get_workload(workload)
    out = views.workload(found, detail=detail)
    pays = checkpoint_economics(service, found)
    if pays is not None:
        out["checkpoint_interval"] = pays.model_dump() if detail else pays.brief()
    return out


def checkpoint_economics(service: Service, workload: WorkloadInfo) -> CheckpointEconomics | None:
    """The recommended interval for ``workload``, or None when nothing measured says."""
    try:
        checkpoints = service.checkpoints(workload.id)
        nodes = service.nodes(workload.backend)
    except errors.ClawpointError:
        return None  # a read beside get_workload: its absence says nothing was computed
    node = next((n for n in nodes if n.name == workload.node), None)
    seen = _History(service).of(node)
    case = _case(service.settings.economics, checkpoints, node, seen)
    if case is None or node is None:
        return None
    return _economics(service.settings.economics, case, workload, node, seen)


def cases(
    service: Service,
    workloads: Sequence[WorkloadInfo],
    *,
    nodes: Sequence[NodeInfo] | None = None,
    checkpoints: Sequence[CheckpointInfo] | None = None,
) -> dict[str, IntervalCase]:
    """Workload id -> what its advice rests on, for every workload with a timed checkpoint
    on a listed node (``nodes``, ``checkpoints``: what the caller already read, else one
    read each)."""
    try:
        nodes = service.nodes() if nodes is None else nodes
        checkpoints = service.checkpoints() if checkpoints is None else checkpoints
    except errors.ClawpointError:
        return {}  # a read beside the caller's own: nothing computed
    by_node = {(n.backend, n.name): n for n in nodes}
    by_workload: dict[str, list[CheckpointInfo]] = defaultdict(list)
    for c in checkpoints:
        by_workload[f"{c.id.partition(':')[0]}:{c.lineage}"].append(c)
    out: dict[str, IntervalCase] = {}
    history = _History(service)
    for w in workloads:
        node = by_node.get((w.backend, w.node or ""))
        case = _case(service.settings.economics, by_workload.get(w.id, []), node, history.of(node))
        if case is not None:
            out[w.id] = case
    return out


def workload_rows(service: Service, backend: str | None = None) -> list[dict[str, Any]]:
    """Every workload as ``clawpoint workloads --json`` lists it: its record and, when
    something measured says, ``checkpoint_interval`` (the concise advice)."""
    workloads = service.workloads(backend)
    nodes = {(n.backend, n.name): n for n in _nodes(service, backend)}
    try:
        checkpoints = service.checkpoints(backend=backend)
    except errors.ClawpointError:
        checkpoints = []  # the rows without advice rather than no rows
    found = cases(service, workloads, nodes=list(nodes.values()), checkpoints=checkpoints)
    history = _History(service)
    rows = []
    for w in workloads:
        row = w.model_dump(mode="json")
        case, node = found.get(w.id), nodes.get((w.backend, w.node or ""))
        if case is not None and node is not None:
            pays = _economics(service.settings.economics, case, w, node, history.of(node))
            row["checkpoint_interval"] = pays.brief()
        rows.append(row)
    return rows


def _nodes(service: Service, backend: str | None) -> list[NodeInfo]:
    try:
        return service.nodes(backend)
    except errors.ClawpointError:
        return []


def _case(
    cfg: EconomicsConfig,
    checkpoints: Sequence[CheckpointInfo],
    node: NodeInfo | None,
    seen: Tally | None = None,
) -> IntervalCase | None:
    """The advice from the median cost of the newest ``RECENT`` timed checkpoints and the
    hazard of the node's class (``_mtbf_h``); None without a measured cost or a node."""
    newest = sorted(checkpoints, key=lambda c: c.created_at, reverse=True)[:RECENT]
    cost = CheckpointCost.from_checkpoints(newest)
    if cost is None or node is None:
        return None
    hazard = Hazard.from_mtbf(_mtbf_h(cfg, node, seen))
    bounds = IntervalBounds(min_s=cfg.min_interval_s, max_s=cfg.max_interval_s)
    advice = recommend(cost, hazard, bounds=bounds)
    return IntervalCase(cost=cost, hazard=hazard, bounds=bounds, advice=advice)


def _economics(
    cfg: EconomicsConfig,
    case: IntervalCase,
    workload: WorkloadInfo,
    node: NodeInfo,
    seen: Tally | None = None,
) -> CheckpointEconomics:
    advice, kind = case.advice, "Spot" if node.spot else "On-demand"
    prior = _prior_h(cfg, node)
    basis = mtbf_basis(prior, seen.events, seen.watched_h) if seen else f"MTBF {prior:g} h"
    return CheckpointEconomics(
        interval_s=advice.interval_s,
        in_force_s=workload.checkpoint_every,
        mode="auto"
        if workload.checkpoint_auto
        else ("off" if workload.checkpoint_every is None else "fixed"),
        expected_loss_s_per_h=advice.expected_loss_s_per_h,
        overhead_s_per_h=advice.overhead_s_per_h,
        why=f"{kind} node, {basis}: {advice.why}",
        method=advice.method,
        pause_s=case.cost.pause_s,
        wall_s=case.cost.wall_s,
        mtbf_h=round(_mtbf_h(cfg, node, seen), 3),
        spot=node.spot,
    )


def _prior_h(cfg: EconomicsConfig, node: NodeInfo) -> float:
    return cfg.spot_mtbf_h if node.spot else cfg.on_demand_mtbf_h


def _mtbf_h(cfg: EconomicsConfig, node: NodeInfo, seen: Tally | None) -> float:
    prior = _prior_h(cfg, node)
    return learned_mtbf_h(prior, seen.events, seen.watched_h) if seen else prior


class _History:
    """What the watch loop saw per class of nodes, read once per class per call."""

    def __init__(self, service: Service) -> None:
        self.history = InterruptionHistory(service.db)
        self.read: dict[tuple[str, bool], Tally] = {}

    def of(self, node: NodeInfo | None) -> Tally | None:
        if node is None:
            return None
        key = (node.backend, node.spot)
        if key not in self.read:
            self.read[key] = self.history.tally(node.backend, spot=node.spot)
        return self.read[key]
