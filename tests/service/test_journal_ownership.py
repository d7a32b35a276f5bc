"""Who owns a running execution: recovery claims orphans only, never live work.

A long-running server reconciles while its own threads run executions, and a pid can be
reused after its process died: ownership is the pid plus that process's start time, and this
process's own executions count as live only while it drives them.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from core.model import Action, Plan, PlanStep, RiskClass
from core.service.facade import Service
from core.service.journal import process_start, release


def _plan(name: str) -> Plan:
    plan = Plan(
        action=Action.PREEMPT,
        target=f"local:{name}",
        backend="local",
        steps=[PlanStep(name="checkpoint", op="checkpoint", args={}, description="save")],
        risk=RiskClass.DISRUPTIVE,
        summary="preempt",
    ).sealed()
    return plan


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def _own(service: Service, execution_id: str, pid: int, start: str | None) -> None:
    with service.db.write() as conn:
        conn.execute(
            "UPDATE executions SET owner_pid=?, owner_start=? WHERE id=?",
            (pid, start, execution_id),
        )


def test_an_execution_this_process_drives_is_never_claimed(service: Service) -> None:
    plan = _plan("mine")
    service.journal.save_plan(plan)
    execution = service.journal.start(plan, "person:alice")
    assert service.journal.claim_orphans() == []  # a thread of this process runs it
    assert service.journal.count_running() == 1
    release(execution.id)  # what a previous process with the same pid would leave behind
    assert service.journal.count_running() == 0
    assert [e.id for e in service.journal.claim_orphans()] == [execution.id]
    assert service.journal.count_running() == 1  # now driven by this process


def test_a_live_owner_keeps_its_execution_and_a_recycled_pid_does_not(
    service: Service, other_process: subprocess.Popen[bytes]
) -> None:
    live, recycled = _plan("live"), _plan("recycled")
    for plan in (live, recycled):
        service.journal.save_plan(plan)
    live_ex = service.journal.start(live, "person:alice")
    recycled_ex = service.journal.start(recycled, "person:alice")
    _own(service, live_ex.id, other_process.pid, process_start(other_process.pid))
    # The same pid, but not the process that started the execution: its owner is gone.
    _own(service, recycled_ex.id, other_process.pid, "1")
    assert [i for i, _ in service.journal.in_flight()] == [live_ex.id]
    assert [e.id for e in service.journal.claim_orphans()] == [recycled_ex.id]


def test_recovery_claims_only_what_this_process_can_finish(service: Service) -> None:
    plan = _plan("elsewhere").model_copy(update={"target": "kube:elsewhere", "backend": "kube"})
    plan = plan.sealed()
    service.journal.save_plan(plan)
    execution = service.journal.start(plan, "person:alice")
    release(execution.id)
    _own(service, execution.id, 2**22 + 7, None)  # a pid no process has here: dead
    assert service.recover() == []  # no such backend here: left for a process that has one
    with service.db.read() as conn:
        row = conn.execute("SELECT owner_pid FROM executions WHERE id=?", (execution.id,))
        assert row.fetchone()[0] == 2**22 + 7
