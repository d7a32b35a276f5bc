"""What a runbook step reads of one node pool: its record, its queue and the planner's rule.

A runbook cannot compute a size (no arithmetic inside ``{{...}}``), so ``read_pool`` hands
it the size the planner's capacity rule gives this pool now (``capacity_advice.pool_change``,
the function ``plan_actions`` and the watch loop use, with the same hysteresis read from
the journal): ``grow_to`` when jobs have waited ``min_wait_s`` in the pool's queue and it
has released nodes, ``shrink_to`` when it has idle nodes and nothing waits. The shrink is
offered whatever ``[capacity] release_idle`` says: a run releases idle nodes only when the
person who started it asked (the runbook's own parameter), which is what that setting
stands for in the watch loop.

Limits: one pool per call. Unlike a planning pass it does not know which idle nodes other
proposals would move work to (``keep``); the backend's release step still refuses a node
that gained work since the plan. The cost cap is reported (``cap_per_hour``), not applied:
the service makes a dearer growth disruptive, so the run's approval gate asks a person.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core import errors
from core.model import PoolInfo, utcnow
from core.planner.capacity_advice import PoolChange, pool_change, queue_for
from core.service.capacity_facts import pool_facts
from core.service.facade import Service

__all__ = ["read_pool"]


def _find(svc: Service, pool_id: str) -> tuple[PoolInfo, datetime | None]:
    """The pool named ``pool_id`` and when it last scaled; ``NotFound`` naming the pools."""
    facts = pool_facts(svc)
    for pool in facts.pools:
        if pool.id == pool_id:
            return pool, facts.scaled_at.get(pool.id)
    known = ", ".join(p.id for p in facts.pools) or "(none configured)"
    unread = f"; unread: {'; '.join(facts.errors)}" if facts.errors else ""
    raise errors.NotFound(f"no pool {pool_id!r}", hint=f"pools: {known}{unread}")


def _unchanged(pool: PoolInfo, pending: int, waited_min: float) -> str:
    return (
        f"{pool.id}: {pool.size} node(s) up ({pool.min_size}..{pool.max_size}), "
        f"{len(pool.idle)} idle, {len(pool.released)} released; {pending} job(s) waiting "
        f"(oldest {waited_min} min): nothing to change."
    )


def read_pool(
    svc: Service, pool_id: str, *, min_wait_s: float | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """The pool's record plus its queue (``pending``, ``oldest_wait_minutes``) and the
    planner's change for it (``grow_to`` or ``shrink_to``, the other null; ``reason``), with
    the growth's cost per hour and the person's cap. ``min_wait_s`` None: the site's
    ``[capacity] grow_after_wait_s``, as the watch loop uses."""
    now = now or utcnow()
    if min_wait_s is None:
        min_wait_s = svc.settings.capacity.grow_after_wait_s
    pool, scaled_at = _find(svc, pool_id)
    queue = queue_for(pool, svc.queue_depth(pool.backend))
    change: PoolChange | None = pool_change(
        pool, queue, now=now, scaled_at=scaled_at, min_wait_s=min_wait_s, shrink=True
    )
    pending = queue.pending if queue is not None else 0
    waited = (queue.oldest_pending_age_s or 0.0) if queue is not None else 0.0
    waited_min = round(waited / 60, 1)
    grow = change is not None and change.grow
    return {
        **pool.model_dump(mode="json"),
        "pending": pending,
        "oldest_wait_minutes": waited_min,
        "grow_to": change.size if change is not None and grow else None,
        "shrink_to": change.size if change is not None and not grow else None,
        "added_per_hour": round(change.delta_per_hour, 4) if change is not None and grow else None,
        "cap_per_hour": svc.settings.capacity.max_added_per_hour,
        "reason": change.reason if change is not None else _unchanged(pool, pending, waited_min),
    }
