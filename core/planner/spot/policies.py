"""Online spot policies: Greedy and Uniform Progress ("Can't Be Late", NSDI'24) and ours.

Role: decide, tick by tick, idle / spot / on-demand for one job, seeing only the past and
the present tick's availability (the simulator in ``sim`` enforces the semantics).

Rules every policy keeps (from the paper): Thrifty (the simulator idles a finished job);
Safety Net (off spot and ``R < C + 2d``: on-demand and stay there to the end); Exploitation
(on spot, stay until preempted, even inside the Safety Net's margin: the net held when the
spot was launched, so ``R >= C + d`` still leaves room for one changeover to on-demand). Greedy and Uniform Progress follow the published rules exactly;
``ClawpointPolicy`` is ours (its rules and their reasons are in ``docs/spot-policy.md``).

Limits: single region, single instance type; availability statistics are per trace.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.planner.spot.sim import Inst, Job


class _Base:
    name = "base"

    def __init__(self) -> None:
        self.job = Job(1, 1, 0)
        self.locked = False

    def reset(self, job: Job, prior: Sequence[int]) -> None:
        self.job = job
        self.locked = False

    def safety_net(self, t: int, progress: int, inst: Inst) -> bool:
        """Paper's Safety Net ``R < C + 2d``; once tripped the job stays on on-demand.

        Checked only off spot (idle, after a preemption, or on on-demand, where moving to
        spot is no longer safe): a running spot is kept until preempted (Exploitation).
        """
        if not self.locked and inst != Inst.SPOT:
            remaining = self.job.deadline - t
            self.locked = remaining < self.job.compute - progress + self.job.safety_margin
        return self.locked


class GreedyPolicy(_Base):
    """Spot whenever available, idle otherwise, until the Safety Net forces on-demand."""

    name = "greedy"

    def decide(self, t: int, avail: int, progress: int, inst: Inst, pending: int) -> Inst:
        if self.safety_net(t, progress, inst):
            return Inst.OD
        return Inst.SPOT if avail else Inst.NONE


class UniformProgressPolicy(_Base):
    """Uniform Progress: keep progress on the line ``ep(t) = t * C0 / R0``.

    Idle and behind -> on-demand, and stay on it to catch up; any available spot is taken
    (Taking Risks) except that on on-demand the job stays until ``cp(t) >= ep(t + 2d)``
    (hysteresis); Safety Net on top. As published (the paper's state machine and its
    authors' replay code), on-demand is left only for an available spot: there is no
    on-demand -> idle move, which would pay a changeover each time the job falls behind
    again.
    """

    name = "uniform-progress"

    def _ep(self, t: int) -> float:
        return t * self.job.compute / self.job.deadline

    def decide(self, t: int, avail: int, progress: int, inst: Inst, pending: int) -> Inst:
        if self.safety_net(t, progress, inst):
            return Inst.OD
        if inst == Inst.OD and (not avail or progress < self._ep(t + 2 * self.job.changeover)):
            return Inst.OD
        if avail:
            return Inst.SPOT
        return Inst.OD if progress < self._ep(t) else Inst.NONE


class ClawpointPolicy(_Base):
    """Ours: a slack reserve sized from the availability seen so far (no future knowledge).

    Slack ``S = R - C`` (ticks that may still be spent idle or changing over). Spot alone is
    expected to need ``C * (1 - a) / a`` idle ticks for the remaining work ``C`` at the
    estimated availability ``a``; we keep a reserve of ``gamma`` times that plus a few
    changeovers. Rules, in order:

    1. Safety Net (as the paper) and Exploitation (stay on spot while it runs).
    2. Slack above the reserve: spot if available, else idle (wait out outages for free).
    3. Slack below the reserve and idle: take spot if available; else on-demand, unless the
       outage is expected to end sooner than a changeover pays back (then keep waiting).
    4. On on-demand: leave only for spot (as published UP does; going idle would pay a
       changeover each time the job falls back below the reserve), and only when the
       expected spot run (mean up-run seen so far) repays the two changeovers it risks.
    """

    name = "clawpoint"

    def __init__(
        self,
        *,
        gamma: float = 0.2,
        reserve_changeovers: float = 0.5,
        wait_changeovers: float = 1.0,
        window_hours: float = 24.0,
        tick_hours: float = 195.0 / 3600.0,
    ) -> None:
        super().__init__()
        self.gamma = gamma
        self.reserve_d = reserve_changeovers
        self.wait_d = wait_changeovers
        self.window = max(1, round(window_hours / tick_hours))
        self._hist: list[int] = []
        self._prefix: list[int] = [0]
        self._ups: list[int] = []
        self._downs: list[int] = []
        self._run = 0

    def reset(self, job: Job, prior: Sequence[int]) -> None:
        super().reset(job, prior)
        self._hist, self._prefix, self._ups, self._downs, self._run = [], [0], [], [], 0
        for a in prior:
            self._observe(a)

    def _observe(self, a: int) -> None:
        if self._hist and self._hist[-1] != a:
            (self._ups if self._hist[-1] else self._downs).append(self._run)
            self._run = 0
        self._run += 1
        self._hist.append(a)
        self._prefix.append(self._prefix[-1] + a)

    def _availability(self) -> float:
        n = min(self.window, len(self._hist))
        seen = self._prefix[-1] - self._prefix[-1 - n]
        return (seen + 1.0) / (n + 2.0)  # Laplace prior: never 0 or 1

    def _mean_up(self) -> float:
        ups = [*self._ups[-20:], self._run] if self._hist and self._hist[-1] else self._ups[-20:]
        return sum(ups) / len(ups) if ups else 1.0

    def _expected_outage_left(self) -> float:
        """Mean residual of past outages longer than the current one (elapsed ``_run``)."""
        longer = [x - self._run for x in self._downs if x > self._run]
        return sum(longer) / len(longer) if longer else float("inf")

    def decide(self, t: int, avail: int, progress: int, inst: Inst, pending: int) -> Inst:
        self._observe(avail)
        if self.safety_net(t, progress, inst):
            return Inst.OD
        if inst == Inst.SPOT:
            return Inst.SPOT  # Exploitation: the simulator already preempted it if gone
        job = self.job
        d = max(job.changeover, 1)
        remaining = job.compute - progress
        slack = job.deadline - t - remaining
        a = self._availability()
        reserve = self.gamma * remaining * (1.0 - a) / a + self.reserve_d * d
        if inst == Inst.OD:
            if avail and slack >= job.safety_margin:
                # Spot progresses as fast as on-demand; leaving only risks a changeover onto
                # spot and one back (k * d + d), repaid by the expected spot run.
                payback = self._mean_up() * (job.od_price - job.spot_price)
                if payback > (job.od_price + job.spot_price) * d:
                    return Inst.SPOT
            return Inst.OD
        if avail:
            return Inst.SPOT
        if slack >= reserve:
            return Inst.NONE
        # Behind the reserve in an outage: wait only if it should end before a changeover
        # would pay back and waiting cannot reach the safety net.
        left = self._expected_outage_left()
        if left <= self.wait_d * d and slack - left > job.safety_margin + d:
            return Inst.NONE
        return Inst.OD
