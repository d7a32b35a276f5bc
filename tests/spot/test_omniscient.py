"""Omniscient is exact on tiny cases (brute force) and a lower bound of every policy."""

from __future__ import annotations

import itertools
import random

import pytest

from core.planner.spot import (
    ClawpointPolicy,
    GreedyPolicy,
    Inst,
    Job,
    UniformProgressPolicy,
    omniscient_costs,
    simulate,
)
from tests.spot.test_sim import Script


def brute_force(avail: list[int], job: Job) -> float:
    best = float("inf")
    for actions in itertools.product(list(Inst), repeat=job.deadline):
        if any(a == Inst.SPOT and not avail[t] for t, a in enumerate(actions)):
            continue
        r = simulate(avail, 0, job, Script(actions), tick_hours=1.0)
        if not r.missed:
            best = min(best, r.cost)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_equals_brute_force_on_tiny_traces(seed: int) -> None:
    rng = random.Random(seed)
    deadline = rng.randint(4, 7)
    compute = rng.randint(1, deadline - 2)
    change = rng.randint(0, min(2, deadline - compute))
    job = Job(compute, deadline, change, 1.0, rng.choice([1.5, 3.0]))
    avail = [rng.randint(0, 1) for _ in range(deadline + 1)]
    got = omniscient_costs(avail, [0], job, 1.0)[0]
    assert got == pytest.approx(brute_force(avail, job))


def brute_force_priced(avail: list[int], job: Job, prices: list[float]) -> float:
    best = float("inf")
    for actions in itertools.product(list(Inst), repeat=job.deadline):
        if any(a == Inst.SPOT and not avail[t] for t, a in enumerate(actions)):
            continue
        r = simulate(avail, 0, job, Script(actions), tick_hours=1.0, prices=prices)
        if not r.missed:
            best = min(best, r.cost)
    return best


@pytest.mark.parametrize("seed", range(8))
def test_equals_brute_force_with_per_tick_spot_prices(seed: int) -> None:
    rng = random.Random(50 + seed)
    deadline = rng.randint(4, 7)
    compute = rng.randint(1, deadline - 2)
    change = rng.randint(0, min(2, deadline - compute))
    job = Job(compute, deadline, change, 1.0, 2.0)
    avail = [rng.randint(0, 1) for _ in range(deadline + 1)]
    prices = [rng.choice([0.5, 1.0, 1.9]) for _ in range(deadline + 1)]
    got = omniscient_costs(avail, [0], job, 1.0, prices)[0]
    assert got == pytest.approx(brute_force_priced(avail, job, prices))


@pytest.mark.parametrize("seed", range(4))
def test_lower_bound_of_every_policy(seed: int) -> None:
    rng = random.Random(100 + seed)
    avail = [int(rng.random() < 0.6) for _ in range(300)]
    job = Job(40, rng.choice([50, 70]), rng.choice([1, 3]), 1.0, 3.0)
    starts = rng.sample(range(0, 300 - job.deadline), 8)
    best = omniscient_costs(avail, starts, job, 1.0)
    for policy in (GreedyPolicy(), UniformProgressPolicy(), ClawpointPolicy(tick_hours=1.0)):
        for start, opt in zip(starts, best, strict=True):
            r = simulate(avail, start, job, policy, tick_hours=1.0)
            assert opt <= r.cost + 1e-9


def test_all_spot_is_optimal_when_always_available() -> None:
    job = Job(10, 20, 2, 1.0, 3.0)
    assert omniscient_costs([1] * 25, [0, 3], job, 0.5).tolist() == [6.0, 6.0]
