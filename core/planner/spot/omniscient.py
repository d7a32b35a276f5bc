"""Omniscient: the exact optimum of the discrete replay model, for scoring policies.

Role: a backward dynamic program over (tick, progress, instance) with full knowledge of
future availability, vectorised with numpy over progress and over many start points of the
same trace at once (one job shape, many windows).

Why no "pending changeover" dimension: in the simulator's semantics a changeover that is
abandoned (preempted, or switched away from) costs money and leaves the job exactly where
idling for the same ticks would have left it, so an optimal schedule never abandons one.
A launch is therefore a macro step ``t -> t + d`` billed ``d`` ticks of the new instance
(spot only if available through all ``d`` ticks), and the optimum over that smaller state
space equals the optimum of the full model (``tests/spot`` checks this against brute force).

Limits: memory is ``O((d + 1) * starts * compute)`` floats; time ``O(deadline * starts *
compute)`` numpy element operations.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from core.planner.spot.sim import Job

F64 = npt.NDArray[np.float64]


def _ones_ahead(avail: npt.NDArray[np.int8]) -> npt.NDArray[np.int64]:
    """``out[..., t]`` = number of consecutive available ticks starting at ``t``."""
    out = np.zeros(avail.shape, dtype=np.int64)
    run = np.zeros(avail.shape[:-1], dtype=np.int64)
    for t in range(avail.shape[-1] - 1, -1, -1):
        run = np.where(avail[..., t] > 0, run + 1, 0)
        out[..., t] = run
    return out


def omniscient_costs(
    avail: Sequence[int],
    starts: Sequence[int],
    job: Job,
    tick_hours: float,
    prices: Sequence[float] | None = None,
) -> F64:
    """Minimum cost (same units as ``sim.simulate``) of ``job`` started at each of ``starts``.

    ``prices`` (aligned with ``avail``) bills each spot tick at its own price, as the
    simulator does; without it spot costs ``job.spot_price`` per tick-hour. Returns ``inf``
    where no schedule meets the deadline (cannot happen when the deadline allows
    ``compute + changeover`` ticks, since on-demand is always available).
    """
    series = np.asarray(avail, dtype=np.int8)
    T, C, d = job.deadline, job.compute, job.changeover
    n = len(starts)
    idx = np.asarray(starts, dtype=np.int64)[:, None] + np.arange(T + 1)[None, :]
    idx = np.minimum(idx, len(series) - 1)  # tick T is only read for the preemption check
    window = series[idx]  # (n, T + 1)
    launch_ok = _ones_ahead(window) >= max(d, 1)
    if prices is None:
        ks = np.full((n, T + 1), job.spot_price)
    else:
        ks = np.asarray(prices, dtype=np.float64)[idx]
    # spot_bill[:, t] = spot price summed over ticks [0, t): a launch at t costs t..t+d-1
    spot_bill = np.concatenate([np.zeros((n, 1)), np.cumsum(ks, axis=1)], axis=1)
    ko = job.od_price
    inf = np.inf

    def terminal() -> F64:
        v = np.full((n, C + 1), inf)
        v[:, C] = 0.0
        return v

    depth = d + 1
    # Ring buffers indexed by tick % depth: value of being idle / on spot / on OD at a tick.
    ring_n = [terminal() for _ in range(depth)]
    ring_s = [terminal() for _ in range(depth)]
    ring_o = [terminal() for _ in range(depth)]
    shifted = np.empty((n, C + 1))

    def shift(v: F64) -> F64:
        # value at progress p + 1; p = C stays done (0)
        shifted[:, :C] = v[:, 1:]
        shifted[:, C] = 0.0
        return shifted.copy()

    for t in range(T - 1, -1, -1):
        nxt = (t + 1) % depth
        n1, s1, o1 = ring_n[nxt], ring_s[nxt], ring_o[nxt]
        a1 = window[:, t + 1][:, None] > 0
        spot_next = np.where(a1, s1, n1)  # preempted at t + 1 if unavailable there
        run_spot = ks[:, t][:, None] + shift(spot_next)
        run_od = ko + shift(o1)
        if d == 0:
            launch_od, launch_spot = run_od, run_spot
        elif t + d <= T:
            far = (t + d) % depth
            a_far = window[:, t + d][:, None] > 0
            launch_od = d * ko + ring_o[far]
            launch_bill = (spot_bill[:, t + d] - spot_bill[:, t])[:, None]
            launch_spot = launch_bill + np.where(a_far, ring_s[far], ring_n[far])
        else:
            launch_od = np.full((n, C + 1), inf)
            launch_spot = launch_od
        can_spot = launch_ok[:, t][:, None]
        launch_spot = np.where(can_spot, launch_spot, inf)
        idle = n1
        v_n = np.minimum(np.minimum(idle, launch_spot), launch_od)
        v_s = np.minimum(np.minimum(idle, run_spot), launch_od)
        v_o = np.minimum(np.minimum(idle, run_od), launch_spot)
        # a spot state at an unavailable tick is never read (callers map it to idle)
        here = t % depth
        v_n[:, C] = v_s[:, C] = v_o[:, C] = 0.0
        ring_n[here], ring_s[here], ring_o[here] = v_n, v_s, v_o
    result: F64 = ring_n[0][:, 0] * tick_hours
    return result
