"""When a node pool should grow or shrink: the planner's capacity rule.

Role: given a pool (``PoolInfo``: its size, bounds, price per node, idle and released nodes),
the queue whose work it serves (``QueueDepth``: the pool's partition on its backend, or the
backend's whole queue for a pool without one) and when the pool was last scaled,
``pool_change`` says whether to propose ``scale_pool`` and to which size.

- **Grow**: the pool has released nodes and its queue has pending work whose oldest job has
  waited at least ``min_wait_s`` (60 s by default), or a pending workload of its queue has a
  deadline (its SLA: ``clawpoint.io/deadline``) within ``deadline_horizon_s`` (6 h by
  default), whose slack any wait eats: bring back one node per pending job, at
  most the released ones and ``max_size``. It moves nothing; what it adds per hour is
  ``price_per_hour`` x the nodes added (the service makes it disruptive above the person's
  cap, ``[capacity] max_added_per_hour``, and so does the planner when it is handed the cap).
- **Shrink**: the pool has idle nodes (up, no live workload), its queue has no pending work
  and it is above ``min_size``: release the idle nodes (never below ``min_size``). It only
  ever releases idle nodes, so it is safe; a shrink that would move work is never proposed.
- **Headroom**: a shrink is proposed only where the person asked for it (``[capacity]
  release_idle``, off by default: an idle node is also where work goes on a notice or a
  failure); nor for a pool with an idle node that another proposal of the same pass moves
  work to.
- **Hysteresis**: no shrink is proposed for a pool scaled within ``settle_s`` (600 s by
  default): a node just brought back for pending work is idle until that work lands, and
  releasing it then would flap. A growth is never held back (work is waiting).

Limits: pure (no I/O). A pending job counts as one node, whatever it asks for, and every
pending job counts, whatever its reason (a job its user holds too: the queue's pending count
and oldest wait are the backend's). "Recently scaled" is any scale_pool of the pool that
succeeded (the service reads the journal), so a shrink also holds the next shrink back; a
node released by hand is not seen as a change. A pool whose nodes also serve other
partitions is judged on its own partition's queue only.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from pydantic import Field

from core.model import PoolInfo
from core.schema_base import Model
from core.signals.queue import QueueDepth

MIN_WAIT_S = 60.0
SETTLE_S = 600.0
# A pending workload due within this long does not wait for MIN_WAIT_S: every second it
# waits comes out of its slack.
DEADLINE_HORIZON_S = 6 * 3600.0


class PoolChange(Model):
    """A size to propose for one pool, and the figures it rests on."""

    pool: str
    size: int = Field(description="scale_pool's size")
    size_before: int
    grow: bool
    per_hour_before: float = Field(description="price per node x nodes up, now")
    per_hour_after: float
    pending: int = 0
    oldest_wait_s: float | None = None
    due: datetime | None = Field(default=None, description="the earliest pending deadline")
    where: str = Field(description="the queue: 'partition elastic' or the backend")
    reason: str

    @property
    def nodes(self) -> int:
        return abs(self.size - self.size_before)

    @property
    def delta_per_hour(self) -> float:
        return self.per_hour_after - self.per_hour_before


def queue_for(pool: PoolInfo, queues: Sequence[QueueDepth]) -> QueueDepth | None:
    """The queue whose pending work ``pool`` serves: its partition's on its backend, else the
    backend's whole queue (``partition`` None); None when the backend reported neither."""
    return next(
        (q for q in queues if q.backend == pool.backend and q.partition == pool.partition), None
    )


def _where(pool: PoolInfo) -> str:
    return f"partition {pool.partition}" if pool.partition else pool.backend


def pool_change(
    pool: PoolInfo,
    queue: QueueDepth | None,
    *,
    now: datetime,
    scaled_at: datetime | None = None,
    min_wait_s: float = MIN_WAIT_S,
    settle_s: float = SETTLE_S,
    shrink: bool = True,
    keep: Collection[str] = (),
    due: datetime | None = None,
    deadline_horizon_s: float = DEADLINE_HORIZON_S,
) -> PoolChange | None:
    """The change to propose for ``pool``, or None (see the module doc for the rules).
    ``shrink=False``: growths only; ``keep``: node names other proposals of this pass move
    work to (a pool with one of them idle is not shrunk this pass); ``due``: the earliest
    deadline of the workloads pending in the pool's queue."""
    price = pool.price_per_hour
    pending = queue.pending if queue is not None else 0
    waited = (queue.oldest_pending_age_s or 0.0) if queue is not None else 0.0
    where = _where(pool)
    urgent = due is not None and (due - now).total_seconds() <= deadline_horizon_s
    if pool.released and pending > 0 and (waited >= min_wait_s or urgent):
        add = min(len(pool.released), pending, pool.max_size - pool.size)
        if add <= 0:
            return None
        size = pool.size + add
        why = f"{pending} job(s) have waited up to {waited:.0f} s in {where}"
        if urgent and due is not None:
            hours = max((due - now).total_seconds(), 0.0) / 3600
            why += f", one due by {due:%Y-%m-%d %H:%M} UTC (in {hours:.1f} h)"
        reason = (
            f"{why}; grow {pool.id} from {pool.size} to {size} node(s): "
            f"{add * price:+.2f}/h ({add} x {price:.2f})."
        )
        return PoolChange(
            pool=pool.id, size=size, size_before=pool.size, grow=True,
            per_hour_before=round(price * pool.size, 4), per_hour_after=round(price * size, 4),
            pending=pending, oldest_wait_s=waited, where=where, reason=reason,
            due=due if urgent else None,
        )  # fmt: skip
    if not shrink or not pool.idle or pending > 0 or pool.size <= pool.min_size:
        return None
    if set(pool.idle) & set(keep):
        return None  # work moves there this pass (and the backend picks which idle node goes)
    if scaled_at is not None and (now - scaled_at).total_seconds() < settle_s:
        return None  # just scaled: let the work it was grown for land first
    size = max(pool.min_size, pool.size - len(pool.idle))
    gone = pool.size - size
    reason = (
        f"{pool.id} has {len(pool.idle)} idle node(s) and no work waits in {where}; shrink it "
        f"from {pool.size} to {size} (releases idle nodes only): {-gone * price:+.2f}/h "
        f"({gone} x {price:.2f})."
    )
    return PoolChange(
        pool=pool.id, size=size, size_before=pool.size, grow=False,
        per_hour_before=round(price * pool.size, 4), per_hour_after=round(price * size, 4),
        pending=0, oldest_wait_s=None, where=where, reason=reason,
    )  # fmt: skip
