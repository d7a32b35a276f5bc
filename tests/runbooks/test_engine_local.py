"""Shipped runbooks end to end on the local backend: real CRIU, real guardrails, approvals
decided by a person through the CLI (a separate process, a different principal)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from core.config import Settings
from core.model import WorkloadState, utcnow
from core.runbooks.engine import Engine, RunView
from core.runbooks.store import RunStatus
from core.service.facade import Service
from tests.runbooks.conftest import AGENT, approve
from tests.service.conftest import PERSON, counter, step, wait_step

pytestmark = pytest.mark.criu


def _start_counter(service: Service, settings: Settings, name: str, **labels: str) -> None:
    spec = counter(settings, name, mb=20)
    if labels:
        spec = spec.model_copy(update={"labels": labels})
    service.run_workload(spec, detach=True, principal=PERSON)
    wait_step(settings, name, 3)


def _out(run: RunView, step_id: str) -> Any:
    for s in run.steps:
        if s.id == step_id:
            return s.output
    raise AssertionError(f"no step {step_id} in {[s.id for s in run.steps]}")


def _approve_and_continue(engine: Engine, settings: Settings, run: RunView) -> RunView:
    assert run.status is RunStatus.WAITING_APPROVAL, run
    assert run.waiting is not None and run.waiting.approval_id
    # The agent cannot approve its own request, and continuing does not bypass the gate.
    again = engine.continue_(run.id, principal=AGENT)
    assert again.status is RunStatus.WAITING_APPROVAL
    assert again.waiting is not None and again.waiting.approval_id == run.waiting.approval_id
    approve(settings, run.waiting.approval_id)
    return engine.continue_(run.id, principal=AGENT)


def test_sla_rescue_asks_then_migrates_after_approval(
    engine: Engine, service: Service, settings: Settings, need_criu: None
) -> None:
    deadline = (utcnow() + timedelta(minutes=10)).isoformat()
    _start_counter(service, settings, "sla-w", **{"clawpoint.io/deadline": deadline,
                                                  "clawpoint.io/expected-duration": "2h"})  # fmt: skip
    run = engine.start("sla-rescue", {"workload": "local:sla-w"}, principal=AGENT)
    assert run.status is RunStatus.WAITING_ANSWER, run
    assert _out(run, "risk")["minutes_late"] >= 15
    assert run.waiting is not None and "minutes late" in (run.waiting.question or "")
    run = engine.continue_(run.id, principal=AGENT, answer="migrate")
    # The leave-running checkpoint is safe (allowed); the migration waits for a person.
    assert _out(run, "checkpoint-gate")["status"] == "executed"
    assert run.current == "migrate-gate"
    before = step(settings, "sla-w")
    run = _approve_and_continue(engine, settings, run)
    assert run.status is RunStatus.SUCCEEDED, run
    gate = _out(run, "migrate-gate")
    assert gate["status"] == "approved" and gate["result"]["status"] == "executed"
    w = service.get_workload("local:sla-w")
    assert w.node == "node-b" and w.state is WorkloadState.RUNNING
    assert wait_step(settings, "sla-w", before) > before  # progress kept across the move
    assert any("migrated to node-b" in m for m in run.messages)
