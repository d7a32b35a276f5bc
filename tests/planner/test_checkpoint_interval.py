"""The checkpoint-interval model, its hazard estimate and its simulator (pure, fast)."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest

from core import errors
from core.model import CheckpointInfo
from core.planner.checkpoint_interval import (
    CheckpointCost,
    IntervalBounds,
    _cycle_rate,
    adaptive_interval_s,
    daly_period,
    recommend,
    young_period,
)
from core.planner.checkpoint_sim import (
    AdaptivePolicy,
    FixedPolicy,
    _fixed_run,
    failure_history,
    replay_run,
    runs_from_trace,
    simulate,
    sweep_grid,
)
from core.planner.interruption_hazard import Hazard, RunSpan, estimate_hazard
from core.planner.spot.traces import Trace

COST = CheckpointCost(pause_s=0.5, wall_s=1.0)


def test_young_and_daly_closed_forms() -> None:
    assert young_period(0.5, 3600) == pytest.approx(60.0)
    c, m = 0.5, 3600.0
    expected = math.sqrt(2 * c * m) * (1 + math.sqrt(c / (2 * m)) / 3 + c / (18 * m))
    assert daly_period(c, m) == pytest.approx(expected)
    assert daly_period(c, m) > young_period(c, m)  # the higher-order terms add, slightly
    assert daly_period(10, 4) == 14  # a checkpoint longer than 2 MTBF: period M + C


def test_constant_hazard_recommends_daly() -> None:
    advice = recommend(COST, Hazard.from_mtbf(2.0))
    assert advice.method == "young-daly"
    assert advice.interval_s == pytest.approx(daly_period(0.5, 7200) - 1.0, abs=0.05)
    period = advice.interval_s + 1.0
    assert advice.overhead_s_per_h == pytest.approx(3600 * 0.5 / period, rel=1e-2)
    assert advice.expected_loss_s_per_h == pytest.approx(0.5 * (period / 2 + 1.0), rel=1e-2)
    assert len(advice.why) < 100 and "2.0 h" in advice.why
    # the age does not matter when the hazard is constant
    assert recommend(COST, Hazard.from_mtbf(2.0), age_h=30).interval_s == advice.interval_s


def test_bounds_apply_and_a_zero_hazard_checkpoints_rarely() -> None:
    bounds = IntervalBounds(min_s=120, max_s=3600)
    assert recommend(COST, Hazard.from_mtbf(0.01), bounds=bounds).interval_s == 120
    quiet = recommend(COST, Hazard.constant(0.0), bounds=bounds)
    assert quiet.interval_s == 3600 and quiet.expected_loss_s_per_h == 0
    assert "No interruptions" in quiet.why


def test_age_dependent_hazard_checkpoints_young_runs_more_often() -> None:
    hazard = Hazard(edges_h=(0, 1, 8), rates_per_h=(2.0, 0.2, 0.02))
    young = recommend(COST, hazard, age_h=0.1)
    old = recommend(COST, hazard, age_h=20)
    assert young.method == "adaptive"
    assert young.interval_s < old.interval_s
    # where the hazard no longer changes, the one-cycle optimum is Young/Daly's
    assert old.interval_s == pytest.approx(daly_period(0.5, 3600 / 0.02) - 1.0, rel=1e-2)


def test_hazard_estimate_counts_events_and_exposure_per_bin() -> None:
    runs = [RunSpan(hours=0.5, interrupted=True)] * 20 + [RunSpan(hours=10, interrupted=False)]
    h = estimate_hazard(runs, prior_rate_per_h=0.1, edges_h=(0, 1))
    # bin 0: 20 events over 20 * 0.5 + 1 h; bin 1: none over 9 h (censored run)
    assert h.rates_per_h[0] > 1.5 and h.rates_per_h[1] < 0.2
    empty = estimate_hazard([], prior_rate_per_h=0.1, edges_h=(0, 1))
    assert empty.rates_per_h == pytest.approx((0.1, 0.1))
    assert Hazard.constant(2.0).cumulative(3.0) == pytest.approx(6.0)
    steps = Hazard(edges_h=(0, 1), rates_per_h=(3.0, 1.0))
    assert steps.mean_rate(0.5, 1.5) == pytest.approx(2.0)
    assert Hazard.constant(0.5).mean_rate_over_time() == pytest.approx(0.5)


def test_cost_from_checkpoints_is_the_median_of_their_timings() -> None:
    def ckpt(seq: int, **timings: float) -> CheckpointInfo:
        return CheckpointInfo(id=f"w/{seq}", lineage="w", seq=seq, engine="criu",
                              created_at=datetime(2026, 1, 1, tzinfo=UTC), size_bytes=1,
                              timings=timings)  # fmt: skip

    infos = [ckpt(1, frozen_s=0.2, total_s=0.5), ckpt(2, frozen_s=0.4, total_s=0.9),
             ckpt(3, criu_dump_s=0.3, total_s=0.6), ckpt(4)]  # fmt: skip
    assert CheckpointCost.from_checkpoints(infos) == CheckpointCost(pause_s=0.3, wall_s=0.6)
    assert CheckpointCost.from_checkpoints([ckpt(5)]) is None
    # a stored manifest has no total_s: the wall is the dump and the publish
    stored = ckpt(6, frozen_s=0.05, criu_dump_s=0.09, publish_s=0.01)
    cost = CheckpointCost.from_checkpoints([stored])
    assert cost is not None and (cost.pause_s, cost.wall_s) == (0.05, pytest.approx(0.1))


@pytest.mark.parametrize(
    "make",
    [
        lambda: CheckpointCost(pause_s=0, wall_s=1),
        lambda: CheckpointCost(pause_s=2, wall_s=1),
        lambda: CheckpointCost(pause_s=math.nan, wall_s=1),
        lambda: IntervalBounds(min_s=60, max_s=10),
        lambda: IntervalBounds(min_s=0),
        lambda: Hazard(rates_per_h=(-1.0,)),
        lambda: Hazard(edges_h=(1,), rates_per_h=(1.0,)),
        lambda: Hazard(edges_h=(0, 2, 1), rates_per_h=(1.0, 1.0, 1.0)),
        lambda: Hazard.constant(math.inf),
        lambda: Hazard.from_mtbf(0),
        lambda: recommend(COST, Hazard.from_mtbf(1), age_h=-1),
        lambda: recommend(COST, Hazard.from_mtbf(1), age_h=math.nan),
        lambda: estimate_hazard([], prior_rate_per_h=0),
        lambda: FixedPolicy(0),
        lambda: simulate([], COST, FixedPolicy(60)),
    ],
)
def test_nonsense_input_is_refused_with_a_hint(make: object) -> None:
    with pytest.raises(errors.InvalidInput) as info:
        make()  # type: ignore[operator]
    assert info.value.hint


def test_the_closed_form_replay_equals_the_step_by_step_one() -> None:
    rng = random.Random(5)
    for _ in range(300):
        run = RunSpan(hours=rng.expovariate(4), interrupted=rng.random() < 0.8)
        for interval in (3.0, 37.5, 900.0):
            a = replay_run(run, COST, FixedPolicy(interval))
            b = _fixed_run(run, COST, interval)
            assert a[2] == b[2] and a[0] == pytest.approx(b[0]) and a[1] == pytest.approx(b[1])


def test_a_run_interrupted_mid_checkpoint_loses_the_work_that_checkpoint_held() -> None:
    # interval 10 s, pause 0.5 s, durable after 1 s; interrupted 10.6 s in: the checkpoint
    # that started at 10 s is not durable, so all 10.1 s of work are lost
    paused, lost, n = replay_run(RunSpan(hours=10.6 / 3600, interrupted=True), COST,
                                 FixedPolicy(10))  # fmt: skip
    assert (n, paused) == (1, 0.5) and lost == pytest.approx(10.1)


def test_constant_hazard_adaptive_matches_young_daly_in_the_simulator() -> None:
    rng = random.Random(3)
    runs = [RunSpan(hours=rng.expovariate(1 / 6), interrupted=True) for _ in range(400)]
    mtbf_s = 3600 * sum(r.hours for r in runs) / len(runs)
    yd = simulate(runs, COST, FixedPolicy(daly_period(0.5, mtbf_s) - 1.0)).total_s_per_h
    known = AdaptivePolicy(COST, prior_rate_per_h=1, hazard=Hazard.from_mtbf(mtbf_s / 3600))
    assert simulate(runs, COST, known).total_s_per_h == pytest.approx(yd, rel=1e-9)
    learnt = simulate(runs, COST, AdaptivePolicy(COST, prior_rate_per_h=1 / 6)).total_s_per_h
    # estimating the (constant) hazard online, bin by bin, costs a few per cent (4.3% here)
    assert learnt / yd < 1.06


def test_bursty_failures_adaptive_beats_the_best_fixed_interval() -> None:
    runs = failure_history(11, burst_p=0.6, burst_max=5, burst_gap_h=0.2)
    best = min(simulate(runs, COST, FixedPolicy(iv)).total_s_per_h for iv in sweep_grid(points=40))
    adaptive = simulate(runs, COST, AdaptivePolicy(COST, prior_rate_per_h=1 / 24))
    assert adaptive.total_s_per_h / best < 0.85  # 0.79 with this seed


def test_runs_from_a_trace_end_in_reclaims_and_the_last_is_censored() -> None:
    trace = Trace(name="z", tick_hours=0.1, availability=(0, 1, 1, 0, 1, 1, 1, 0, 1))
    runs = runs_from_trace(trace, seed=0)
    assert [r.interrupted for r in runs] == [True, True, False]
    assert 0.1 <= runs[0].hours <= 0.3 and 0.2 <= runs[1].hours <= 0.4
    assert runs == runs_from_trace(trace, seed=0) != runs_from_trace(trace, seed=1)


def test_the_adaptive_interval_is_the_one_cycle_optimum() -> None:
    # quiet for 6 minutes after a restart, then reclaims likely: no interval on a fine grid
    # gives the next cycle a lower cost per second (an earlier fixed-point rule oscillated here)
    cost = CheckpointCost(pause_s=5.0, wall_s=5.2)
    hazard = Hazard(edges_h=(0, 0.1, 1), rates_per_h=(0.05, 3.0, 0.3))
    for age in (0.0, 0.05, 0.5, 3.0):
        chosen = adaptive_interval_s(cost, hazard, age)
        rate = _cycle_rate(cost, hazard, age, chosen)
        assert all(rate <= _cycle_rate(cost, hazard, age, iv) * (1 + 1e-6)
                   for iv in sweep_grid(10, 86_400, 300))  # fmt: skip


def test_the_learned_mtbf_starts_at_the_prior_and_follows_what_was_seen() -> None:
    from core.planner.interruption_hazard import learned_mtbf_h, mtbf_basis

    assert learned_mtbf_h(4.0, 0, 0.0) == 4.0  # nothing watched: the configured guess
    assert learned_mtbf_h(4.0, 0, 96.0) == 100.0  # four quiet days lengthen it
    assert learned_mtbf_h(4.0, 99, 396.0) == pytest.approx(4.0)  # as often as configured
    assert learned_mtbf_h(720.0, 10, 100.0) == pytest.approx(74.5, abs=0.1)  # failing often
    assert mtbf_basis(4.0, 0, 0.0) == "MTBF 4 h as configured (nothing watched yet)"
    assert mtbf_basis(4.0, 1, 10.0) == (
        "MTBF 7 h: 1 interruption(s) in 10 node-hours watched and the configured 4 h"
    )
