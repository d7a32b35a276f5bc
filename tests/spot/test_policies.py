"""Greedy / Uniform Progress decisions on constructed cases; no policy misses a deadline."""

from __future__ import annotations

import random

import pytest

from core.planner.spot import (
    ClawpointPolicy,
    GreedyPolicy,
    Inst,
    Job,
    UniformProgressPolicy,
    simulate,
)

JOB = Job(compute=50, deadline=100, changeover=2, spot_price=1.0, od_price=3.0)


def test_greedy_idles_without_spot_until_safety_net() -> None:
    p = GreedyPolicy()
    p.reset(JOB, [])
    assert p.decide(0, 0, 0, Inst.NONE, 0) == Inst.NONE
    assert p.decide(1, 1, 0, Inst.NONE, 0) == Inst.SPOT
    # R = 100 - 47 = 53 < C + 2d = 50 + 4: safety net, and it sticks even if spot returns
    assert p.decide(47, 0, 0, Inst.NONE, 0) == Inst.OD
    assert p.decide(48, 1, 1, Inst.OD, 0) == Inst.OD


def test_uniform_progress_goes_on_demand_when_behind() -> None:
    p = UniformProgressPolicy()
    p.reset(JOB, [])
    # ep(10) = 5; progress 4 is behind, 6 ahead
    assert p.decide(10, 0, 4, Inst.NONE, 0) == Inst.OD
    assert p.decide(10, 0, 6, Inst.NONE, 0) == Inst.NONE
    assert p.decide(10, 1, 0, Inst.NONE, 0) == Inst.SPOT


def test_uniform_progress_hysteresis_on_on_demand() -> None:
    p = UniformProgressPolicy()
    p.reset(JOB, [])
    # on OD at t=10: stay while progress < ep(10 + 2d) = ep(14) = 7, even with spot up
    assert p.decide(10, 1, 6, Inst.OD, 0) == Inst.OD
    assert p.decide(10, 1, 7, Inst.OD, 0) == Inst.SPOT
    # published UP leaves on-demand only for spot: ahead of the line, no spot -> stay
    assert p.decide(10, 0, 7, Inst.OD, 0) == Inst.OD
    assert p.decide(10, 0, 9, Inst.OD, 0) == Inst.OD


def test_safety_net_does_not_pull_a_running_spot_off() -> None:
    # R = 100 - 47 = 53 < C + 2d = 54, but the job is on a running spot: Exploitation keeps
    # it (the net held at launch, so R >= C + d still fits one changeover to on-demand)
    for p in (GreedyPolicy(), UniformProgressPolicy(), ClawpointPolicy(tick_hours=1.0)):
        p.reset(JOB, [])
        assert p.decide(47, 1, 0, Inst.SPOT, 0) == Inst.SPOT, p.name
        # preempted (the simulator hands over an idle job): the net fires and sticks
        assert p.decide(48, 0, 1, Inst.NONE, 0) == Inst.OD, p.name
        assert p.decide(49, 1, 2, Inst.OD, 0) == Inst.OD, p.name


def test_exploitation_keeps_running_spot() -> None:
    for p in (UniformProgressPolicy(), ClawpointPolicy(tick_hours=1.0)):
        p.reset(JOB, [])
        assert p.decide(5, 1, 0, Inst.SPOT, 0) == Inst.SPOT


def test_clawpoint_waits_when_slack_is_ample_and_runs_od_when_short() -> None:
    p = ClawpointPolicy(tick_hours=1.0)
    p.reset(JOB, [1] * 90 + [0] * 10)  # ~90% available so far
    assert p.decide(0, 0, 0, Inst.NONE, 0) == Inst.NONE  # slack 50 >> reserve
    q = ClawpointPolicy(tick_hours=1.0)
    q.reset(JOB, [0] * 98 + [1] * 2)  # ~10% available in the last day: reserve > slack
    assert q.decide(0, 0, 0, Inst.NONE, 0) == Inst.OD


def _markov_trace(rng: random.Random, n: int, stay_up: float, stay_down: float) -> list[int]:
    out, cur = [], rng.random() < 0.5
    for _ in range(n):
        out.append(int(cur))
        cur = rng.random() < (stay_up if cur else 1 - stay_down)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_no_policy_misses_a_deadline_on_random_traces(seed: int) -> None:
    rng = random.Random(seed)
    trace = _markov_trace(rng, 600, rng.uniform(0.5, 0.99), rng.uniform(0.5, 0.99))
    for frac in (0.6, 0.9, 0.97):
        d = rng.choice([0, 1, 3, 6])
        compute = 120
        deadline = max(int(compute / frac), compute + d)  # feasible: C + d fits
        job = Job(compute, deadline, d, 1.0, rng.uniform(1.5, 4.0))
        for policy in (GreedyPolicy(), UniformProgressPolicy(), ClawpointPolicy(tick_hours=1.0)):
            for start in rng.sample(range(100, 600 - job.deadline), 5):
                r = simulate(trace, start, job, policy, tick_hours=1.0, lookback=100)
                assert not r.missed, (policy.name, seed, frac, d, start)
