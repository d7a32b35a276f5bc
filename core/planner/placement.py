"""Placement: where a workload that must move (or may move) should go.

``Placement`` is built once per planning pass from the node inventory and the signals about
the nodes, then answers many ``choose`` questions fast: nodes are pre-sorted by score and
grouped by speed tier, so one question looks at a handful of nodes, not all of them.

A node is a candidate for a workload when it is not DOWN, is schedulable, has no
interruption notice and no failed GPU, has enough GPUs (``node.gpus >= workload.gpus``) and
has room (label ``clawpoint.io/max-workloads``; absent = no limit). Among candidates the
lowest ``score`` wins (lower is better)::

    score = PRICE_W * price / max_price        # 0..1: cheaper is better
          + SPEED_W / speed                    # faster is better (label clawpoint.io/speed)
          + DEGRADED_PENALTY if degraded
          + LOAD_W * load / capacity           # or LOAD_W * load / 10 without a capacity
          + SPOT_W * spot_risk                 # 0.1 for a spot node, 1.0 after a rebalance
                                               # recommendation

Limits: capacity is counted in workloads, not CPUs or memory; choices made in one pass
reserve room (``reserve``) so two moves do not both take a node's last slot.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from core.model import NodeHealth, NodeInfo
from core.signals.sla import node_speed

CAPACITY_LABEL = "clawpoint.io/max-workloads"
PRICE_W = 1.0
SPEED_W = 1.0
DEGRADED_PENALTY = 1.0
LOAD_W = 0.5
SPOT_W = 0.5
SPOT_RISK = 0.1  # a spot node with no notice: some risk of interruption
REBALANCE_RISK = 1.0  # AWS rebalance recommendation: elevated risk, avoid if possible


@dataclass(slots=True)
class NodeSlot:
    """A node as placement sees it (mutable: ``load`` grows as moves are reserved)."""

    id: str
    name: str
    backend: str
    price: float
    speed: float
    spot: bool
    gpus: int
    degraded: bool
    available: bool  # may take new work at all
    load: int
    capacity: int | None
    spot_risk: float
    partitions: list[str] = field(default_factory=list)
    score: float = 0.0

    def has_room(self) -> bool:
        return self.capacity is None or self.load < self.capacity


def _capacity(node: NodeInfo) -> int | None:
    raw = node.labels.get(CAPACITY_LABEL)
    try:
        return max(int(raw), 0) if raw is not None else None
    except ValueError:
        return None


class Placement:
    def __init__(
        self,
        nodes: Iterable[NodeInfo],
        *,
        excluded: AbstractSet[str] = frozenset(),
        risky: AbstractSet[str] = frozenset(),
        prices: dict[str, float] | None = None,
    ) -> None:
        """``excluded``: node ids that take no work (notice, failed GPU); ``risky``: node ids
        with a rebalance recommendation; ``prices``: current prices overriding the inventory."""
        prices = prices or {}
        self.slots: dict[str, NodeSlot] = {}
        for n in nodes:
            price = prices.get(n.id, n.price_per_hour)
            self.slots[n.id] = NodeSlot(
                id=n.id,
                name=n.name,
                backend=n.backend,
                price=price,
                speed=node_speed(n),
                spot=n.spot,
                gpus=n.gpus,
                degraded=n.health is NodeHealth.DEGRADED,
                available=n.health is not NodeHealth.DOWN
                and n.schedulable
                and n.id not in excluded,
                load=len(n.workloads),
                capacity=_capacity(n),
                spot_risk=REBALANCE_RISK if n.id in risky else (SPOT_RISK if n.spot else 0.0),
                partitions=n.partitions,
            )
        max_price = max((s.price for s in self.slots.values()), default=0.0) or 1.0
        for s in self.slots.values():
            s.score = self._score(s, max_price)
        usable = [s for s in self.slots.values() if s.available]
        self.by_score = sorted(usable, key=lambda s: s.score)
        self.by_price = sorted(usable, key=lambda s: (s.price, s.score))
        tiers: dict[float, list[NodeSlot]] = {}
        for s in self.by_price:
            tiers.setdefault(s.speed, []).append(s)
        self.tiers = sorted(tiers.items(), key=lambda kv: -kv[0])  # fastest tier first
        self._max_price = max_price

    @staticmethod
    def _score(s: NodeSlot, max_price: float) -> float:
        load = s.load / s.capacity if s.capacity else s.load / 10
        return (
            PRICE_W * s.price / max_price
            + SPEED_W / s.speed
            + (DEGRADED_PENALTY if s.degraded else 0.0)
            + LOAD_W * load
            + SPOT_W * s.spot_risk
        )

    def node(self, node_id: str | None) -> NodeSlot | None:
        return self.slots.get(node_id) if node_id else None

    @staticmethod
    def fits(slot: NodeSlot, *, backend: str, gpus: int, exclude: str | None) -> bool:
        return (
            slot.id != exclude and slot.backend == backend and slot.gpus >= gpus and slot.has_room()
        )

    def best(self, *, backend: str, gpus: int = 0, exclude: str | None = None) -> NodeSlot | None:
        """The best-scoring candidate (for moves forced by a notice, a failure or a dead node)."""
        for slot in self.by_score:
            if self.fits(slot, backend=backend, gpus=gpus, exclude=exclude):
                return slot
        return None

    def cheapest(
        self,
        *,
        backend: str,
        gpus: int = 0,
        exclude: str | None = None,
        below: float,
        avoid_spot_risk: float = REBALANCE_RISK,
    ) -> NodeSlot | None:
        """The cheapest candidate priced under ``below`` (for cost moves); stops early."""
        for slot in self.by_price:
            if slot.price >= below:
                return None
            if slot.spot_risk < avoid_spot_risk and self.fits(
                slot, backend=backend, gpus=gpus, exclude=exclude
            ):
                return slot
        return None

    def fastest_enough(
        self, *, backend: str, gpus: int = 0, exclude: str | None = None, min_speed: float
    ) -> NodeSlot | None:
        """The cheapest candidate at least ``min_speed`` fast; else the fastest candidate."""
        best: NodeSlot | None = None
        fastest: NodeSlot | None = None
        for speed, slots in self.tiers:
            for slot in slots:  # price order within a tier: the first fit is the cheapest
                if self.fits(slot, backend=backend, gpus=gpus, exclude=exclude):
                    if fastest is None:
                        fastest = slot
                    if speed >= min_speed and (best is None or slot.price < best.price):
                        best = slot
                    break
        return best or fastest

    def reserve(self, slot: NodeSlot, source: str | None = None) -> None:
        slot.load += 1
        src = self.node(source)
        if src is not None and src.load > 0:
            src.load -= 1
