"""When a workload should get more memory before it runs out: the planner's resize rule.

Role: a running workload with a memory limit (``WorkloadInfo.memory_mb``) whose use
(``memory_used_mb``, as its backend measures it) has reached ``pressure`` of that limit (90 %
by default) is close to being killed for memory: the kernel's OOM killer in its cgroup,
Slurm's OUT_OF_MEMORY, Kubernetes' OOMKilled. Everything since its newest checkpoint would
be lost, and it would only die again where it restarts. ``memory_change`` proposes
``resize`` to ``growth`` times what it uses (1.5x), rounded up to 256 MiB and never less
than the limit plus 256 MiB: in place when its node has room (safe: it gains memory and
keeps running), else on the cheapest node that fits (disruptive: a checkpoint and restore,
which also saves its work); nothing when no node fits (a proposal that would fail helps
nobody; the capacity rule grows pools for waiting work, not for this).

Limits: pure (no I/O). Memory only: CPU throttling slows a workload but loses nothing, and a
GPU class is a person's choice. A node's room is what its capacity less the limits of the
workloads the inventory puts on it leaves (workloads without limits count nothing); the
backend's plan checks again, with its own accounting, when the proposal is acted on. A
workload whose backend does not report use is never proposed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import Field

from core import errors
from core.backends.sizing import Size, pick_node
from core.model import NodeInfo, WorkloadInfo
from core.schema_base import Model
from core.sizes import memory_text

PRESSURE = 0.9
GROWTH = 1.5
STEP_MIB = 256


class MemoryChange(Model):
    """The memory to propose for one workload, and the figures it rests on."""

    workload: str
    memory: str = Field(description="resize's memory argument")
    used_mb: int
    limit_mb: int
    node: str
    to_node: str
    price_before: float
    price_after: float
    reason: str

    @property
    def in_place(self) -> bool:
        return self.node == self.to_node


def next_memory_mb(used_mb: int, limit_mb: int, *, growth: float = GROWTH) -> int:
    """``growth`` x ``used_mb`` rounded up to ``STEP_MIB``, at least a step above the limit."""
    want = max(used_mb * growth, limit_mb + STEP_MIB)
    return int(math.ceil(want / STEP_MIB) * STEP_MIB)


def memory_change(
    w: WorkloadInfo,
    nodes: Sequence[NodeInfo],
    used: Mapping[str, Size],
    *,
    pressure: float = PRESSURE,
    growth: float = GROWTH,
) -> MemoryChange | None:
    """The memory to propose for ``w`` (see the module doc); None when it is not under
    pressure or no node fits. ``nodes``: its backend's nodes; ``used``: what the other
    workloads on each hold."""
    if w.memory_mb is None or w.memory_used_mb is None or w.node is None:
        return None
    if w.memory_used_mb < pressure * w.memory_mb:
        return None
    mib = next_memory_mb(w.memory_used_mb, w.memory_mb, growth=growth)
    want = Size(w.cpus, mib, w.gpus, w.gpu_class)
    here = next((n for n in nodes if n.name == w.node), None)
    try:
        target = pick_node(nodes, want, used, workload=w)
    except errors.ClawpointError:
        return None
    uses = f"{w.id} uses {memory_text(w.memory_used_mb)} of its {memory_text(w.memory_mb)} limit"
    where = (
        f"on {target.name}"
        if target.name == w.node
        else f"moved from {w.node} to {target.name}, the cheapest node with room"
    )
    return MemoryChange(
        workload=w.id, memory=memory_text(mib), used_mb=w.memory_used_mb, limit_mb=w.memory_mb,
        node=w.node, to_node=target.name,
        price_before=here.price_per_hour if here else 0.0, price_after=target.price_per_hour,
        reason=f"{uses} ({w.memory_used_mb / w.memory_mb:.0%}): it would be killed for memory "
        f"and lose its work since its last checkpoint; give it {memory_text(mib)} {where}.",
    )  # fmt: skip
