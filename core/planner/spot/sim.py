"""Replay simulator for deadline-aware spot / on-demand scheduling (integer ticks).

Role: the single definition of the benchmark semantics every policy is judged by.

- A decision at tick ``t`` covers ``[t, t+1)`` and is billed per tick.
- Spot can be chosen only where the trace says it is available at ``t``; a running spot
  instance is preempted at the first tick whose availability is 0 (the policy then sees
  no instance and decides again in the same tick).
- Choosing a non-idle instance type different from the one running (including after a
  preemption or an idle spell: idle means no instance) starts a changeover of ``d`` ticks:
  billed at that instance's price, no progress. Idle is free; progress survives every switch
  (the job checkpoints).
- Thrifty is enforced here: once the work is done the job is idle.
- Spot ticks are billed at the trace's spot price of that tick when a per-tick price series
  is given (as the published replay does), else at ``job.spot_price``; on-demand ticks at
  ``job.od_price``. Policies see the spot price of the start tick as ``job.spot_price``.

Limits: the changeover is rounded to whole ticks (``round(d / tick)``, at least 1 when
``d > 0``) so the exact optimum (``omniscient``) and every policy share one discrete model;
the on-demand price is constant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Protocol

from core import errors


class Inst(IntEnum):
    """An instance kind, and the action of running on it (``NONE`` = idle)."""

    NONE = 0
    SPOT = 1
    OD = 2


@dataclass(frozen=True, slots=True)
class Job:
    """A job in ticks: work needed, deadline (ticks from start) and changeover length."""

    compute: int
    deadline: int
    changeover: int
    spot_price: float = 1.0
    od_price: float = 3.0

    @property
    def safety_margin(self) -> int:
        # 2d as in the paper; with d = 0 a margin of 1 tick is still needed because the
        # net is checked once per tick and one idle tick can pass before it fires.
        return 2 * max(self.changeover, 1)


def job_in_ticks(
    *,
    compute_hours: float,
    job_fraction: float,
    changeover_hours: float,
    tick_hours: float,
    spot_price: float,
    od_price: float,
) -> Job:
    """Discretise a job: work rounds up, the deadline rounds down (never easier than asked)."""
    compute = math.ceil(compute_hours / tick_hours - 1e-9)
    deadline = math.floor(compute_hours / job_fraction / tick_hours + 1e-9)
    change = 0 if changeover_hours <= 0 else max(1, round(changeover_hours / tick_hours))
    if deadline < compute + change:
        raise errors.InvalidInput(
            f"Job fraction {job_fraction} leaves no room for one changeover of "
            f"{changeover_hours} h before the deadline.",
            hint="Lower the job fraction or the changeover so the deadline allows C + d.",
        )
    return Job(compute, deadline, change, spot_price, od_price)


class Policy(Protocol):
    """An online policy: sees the past and the present tick, never the future."""

    name: str

    def reset(self, job: Job, prior: Sequence[int]) -> None:
        """Start a job; ``prior`` is availability observed before the start (may be empty)."""

    def decide(self, t: int, avail: int, progress: int, inst: Inst, pending: int) -> Inst:
        """Choose the instance for tick ``t`` (ticks since start)."""
        ...


@dataclass(frozen=True, slots=True)
class RunResult:
    cost: float
    spot_ticks: int
    od_ticks: int
    changeovers: int
    preemptions: int
    finished_tick: int
    missed: bool


def cost_of(job: Job, tick_hours: float, spot_ticks: int, od_ticks: int) -> float:
    return (spot_ticks * job.spot_price + od_ticks * job.od_price) * tick_hours


def on_demand_cost(job: Job, tick_hours: float) -> float:
    """The reference: launch on-demand at once and run to completion (C + d ticks)."""
    return cost_of(job, tick_hours, 0, job.compute + job.changeover)


def simulate(
    avail: Sequence[int],
    start: int,
    job: Job,
    policy: Policy,
    *,
    tick_hours: float,
    lookback: int = 0,
    prices: Sequence[float] | None = None,
) -> RunResult:
    """Replay ``policy`` on ``avail[start : start + job.deadline]``.

    ``prices``, aligned with ``avail``, bills each spot tick at that tick's price.
    """
    if start < 0 or start + job.deadline > len(avail):
        raise errors.InvalidInput(
            f"Start {start} + deadline {job.deadline} ticks overruns a {len(avail)}-tick trace.",
            hint="Use a longer trace or a smaller job (compute hours / job fraction).",
        )
    if prices is not None and len(prices) != len(avail):
        raise errors.InvalidInput(
            f"{len(prices)} spot prices for a {len(avail)}-tick trace.",
            hint="Give one spot price per availability row, or none.",
        )
    if prices is not None:
        job = replace(job, spot_price=float(prices[start]))
    policy.reset(job, avail[max(0, start - lookback) : start])
    inst = Inst.NONE
    pending = progress = spot_ticks = od_ticks = changeovers = preemptions = 0
    spot_bill = 0.0
    finished = job.deadline
    for t in range(job.deadline):
        if progress >= job.compute:
            finished = t
            break
        a = avail[start + t]
        if inst == Inst.SPOT and not a:
            inst, pending = Inst.NONE, 0
            preemptions += 1
        act = policy.decide(t, a, progress, inst, pending)
        if act == Inst.NONE:
            inst, pending = Inst.NONE, 0
            continue
        if act == Inst.SPOT and not a:
            raise errors.OperationFailed(
                f"Policy {policy.name} chose spot at tick {t} where none is available.",
                hint="This is a policy bug: a policy may pick spot only when avail is 1.",
            )
        if act != inst:
            inst, pending = act, job.changeover
            changeovers += 1
        if act == Inst.SPOT:
            spot_ticks += 1
            spot_bill += job.spot_price if prices is None else prices[start + t]
        else:
            od_ticks += 1
        if pending > 0:
            pending -= 1
        else:
            progress += 1
    else:
        if progress >= job.compute:
            finished = job.deadline
    return RunResult(
        cost=(spot_bill + od_ticks * job.od_price) * tick_hours,
        spot_ticks=spot_ticks,
        od_ticks=od_ticks,
        changeovers=changeovers,
        preemptions=preemptions,
        finished_tick=finished,
        missed=progress < job.compute,
    )
