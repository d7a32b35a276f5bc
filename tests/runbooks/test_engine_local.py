"""Shipped runbooks end to end on the local backend: real CRIU, real guardrails, approvals
decided by a person through the CLI (a separate process, a different principal)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

import pytest

from core.backends.local import LocalBackend
from core.config import Settings
from core.model import WorkloadState, utcnow
from core.runbooks.calls import CallContext
from core.runbooks.engine import Engine
from core.runbooks.store import RunStatus
from core.runbooks.views import RunView
from core.service.facade import Service
from tests.runbooks.conftest import AGENT, approve, cli
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
    assert run.status is not RunStatus.FAILED, (run.error, run.steps[-1])
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
    assert any("migrated to node-b" in m and "before its deadline" in m for m in run.messages)


def _degrade(service: Service, node: str) -> None:
    local = cast(LocalBackend, service.backend("local"))
    local.set_node_state(node, health="degraded", reason="xid 79: GPU fell off the bus")


def test_gpu_node_failure_drains_with_checkpoints(
    engine: Engine, service: Service, settings: Settings, need_criu: None
) -> None:
    _start_counter(service, settings, "gpu-w")
    healthy = engine.start("gpu-node-failure", {"node": "local:node-a"}, principal=AGENT)
    assert healthy.status is RunStatus.SUCCEEDED  # healthy node: the check stops the run
    assert [s.id for s in healthy.steps] == ["health", "is-unhealthy"]
    assert any("reports healthy" in m for m in healthy.messages)

    _degrade(service, "node-a")
    run = engine.start("gpu-node-failure", {"node": "local:node-a"}, principal=AGENT)
    assert _out(run, "health")["health"] == "degraded"
    assert run.current == "drain-gate"
    run = _approve_and_continue(engine, settings, run)
    assert run.status is RunStatus.SUCCEEDED, (run.error, run.steps[-1])
    assert _out(run, "has-workload") == {"result": False}
    assert service.get_workload("local:gpu-w").node == "node-b"
    assert not any(n.schedulable for n in service.nodes("local") if n.name == "node-a")


def test_denied_gate_follows_on_denied(
    engine: Engine, service: Service, settings: Settings
) -> None:
    _degrade(service, "node-b")
    run = engine.start("gpu-node-failure", {"node": "local:node-b"}, principal=AGENT)
    assert run.status is RunStatus.WAITING_APPROVAL and run.waiting is not None
    denied = cli(settings, "approvals", "deny", str(run.waiting.approval_id), "--why", "not now")
    assert denied["status"] == "denied"
    run = engine.continue_(run.id, principal=AGENT)
    assert run.status is RunStatus.SUCCEEDED
    assert _out(run, "drain-gate")["status"] == "denied"
    assert run.steps[-1].id == "tell-denied"
    assert all(n.schedulable for n in service.nodes("local"))  # nothing was drained


def test_node_maintenance_drain_asks_then_drains(
    engine: Engine, service: Service, settings: Settings, need_criu: None
) -> None:
    _start_counter(service, settings, "mnt-w")
    run = engine.start("node-maintenance-drain",
                       {"node": "local:node-a", "window": "now"}, principal=AGENT)  # fmt: skip
    assert run.status is RunStatus.WAITING_ANSWER
    assert _out(run, "workloads")["count"] == 1
    with pytest.raises(Exception, match="not an answer"):
        engine.continue_(run.id, principal=AGENT, answer="maybe")
    assert engine.status(run.id).status is RunStatus.WAITING_ANSWER
    run = engine.continue_(run.id, principal=AGENT, answer="Drain now with checkpoints")
    assert _out(run, "confirm") == {"answer": "drain", "answered_by": str(AGENT)}
    run = _approve_and_continue(engine, settings, run)
    assert run.status is RunStatus.SUCCEEDED, (run.error, run.steps[-1])
    assert _out(run, "empty")["count"] == 0
    assert run.steps[-1].id == "done"
    assert service.get_workload("local:mnt-w").node == "node-b"


def test_queue_backlog_preempts_after_choice_and_approval(
    service: Service, settings: Settings, need_criu: None
) -> None:
    """The local backend has no queue, so the two signals are stand-ins; the preemption,
    the guardrails and the approval are real."""
    _start_counter(service, settings, "qb-w")

    def depth(_s: Service, _a: dict[str, Any], _c: CallContext) -> Any:
        return {"pending": 3, "running": 1, "oldest_wait_minutes": 45.0, "backlog": True}

    def candidates(_s: Service, _a: dict[str, Any], _c: CallContext) -> Any:
        return {"workload": "local:qb-w", "summary": "preempt local:qb-w (lowest priority)"}

    engine = Engine(service, calls={"queue_depth": depth, "plan_actions": candidates})
    run = engine.start("queue-backlog", {"partition": "gpu"}, principal=AGENT)
    assert run.status is RunStatus.WAITING_ANSWER
    run = engine.continue_(run.id, principal=AGENT, answer="preempt")
    run = _approve_and_continue(engine, settings, run)
    assert run.status is RunStatus.SUCCEEDED, (run.error, run.steps[-1])
    assert run.steps[-1].id == "preempted"
    assert service.get_workload("local:qb-w").state is WorkloadState.STOPPED
    assert len(service.checkpoints("local:qb-w")) == 1
