"""Capacity: node pools that grow and shrink, as every backend plans ``scale_pool``.

A backend with pools (node groups) answers ``PoolSource.pools``; its ``scale_pool`` plan
uses the rules here, so a pool shrinks and grows the same way whatever runs it:

- the size asked for must lie within the pool's configured bounds (``check_size``);
- the nodes a shrink releases are the ones that lose least (``victims``): idle nodes first,
  then those whose workloads have the least unsaved work (seconds since their newest
  checkpoint, a workload never checkpointed counting as its whole run), then the dearest;
- a plan is safe only when no work has to move (``scale_risk``); a growth also says what
  it adds to the hourly cost (``PlanDraft.added_cost_per_hour``), and the service makes it
  disruptive above the person's cap (``[capacity] max_added_per_hour``).

Limits: pure (no I/O); a backend reads the world and hands it in. What "releasing" a node
means is the backend's: a virtual node leaves the local inventory, a Slurm node powers down.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from core import errors
from core.actions import undo_step
from core.backends.base import PlanDraft
from core.model import Action, NodeInfo, PlanScope, PlanStep, PoolInfo, RiskClass


@runtime_checkable
class PoolSource(Protocol):
    """A backend whose nodes come in pools that ``scale_pool`` can resize."""

    def pools(self) -> list[PoolInfo]: ...


def find_pool(pools: Sequence[PoolInfo], name: str, *, backend: str) -> PoolInfo:
    """The pool called ``name`` (NotFound naming the pools there are)."""
    match = next((p for p in pools if p.name == name), None)
    if match is None and not pools:
        raise errors.NotFound(
            f"no pool {backend}:{name}: the {backend} backend has no pools configured",
            hint=f"name a pool in the [{backend}.pools.NAME] section of the config file "
            f'(docs/{backend}.md, "Pools")',
        )
    if match is None:
        known = ", ".join(f"{backend}:{p.name}" for p in pools)
        raise errors.NotFound(
            f"no pool {backend}:{name} (pools: {known})",
            hint=f"list pools with {errors.step('list_pools')}",
        )
    return match


def check_size(pool: PoolInfo, size: int) -> None:
    """Refuse a size outside the pool's bounds (InvalidInput) or equal to what it has."""
    if size < pool.min_size or size > pool.max_size:
        raise errors.InvalidInput(
            f"{pool.id} can have {pool.min_size} to {pool.max_size} nodes, not {size}",
            hint=f"pass {errors.arg('size')} within {pool.min_size}..{pool.max_size} (the "
            "bounds are the pool's configuration)",
        )
    if size == pool.size:
        raise errors.Conflict(
            f"{pool.id} already has {size} node(s) up",
            hint=f"nothing to do; {errors.step('list_pools')} shows each pool's size",
        )


def unsaved_s(
    workload_started: datetime | None, newest_checkpoint: datetime | None, now: datetime
) -> float:
    """Seconds of work a workload would lose now without a checkpoint (never negative)."""
    since = newest_checkpoint or workload_started
    return max(0.0, (now - since).total_seconds()) if since else 0.0


def victims(
    nodes: Sequence[NodeInfo], count: int, *, unsaved: Mapping[str, float]
) -> list[NodeInfo]:
    """The ``count`` nodes a shrink releases: idle first, then least unsaved work (the sum
    of ``unsaved`` over the node's workloads, by workload id), then dearest, then by name."""

    def loss(node: NodeInfo) -> tuple[int, float, float, str]:
        lost = sum(unsaved.get(w, 0.0) for w in node.workloads)
        return (len(node.workloads), lost, -node.price_per_hour, node.name)

    return sorted(nodes, key=loss)[:count]


def scale_risk(*, moves: int) -> RiskClass:
    """Safe when no workload moves; else disruptive (a person decides). The cost a growth
    adds is judged by the service against the person's cap."""
    return RiskClass.DISRUPTIVE if moves > 0 else RiskClass.SAFE


def cost_note(delta_per_hour: float) -> str:
    """``+2.76/h`` or ``-0.92/h``: what the change does to the pool's hourly cost."""
    return f"{delta_per_hour:+.2f}/h for the pool"


def grow_draft(
    pool: PoolInfo, size: int, added: list[str], steps: list[PlanStep], *, per_hour: float,
    scope: PlanScope,
) -> PlanDraft:  # fmt: skip
    """A growth's plan as every backend states it: safe but for the cost it adds, which the
    service weighs against the person's cap."""
    return PlanDraft(
        steps=steps,
        summary=f"Grow {pool.id} from {pool.size} to {size} node(s): {', '.join(added)}",
        saves="nothing to save: no work moves",
        rollback=f"shrink it again: {undo_step(Action.SCALE_POOL, pool.id, size=pool.size)}",
        cost_effect=cost_note(per_hour),
        scope=scope,
        risk=scale_risk(moves=0),
        added_cost_per_hour=per_hour,
    )


def shrink_draft(
    pool: PoolInfo, size: int, gone: list[str], steps: list[PlanStep], *,
    undo: list[PlanStep], moved: list[str], held: list[str], per_hour: float,
    scope: PlanScope, verb: str = "release", unit: str = "workload",
) -> PlanDraft:  # fmt: skip
    """A shrink's plan as every backend states it: ``moved`` go elsewhere, ``held`` are saved
    and stopped (no node of the pool stays up for them); disruptive when either is not empty;
    ``undo`` returns the nodes it took out of service when a step fails."""
    what = f"move {len(moved)} {unit}(s)" if moved else f"no {unit} to move"
    if held:
        what += f", save and stop {len(held)} (no node stays up for them: resume them later)"
    return PlanDraft(
        steps=steps,
        on_failure=undo,
        summary=f"Shrink {pool.id} from {pool.size} to {size} node(s): {verb} "
        f"{', '.join(sorted(gone))}; {what}",
        saves=f"the full state of every {unit} on those nodes" if moved or held
        else "nothing to save: those nodes are idle",
        rollback=f"grow it again: {undo_step(Action.SCALE_POOL, pool.id, size=pool.size)}",
        cost_effect=cost_note(per_hour),
        scope=scope,
        risk=scale_risk(moves=len(moved) + len(held)),
    )  # fmt: skip
