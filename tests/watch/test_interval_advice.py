"""The watch loop and a longer checkpoint interval: the same guardrails as any disruptive
proposal once granted. A real CRIU workload checkpointed every 10 s on an on-demand node,
where the measured checkpoint pays far less often: a pass reports the advice and changes
nothing, asking nobody; with a standing grant scoped to the planner's
``checkpoint-interval`` trigger, the next workload's pass carries it out at once. (The safe direction, shorter: tests/cli.)

The planner's 5 s per hour floor is set to 0 here: an 8 MiB counter's pause (0.01-0.05 s)
every 10 s costs 4-18 s per hour, either side of it; the 20 % share still holds.
"""

from __future__ import annotations

import pytest

from core.config import Settings
from core.durations import interval_seconds
from core.model import Action
from core.planner.planner import PlannerConfig
from core.service.facade import Service
from core.watch.loop import watch_once
from core.watch.report import EXIT_ACTED, EXIT_APPROVALS, EXIT_NOTHING
from tests.service.conftest import PERSON, counter, wait_step

pytestmark = pytest.mark.criu
ANY_SAVING = PlannerConfig(interval_min_s_per_h=0.0)


def _start(service: Service, settings: Settings, name: str) -> str:
    service.run_workload(counter(settings, name, mb=8, every=10), detach=True, principal=PERSON)
    wait_step(settings, name, 2)
    ref = f"local:{name}"
    service.act(Action.CHECKPOINT, ref, {}, principal=PERSON)  # a timed one, now
    return ref


def test_a_longer_interval_is_advice_until_a_trigger_grant_covers_it(
    service: Service, settings: Settings, need_criu: None
) -> None:
    ref = _start(service, settings, "often")
    report = watch_once(service, notices=[], nvml=None, config=ANY_SAVING)
    [advice] = [p for p in report.proposals if p.target == ref]
    assert (advice.trigger, advice.action) == (
        "checkpoint-interval",
        Action.SET_CHECKPOINT_INTERVAL,
    )
    assert advice.key in report.advised and not report.actions, report  # reported, not asked
    assert report.exit_code == EXIT_NOTHING
    assert service.get_workload(ref).checkpoint_every == 10.0  # nothing changed

    service.grant(
        Action.SET_CHECKPOINT_INTERVAL, {"trigger": "checkpoint-interval"}, max_per_hour=5,
        expires="1h", reason="interval advice may lengthen periodic checkpoints",
        principal=PERSON,
    )  # fmt: skip
    other = _start(service, settings, "often-too")
    report = watch_once(service, notices=[], nvml=None, config=ANY_SAVING)
    [done] = [a for a in report.actions if a.target == other]
    assert done.status == "executed", done
    assert report.exit_code in (EXIT_ACTED, EXIT_APPROVALS)  # the first one still waits
    every = interval_seconds(done.params["every"])
    assert every is not None and every > 10.0
    assert service.get_workload(other).checkpoint_every == every
