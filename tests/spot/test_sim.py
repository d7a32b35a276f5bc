"""Simulator semantics on tiny hand-made traces: billing, preemption, changeover."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from core import errors
from core.planner.spot import Inst, Job, simulate


class Script:
    """Plays a fixed list of actions (idle once the script runs out)."""

    name = "script"

    def __init__(self, actions: Sequence[Inst]) -> None:
        self.actions = list(actions)

    def reset(self, job: Job, prior: Sequence[int]) -> None:
        pass

    def decide(self, t: int, avail: int, progress: int, inst: Inst, pending: int) -> Inst:
        return self.actions[t] if t < len(self.actions) else Inst.NONE


S, D, N = Inst.SPOT, Inst.OD, Inst.NONE  # D: on-demand


def run(avail: list[int], actions: list[Inst], job: Job) -> tuple[float, int, int, bool, int]:
    r = simulate(avail, 0, job, Script(actions), tick_hours=1.0)
    return r.cost, r.spot_ticks, r.od_ticks, r.missed, r.changeovers


def test_spot_run_bills_changeover_then_progress() -> None:
    job = Job(compute=3, deadline=6, changeover=1, spot_price=1.0, od_price=3.0)
    cost, spot, od, missed, changes = run([1] * 6, [S] * 6, job)
    assert (spot, od, missed, changes) == (4, 0, False, 1)  # 1 changeover + 3 work
    assert cost == 4.0


def test_thrifty_stops_billing_when_done() -> None:
    job = Job(compute=2, deadline=10, changeover=0, spot_price=1.0, od_price=3.0)
    cost, spot, *_ = run([1] * 10, [S] * 10, job)
    assert (cost, spot) == (2.0, 2)


def test_preemption_loses_instance_and_restart_pays_changeover() -> None:
    job = Job(compute=3, deadline=8, changeover=1, spot_price=1.0, od_price=3.0)
    # spot up for 3 ticks (1 changeover + 2 work), down at t=3 -> on-demand pays d again
    cost, spot, od, missed, changes = run([1, 1, 1, 0, 0, 0, 0, 0], [S, S, S, D, D, D], job)
    assert (spot, od, missed, changes) == (3, 2, False, 2)
    assert cost == 3 * 1.0 + 2 * 3.0


def test_switch_between_types_charges_changeover_idle_is_free() -> None:
    job = Job(compute=2, deadline=10, changeover=2, spot_price=1.0, od_price=3.0)
    # OD: 2 changeover ticks, 1 work; idle 2 free ticks; OD again: 2 changeover, 1 work
    cost, spot, od, missed, changes = run([0] * 10, [D, D, D, N, N, D, D, D], job)
    assert (spot, od, missed, changes) == (0, 6, False, 2)
    assert cost == 18.0


def test_missed_deadline_is_reported() -> None:
    job = Job(compute=3, deadline=4, changeover=1, spot_price=1.0, od_price=3.0)
    *_, missed, _ = run([0] * 4, [N, D, D, D], job)
    assert missed


def test_spot_where_unavailable_is_a_policy_bug() -> None:
    job = Job(compute=1, deadline=3, changeover=0)
    with pytest.raises(errors.OperationFailed):
        run([0, 0, 0], [S], job)


def test_window_past_trace_end_is_invalid() -> None:
    job = Job(compute=1, deadline=5, changeover=0)
    with pytest.raises(errors.InvalidInput):
        simulate([1, 1, 1], 0, job, Script([]), tick_hours=1.0)


def test_per_tick_spot_prices_bill_each_spot_tick_at_its_own_price() -> None:
    job = Job(compute=3, deadline=8, changeover=1, spot_price=9.0, od_price=3.0)
    prices = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]
    # spot t=0..2 (changeover + 2 work), preempted at t=3, on-demand t=3..4 (d + 1 work)
    r = simulate(
        [1, 1, 1, 0, 0, 0, 0, 0], 0, job, Script([S, S, S, D, D]), tick_hours=0.5, prices=prices
    )
    assert (r.spot_ticks, r.od_ticks, r.missed) == (3, 2, False)
    assert r.cost == (1.0 + 2.0 + 4.0 + 2 * 3.0) * 0.5


def test_policy_sees_the_start_ticks_spot_price() -> None:
    seen: list[float] = []

    class Spy(Script):
        def reset(self, job: Job, prior: Sequence[int]) -> None:
            seen.append(job.spot_price)

    job = Job(compute=1, deadline=3, changeover=0, spot_price=9.0)
    simulate([1, 1, 1, 1], 1, job, Spy([S]), tick_hours=1.0, prices=[5.0, 6.0, 7.0, 8.0])
    assert seen == [6.0]


def test_misaligned_prices_are_invalid() -> None:
    job = Job(compute=1, deadline=2, changeover=0)
    with pytest.raises(errors.InvalidInput):
        simulate([1, 1, 1], 0, job, Script([S]), tick_hours=1.0, prices=[1.0])
