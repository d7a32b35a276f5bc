"""The local backend's node pools: list them, plan ``scale_pool``, release and provision.

A pool is every configured virtual node labelled ``pool = NAME`` (``[local.pools.NAME]``
sets its ``min_size``); its size is how many of them are up. Shrinking releases the nodes
that lose least (``core.backends.capacity.victims``): each is cordoned first so nothing new
lands there, every live workload on it is checkpointed, stopped and restored on a node that
stays up (or, when none can take it, left stopped with its state saved, to resume later),
and only then is the node released. Growing provisions released nodes, cheapest first.
A released node leaves the node list (``LocalBackend.nodes``) until it is provisioned
again; its row in ``local_nodes`` keeps that across restarts.

Limits: nodes are virtual, so "releasing" one stops nothing by itself; the release step
refuses while a live workload is still on the node (one that landed after the plan was
made), so a workload is never orphaned on a node that is gone.
"""

from __future__ import annotations

from typing import Any

from core import errors
from core.action_params import PoolSizeParams
from core.backends import capacity
from core.backends.base import PlanDraft, ProgressFn
from core.backends.local.common import _LIVE, NAME
from core.backends.local.config import POOL_LABEL
from core.backends.local.context import LocalContext, LocalStepContext
from core.backends.local.node_plans import evacuate
from core.backends.local.planning import pick_target
from core.backends.local.step_args import ReleaseArgs, SetNodeArgs, step
from core.model import NodeInfo, PlanScope, PlanStep, PoolInfo, utcnow


def pools(ctx: LocalContext, released: set[str]) -> list[PoolInfo]:
    """Every pool with its bounds, the nodes up (``ctx.nodes()``, which leaves out the
    ``released`` ones) and those released."""
    up = {n.name: n for n in ctx.nodes()}
    names = sorted({c.labels[POOL_LABEL] for c in ctx.node_config.values()
                    if POOL_LABEL in c.labels})  # fmt: skip
    bounds = ctx.pool_config
    out = []
    for name in names:
        members = [c for c in ctx.node_config.values() if c.labels.get(POOL_LABEL) == name]
        live = [up[c.name] for c in members if c.name in up]
        prices = [c.price_per_hour for c in members]
        out.append(
            PoolInfo(
                id=f"{NAME}:{name}",
                backend=NAME,
                name=name,
                spot=all(c.spot for c in members),
                price_per_hour=round(sum(prices) / len(prices), 4),
                min_size=bounds[name].min_size if name in bounds else 0,
                max_size=len(members),
                size=len(live),
                nodes=[n.name for n in live],
                idle=[n.name for n in live if not n.workloads],
                released=[c.name for c in members if c.name in released],
            )
        )
    return out


def _unsaved(ctx: LocalContext, nodes: list[NodeInfo]) -> dict[str, float]:
    """Seconds of unsaved work of each live workload on ``nodes``, by workload id."""
    now = utcnow()
    out: dict[str, float] = {}
    for w in ctx.workloads():
        if w.state not in _LIVE or w.node not in {n.name for n in nodes}:
            continue
        newest = max((c.created_at for c in ctx.store.list(w.name)), default=None)
        out[w.id] = capacity.unsaved_s(w.started_at, newest, now)
    return out


def plan_scale_pool(ctx: LocalContext, name: str, params: PoolSizeParams) -> PlanDraft:
    """Grow by provisioning released nodes, or shrink by saving and moving the work off the
    nodes that lose least, then releasing them."""
    pool = capacity.find_pool(ctx.pools(), name, backend=NAME)
    capacity.check_size(pool, params.size)
    if params.size > pool.size:
        return _grow(ctx, pool, params.size)
    return _shrink(ctx, pool, params.size)


def _grow(ctx: LocalContext, pool: PoolInfo, size: int) -> PlanDraft:
    prices = {n: ctx.node_config[n].price_per_hour for n in pool.released}
    added = sorted(pool.released, key=lambda n: (prices[n], n))[: size - pool.size]
    per_hour = sum(prices[n] for n in added)
    steps = [
        step(f"provision-{n}", "release", ReleaseArgs(node=n, released=False),
             f"provision {NAME}:{n}")
        for n in added
    ]  # fmt: skip
    scope = PlanScope(backend=NAME, pool=pool.name, targets=added)
    return capacity.grow_draft(pool, size, added, steps, per_hour=per_hour, scope=scope)


def _shrink(ctx: LocalContext, pool: PoolInfo, size: int) -> PlanDraft:
    up = [n for n in ctx.nodes() if n.name in pool.nodes]
    going = capacity.victims(up, pool.size - size, unsaved=_unsaved(ctx, up))
    gone = {n.name for n in going}
    steps: list[PlanStep] = []
    moved: list[str] = []
    held: list[str] = []
    targets: list[str] = []
    for node in going:
        steps.append(
            step(f"cordon-{node.name}", "set_node",
                 SetNodeArgs(node=node.name, schedulable=False,
                             reason=f"pool {pool.name} scaling down"),
                 f"mark {node.id} unschedulable")
        )  # fmt: skip
        for w in ctx.workloads():
            if w.node != node.name or w.state not in _LIVE:
                continue
            try:
                dest: str | None = pick_target(ctx, exclude=gone, requested=None)
            except errors.Conflict:
                dest = None  # nowhere to go: saved and stopped, resumed later
            (moved if dest else held).append(w.id)
            if dest:
                targets.append(dest)
            steps += evacuate(w, dest)
        steps.append(
            step(f"release-{node.name}", "release", ReleaseArgs(node=node.name, released=True),
                 f"release {node.id}")
        )  # fmt: skip
    # A step that fails (a workload landed on a victim since the plan) leaves the nodes it
    # cordoned in service again; one a person had cordoned before stays so.
    undo = [
        step(f"uncordon-{n.name}", "set_node",
             SetNodeArgs(node=n.name, schedulable=True, reason=""),
             f"return {n.id} to service")
        for n in going if n.schedulable
    ]  # fmt: skip
    scope = PlanScope(
        backend=NAME, pool=pool.name, workloads=[*moved, *held], targets=sorted(set(targets))
    )
    return capacity.shrink_draft(
        pool, size, sorted(gone), steps, undo=undo, moved=moved, held=held,
        per_hour=-sum(n.price_per_hour for n in going), scope=scope,
    )  # fmt: skip


def release(ctx: LocalStepContext, args: dict[str, Any], progress: ProgressFn) -> dict[str, Any]:
    """Release a node (it leaves the node list) or provision it again (up, schedulable,
    healthy). Refuses to release a node that a live workload is still on."""
    node, released = str(args["node"]), bool(args["released"])
    if released:
        still = [w.id for w in ctx.workloads() if w.node == node and w.state in _LIVE]
        if still:
            raise errors.Conflict(
                f"{NAME}:{node} still runs {', '.join(still)}: it was not released",
                hint=f"plan the scale-down again ({errors.step('scale_pool')}): the new plan "
                "moves them first",
            )
    ctx.set_released(node, released)
    return {"node": node, "released": released}
