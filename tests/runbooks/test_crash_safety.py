"""An action whose result was never recorded (the process died mid-call) is not repeated."""

from __future__ import annotations

from typing import Any

import pytest

from core.runbooks.calls import CallContext
from core.runbooks.engine import Engine
from core.runbooks.store import RunStatus
from core.service.facade import Service
from tests.runbooks.conftest import AGENT


class Crash(Exception):
    """Stands in for the process dying inside the action call."""


def test_interrupted_action_fails_closed(service: Service) -> None:
    calls: list[dict[str, Any]] = []

    def inspect(_s: Service, a: dict[str, Any], _c: CallContext) -> Any:
        return {"id": a["workload"], "state": "running", "node": "node-a"}

    def preempt(_s: Service, a: dict[str, Any], c: CallContext) -> Any:
        calls.append(a)
        assert c.principal == AGENT
        raise Crash

    fakes = {"get_workload": inspect, "preempt_workload": preempt}
    with pytest.raises(Crash):
        Engine(service, calls=fakes).start(
            "spot-interruption", {"workload": "local:w1"}, principal=AGENT
        )
    (run,) = Engine(service).runs()
    assert run.status is RunStatus.RUNNING and run.current == "save"
    assert run.steps[-1].status == "started"

    after = Engine(service, calls=fakes).continue_(run.id, principal=AGENT)
    assert after.status is RunStatus.FAILED
    assert after.error is not None and "interrupted before its result" in after.error
    assert len(calls) == 1  # never sent twice
    assert calls[0]["reason"].startswith("Spot interruption notice for node node-a")
