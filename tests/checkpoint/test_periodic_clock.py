"""``core.wrapper.periodic.PeriodicClock``: when the wrapper's next periodic checkpoint is
due as the interval changes under it (``set_checkpoint_interval``). The end-to-end behaviour
on a real wrapper is in tests/cli/test_checkpoint_interval.py."""

from __future__ import annotations

import time

import pytest

from core.wrapper.periodic import PeriodicClock


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The clock's monotonic time, moved by the test (``now[0] = ...``)."""
    t = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: t[0])
    return t


def test_off_waits_for_nothing_and_an_interval_counts_from_the_start(now: list[float]) -> None:
    assert PeriodicClock(None).wait_s() is None
    clock = PeriodicClock(60.0)
    now[0] = 110.0
    clock.restart(checkpointed=False)  # the main loop starts
    now[0] = 130.0
    assert clock.wait_s() == 40.0
    now[0] = 200.0
    assert clock.wait_s() == 0.0  # due, never negative


def test_a_new_interval_counts_from_the_last_checkpoint(now: list[float]) -> None:
    clock = PeriodicClock(3600.0)
    clock.restart(checkpointed=True)  # a checkpoint ended at 100
    now[0] = 150.0
    assert clock.set(60.0) == 10.0  # due at 160: 60 s after that checkpoint
    assert clock.set(30.0) == 0.0  # 50 s since the last one: due at once
    assert clock.set(None) is None  # off
    now[0] = 170.0
    clock.restart(checkpointed=True)
    assert clock.set(20.0) == 20.0


def test_a_new_interval_without_a_checkpoint_counts_from_now(now: list[float]) -> None:
    clock = PeriodicClock(None)
    clock.restart(checkpointed=False)
    now[0] = 1000.0  # ran 900 s with no checkpoint
    assert clock.set(2.0) == 2.0  # not at once: from the change
    now[0] = 1001.5
    assert clock.wait_s() == 0.5
