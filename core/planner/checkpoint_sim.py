"""Replay interruption histories against checkpoint-interval policies.

Role: the one definition of what an interval policy costs, shared by the benchmark
(``bench/checkpoint_interval.py``) and the tests. A history is a list of runs
(``RunSpan``: how long the workload ran before an interruption, or before the history
ended); ``simulate`` replays every run under a policy with the wrapper's semantics (the
timer waits ``interval`` after a checkpoint completes; a checkpoint pauses the workload
``pause_s`` and is durable ``wall_s`` after it started; a start or restore is a durable
point) and returns the pause time and the work lost (done since the start of the last
durable checkpoint) per hour of run time.

Histories: ``runs_from_trace`` turns a spot availability trace (``core.planner.spot.traces``)
into runs, each stretch of availability one run ended by a reclaim (its ends jittered within
a probe tick, seeded, so that no fixed interval lines up with the probe grid);
``failure_history`` generates a node-failure history (Weibull inter-failure times with
bursts of follow-on failures, seeded).

Policies: ``FixedPolicy`` (one interval), ``AdaptivePolicy`` (``recommend`` at the run's
age, with the hazard estimated online from the runs replayed so far: it never sees the
future). Limits: run time only (time without capacity is not billed), restart cost left out.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from typing import Protocol

from core import errors
from core.planner.checkpoint_interval import CheckpointCost, IntervalBounds, schedule
from core.planner.interruption_hazard import Hazard, HazardCounts, RunSpan
from core.planner.spot.traces import Trace
from core.schema_base import Model


class IntervalPolicy(Protocol):
    def interval_s(self, age_h: float) -> float: ...

    def observe(self, run: RunSpan) -> None: ...


class FixedPolicy:
    """The same interval at every age."""

    def __init__(self, interval_s: float) -> None:
        if not (math.isfinite(interval_s) and interval_s > 0):
            raise errors.InvalidInput(
                f"interval {interval_s!r} s must be above 0", hint="Give seconds, e.g. 300."
            )
        self.value = interval_s

    def interval_s(self, age_h: float) -> float:
        return self.value

    def observe(self, run: RunSpan) -> None:
        return None


class AdaptivePolicy:
    """The adaptive rule at the run's age; the hazard is estimated online from the runs seen
    so far, starting from ``prior_rate_per_h``: it never sees the runs still to come. It is
    re-estimated after the first runs and then whenever the runs seen grow by a tenth (a
    schedule over ages is computed per estimate). A given ``hazard`` is used as is (a known
    hazard, or a hindsight estimate for comparison)."""

    def __init__(
        self,
        cost: CheckpointCost,
        *,
        prior_rate_per_h: float,
        bounds: IntervalBounds | None = None,
        hazard: Hazard | None = None,
    ) -> None:
        self.cost, self.bounds = cost, bounds or IntervalBounds()
        self.prior = prior_rate_per_h
        self.counts = HazardCounts()
        self.fixed_hazard = hazard
        self.seen, self.next_refresh = 0, 1
        self._use(hazard or self.counts.hazard(prior_rate_per_h))

    def _use(self, hazard: Hazard) -> None:
        self.hazard = hazard
        table = schedule(self.cost, hazard, self.bounds)
        self._ages = [age for age, _ in table]
        self._intervals = [iv for _, iv in table]

    def interval_s(self, age_h: float) -> float:
        return self._intervals[bisect.bisect_right(self._ages, age_h) - 1]

    def observe(self, run: RunSpan) -> None:
        if self.fixed_hazard is not None:
            return
        self.counts.add(run)
        self.seen += 1
        if self.seen >= self.next_refresh:
            self.next_refresh = max(self.seen + 1, math.ceil(self.seen * 1.1))
            self._use(self.counts.hazard(self.prior))


class SimResult(Model):
    run_hours: float
    interruptions: int
    checkpoints: int
    overhead_s_per_h: float
    lost_s_per_h: float

    @property
    def total_s_per_h(self) -> float:
        return self.overhead_s_per_h + self.lost_s_per_h


def replay_run(
    run: RunSpan, cost: CheckpointCost, policy: IntervalPolicy
) -> tuple[float, float, int]:
    """(pause seconds, lost seconds, checkpoints started) over one run."""
    end = run.hours * 3600.0
    p, w = cost.pause_s, cost.wall_s
    t = 0.0  # now (seconds into the run)
    paused = 0.0
    saved = 0.0  # work made durable (its checkpoint completed)
    n = 0
    while True:
        start = t + policy.interval_s(t / 3600.0)
        if start >= end:
            break
        n += 1
        paused += min(p, end - start)
        if start + w > end:  # interrupted before this checkpoint was durable
            break
        saved = start - (paused - p)  # the work done before this checkpoint started
        t = start + w
    lost = (end - paused) - saved if run.interrupted else 0.0
    return paused, lost, n


def _fixed_run(run: RunSpan, cost: CheckpointCost, interval: float) -> tuple[float, float, int]:
    """``replay_run`` for one interval, in closed form (the sweep replays many)."""
    end = run.hours * 3600.0
    p, w = cost.pause_s, cost.wall_s
    n = max(0, math.ceil((end + w) / (interval + w)) - 1)  # starts j*interval+(j-1)*w < end
    if n == 0:
        return 0.0, end if run.interrupted else 0.0, 0
    last = n * interval + (n - 1) * w
    paused = (n - 1) * p + min(p, end - last)
    k = n if last + w <= end else n - 1  # the last durable checkpoint
    saved = k * interval + (k - 1) * (w - p) if k else 0.0
    lost = (end - paused) - saved if run.interrupted else 0.0
    return paused, lost, n


def simulate(runs: Sequence[RunSpan], cost: CheckpointCost, policy: IntervalPolicy) -> SimResult:
    """Replay ``runs`` in order under ``policy`` (told each run once it is over)."""
    hours = sum(r.hours for r in runs)
    if hours <= 0:
        raise errors.InvalidInput(
            "the history has no run time", hint="Replay at least one run longer than 0 h."
        )
    paused = lost = 0.0
    count = 0
    for run in runs:
        if isinstance(policy, FixedPolicy):
            a, b, n = _fixed_run(run, cost, policy.value)
        else:
            a, b, n = replay_run(run, cost, policy)
        paused, lost, count = paused + a, lost + b, count + n
        policy.observe(run)
    return SimResult(
        run_hours=hours,
        interruptions=sum(r.interrupted for r in runs),
        checkpoints=count,
        overhead_s_per_h=paused / hours,
        lost_s_per_h=lost / hours,
    )


def sweep_grid(lo_s: float = 5.0, hi_s: float = 43_200.0, points: int = 120) -> list[float]:
    """Log-spaced intervals for the hindsight sweep of fixed intervals."""
    ratio = (hi_s / lo_s) ** (1 / (points - 1))
    return [lo_s * ratio**i for i in range(points)]


def runs_from_trace(trace: Trace, seed: int) -> list[RunSpan]:
    """Each stretch of availability a run; it ends in a reclaim unless the trace ends first.
    Both ends move by a uniform fraction of a tick (the change happened between probes)."""
    rng = random.Random(f"{trace.name}:{seed}")
    tick = trace.tick_hours
    runs: list[RunSpan] = []
    up = 0
    for a in (*trace.availability, None):
        if a == 1:
            up += 1
            continue
        if up:
            hours = (up - 1 + rng.random() + rng.random()) * tick
            runs.append(RunSpan(hours=hours, interrupted=a == 0))
        up = 0
    return runs


def failure_history(
    seed: int,
    *,
    days: float = 180.0,
    shape: float = 0.7,
    mean_gap_h: float = 36.0,
    burst_p: float = 0.35,
    burst_max: int = 3,
    burst_gap_h: float = 0.5,
) -> list[RunSpan]:
    """A node-failure history: inter-failure times Weibull(``shape``) with mean
    ``mean_gap_h``; after a failure, with probability ``burst_p``, 1..``burst_max`` more
    follow at exponential gaps of mean ``burst_gap_h`` (a flapping node, a bad rack)."""
    rng = random.Random(seed)
    scale = mean_gap_h / math.gamma(1 + 1 / shape)
    horizon, now = days * 24.0, 0.0
    runs: list[RunSpan] = []
    while now < horizon:
        gaps = [rng.weibullvariate(scale, shape)]
        if rng.random() < burst_p:
            gaps += [rng.expovariate(1 / burst_gap_h) for _ in range(rng.randint(1, burst_max))]
        for gap in gaps:
            end = min(now + gap, horizon)
            runs.append(RunSpan(hours=end - now, interrupted=end < horizon))
            now = end
            if now >= horizon:
                break
    return runs
