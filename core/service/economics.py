"""Checkpoint economics of one workload: the interval that pays, for ``get_workload``.

Role: read what the workload's checkpoints cost (the store's ``timings`` of its newest
checkpoints, ``CheckpointCost.from_checkpoints``) and the hazard of the node it runs on
(``[economics]``: a spot node's ``spot_mtbf_h``, an on-demand node's ``on_demand_mtbf_h``),
and return ``core.planner.checkpoint_interval.recommend``'s advice with the interval in
force (``checkpoint_every``) beside it, and its mode (``auto``: the wrapper re-times it after
each checkpoint and records the interval it uses now, which is what ``in_force_s`` reads).
Read-only; nothing here changes the interval.

Limits: the hazard is the configured constant rate (Young/Daly); the age-dependent estimate
from a reclaim history (``core.planner.interruption_hazard``) is not read from any store yet.
A workload with no timed checkpoint, or on a node the backend does not list, gets none.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from core import errors
from core.model import WorkloadInfo
from core.planner.checkpoint_interval import (
    CheckpointCost,
    IntervalAdvice,
    IntervalBounds,
    recommend,
)
from core.planner.interruption_hazard import Hazard
from core.service import views
from core.service.facade import Service

# The newest checkpoints whose costs are pooled (a median: one slow dump does not decide).
RECENT = 10


class CheckpointEconomics(BaseModel):
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
    newest = sorted(checkpoints, key=lambda c: c.created_at, reverse=True)[:RECENT]
    cost = CheckpointCost.from_checkpoints(newest)
    node = next((n for n in nodes if n.name == workload.node), None)
    if cost is None or node is None:
        return None
    cfg = service.settings.economics
    mtbf_h = cfg.spot_mtbf_h if node.spot else cfg.on_demand_mtbf_h
    advice: IntervalAdvice = recommend(
        cost,
        Hazard.from_mtbf(mtbf_h),
        bounds=IntervalBounds(min_s=cfg.min_interval_s, max_s=cfg.max_interval_s),
    )
    kind = "Spot" if node.spot else "On-demand"
    return CheckpointEconomics(
        interval_s=advice.interval_s,
        in_force_s=workload.checkpoint_every,
        mode="auto"
        if workload.checkpoint_auto
        else ("off" if workload.checkpoint_every is None else "fixed"),
        expected_loss_s_per_h=advice.expected_loss_s_per_h,
        overhead_s_per_h=advice.overhead_s_per_h,
        why=f"{kind} node: {advice.why}",
        method=advice.method,
        pause_s=cost.pause_s,
        wall_s=cost.wall_s,
        mtbf_h=mtbf_h,
        spot=node.spot,
    )
