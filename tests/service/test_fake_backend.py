"""The service's guard, journal and recovery over the in-memory backend: no CRIU, no processes.

What the local lifecycle tests show with real workloads, shown here at the port in a
fraction of the time: an agent's disruptive action waits for a person and runs exactly once
when approved; a plan made for a world that changed since is refused before any step; a
standing grant covers only what it names; and an execution whose process died after its
first step is finished by recovery without running that step again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from core import errors
from core.backends import registry
from core.config import load_settings
from core.model import Action, ExecutionStatus, Principal, PrincipalKind, WorkloadState
from core.service.facade import Service, bootstrap
from core.service.journal import release
from tests.fakes.backend import ENTRY, FakeBackend

PERSON = Principal(id="alice", kind=PrincipalKind.PERSON)
AGENT = Principal(id="mcp:agent-1", kind=PrincipalKind.AGENT)


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[local]\nenabled = false\n\n[fake]\nenabled = true\nworkloads = {w1 = "f1", w2 = "f2"}\n'
    )
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    monkeypatch.delenv("CLAWPOINT_CONFIG", raising=False)
    registry.register("fake", ENTRY)
    try:
        yield bootstrap(load_settings(home))
    finally:
        registry.unregister("fake")


def _fake(service: Service) -> FakeBackend:
    return cast(FakeBackend, service.backend("fake"))


def test_an_agents_move_waits_for_a_person_and_runs_once(service: Service) -> None:
    fake = _fake(service)
    result = service.act(Action.MIGRATE, "fake:w1", {"to": "f2"}, principal=AGENT)
    assert result.status == "approval_required", result.message
    assert result.approval is not None
    assert fake.steps_run == [], "nothing runs before a person approves"
    approval = result.approval["id"]
    with pytest.raises(errors.PolicyDenied):  # an agent never approves, its own request least
        service.guard.approvals.approve(approval, AGENT)
    service.guard.approvals.approve(approval, PERSON)
    done = service.execute_approved(approval, principal=AGENT)
    assert done.status == "executed", done.message
    assert [op for op, _ in fake.steps_run] == ["checkpoint", "start"]
    assert service.get_workload("fake:w1").node == "f2"
    with pytest.raises(errors.ClawpointError):  # the approval is spent
        service.execute_approved(approval, principal=AGENT)
    assert len(fake.steps_run) == 2
    assert service.audit.verify().ok


def test_a_plan_for_a_world_that_changed_is_refused_before_any_step(service: Service) -> None:
    fake = _fake(service)
    plan = service.plan(Action.MIGRATE, "fake:w1", {"to": "f2"})
    fake.placed["w1"] = (WorkloadState.RUNNING, "f3-elsewhere")  # someone moved it since
    with pytest.raises(errors.Conflict) as info:
        service.perform(plan, principal=PERSON, confirmed=True)
    assert "was on f1" in info.value.message and "plan it again" in info.value.hint
    assert fake.steps_run == []


def test_a_standing_grant_covers_only_what_it_names(service: Service) -> None:
    fake = _fake(service)
    service.guard.grants.grant(
        Action.MIGRATE,
        {"backend": "fake"},
        max_per_hour=1,
        expires="1h",
        reason="rebalance the fake pool",
        granted_by=PERSON,
    )
    first = service.act(Action.MIGRATE, "fake:w1", {"to": "f2"}, principal=AGENT)
    assert first.status == "executed", first.message
    second = service.act(Action.MIGRATE, "fake:w2", {"to": "f1"}, principal=AGENT)
    assert second.status == "approval_required", "the budget of one an hour was spent"
    other = service.act(Action.PREEMPT, "fake:w2", {}, principal=AGENT)
    assert other.status == "approval_required", "the grant names migrations only"
    assert [op for op, _ in fake.steps_run] == ["checkpoint", "start"]


def test_recovery_finishes_a_move_whose_process_died_after_its_first_step(
    service: Service,
) -> None:
    fake = _fake(service)
    plan = service.plan(Action.MIGRATE, "fake:w1", {"to": "f2"})
    # What a process killed between the two steps leaves: the checkpoint taken and
    # journaled, the workload stopped, the start never begun, and no owner alive.
    execution = service.journal.start(plan, str(PERSON))
    service.journal.step_started(execution.id, 0)
    out = fake.run_step("checkpoint", dict(plan.steps[0].args), lambda *_: None)
    service.journal.step_finished(execution.id, 0, status="done", output=out)
    release(execution.id)
    with service.db.write() as conn:
        conn.execute(
            "UPDATE executions SET owner_pid=?, owner_start=NULL WHERE id=?",
            (2**22 + 7, execution.id),
        )
    assert service.get_workload("fake:w1").state is WorkloadState.STOPPED
    (finished,) = service.recover()
    assert finished.status.value == "succeeded", finished.error
    assert [op for op, _ in fake.steps_run] == ["checkpoint", "start"], "no step ran twice"
    moved = service.get_workload("fake:w1")
    assert (moved.state, moved.node) == (WorkloadState.RUNNING, "f2")
    assert service.recover() == []


def test_an_approved_plan_that_cannot_start_yet_keeps_its_approval(service: Service) -> None:
    """The lease refuses a second change of a workload while one runs; when the second is
    a person's approved plan, the refusal comes before the approval is spent."""
    fake = _fake(service)
    result = service.act(Action.MIGRATE, "fake:w1", {"to": "f2"}, principal=AGENT)
    assert result.approval is not None
    approval = result.approval["id"]
    service.guard.approvals.approve(approval, PERSON)
    # Another execution is changing w1 right now (its owner, this process, is alive).
    other = service.journal.start(service.plan(Action.CHECKPOINT, "fake:w1", {}), str(PERSON))
    with pytest.raises(errors.Conflict) as info:
        service.execute_approved(approval, principal=AGENT)
    assert "already being changed" in info.value.message
    assert service.guard.approvals.get(approval).status.value == "approved", "not spent"
    assert fake.steps_run == []
    service.journal.finish(other.id, status=ExecutionStatus.SUCCEEDED, result={})
    done = service.execute_approved(approval, principal=AGENT)
    assert done.status == "executed", done.message
    assert service.get_workload("fake:w1").node == "f2"


class _Died(BaseException):
    """The process ending right there (not an Exception: nothing in the service catches it)."""


def _dies_after_the_journal_finish(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    finish = service.journal.finish

    def finish_then_die(*args: Any, **kwargs: Any) -> None:
        finish(*args, **kwargs)
        raise _Died

    monkeypatch.setattr(service.journal, "finish", finish_then_die)


def _audited(service: Service, execution_id: str) -> list[tuple[str, str]]:
    return [(e.kind, str(e.data.get("status"))) for e in service.audit.entries()
            if e.data.get("execution") == execution_id]  # fmt: skip


def test_a_recovery_is_audited_with_the_journal_finish(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recovering process dies the moment the journal says the execution is finished:
    the audit already has its recovery entry (one transaction), so journal and audit agree;
    nothing would ever add it later (a finished execution is no orphan)."""
    plan = service.plan(Action.MIGRATE, "fake:w1", {"to": "f2"})
    execution = service.journal.start(plan, str(PERSON))
    release(execution.id)
    with service.db.write() as conn:
        conn.execute("UPDATE executions SET owner_pid=?, owner_start=NULL WHERE id=?",
                     (2**22 + 7, execution.id))  # fmt: skip
    _dies_after_the_journal_finish(service, monkeypatch)
    with pytest.raises(_Died):
        service.recover()
    status = service.journal.get(execution.id).status
    assert status is ExecutionStatus.SUCCEEDED
    assert _audited(service, execution.id) == [("recovery", "succeeded")]
    assert service.audit.verify().ok


def test_an_execution_is_audited_with_the_journal_finish(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a plan run directly: clawpoint killed right after the journal's finish
    leaves its execution entry in the audit."""
    plan = service.plan(Action.MIGRATE, "fake:w1", {"to": "f2"})
    _dies_after_the_journal_finish(service, monkeypatch)
    with pytest.raises(_Died):
        service.perform(plan, principal=PERSON, confirmed=True)
    with service.db.read() as conn:
        (execution_id,) = conn.execute("SELECT id FROM executions").fetchone()
    assert service.journal.get(execution_id).status is ExecutionStatus.SUCCEEDED
    assert _audited(service, execution_id) == [("execution", "succeeded")]
    assert service.audit.verify().ok


def test_a_failed_steps_next_step_is_named_in_each_interfaces_words(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal keeps a step's error with its next steps neutral (core.errors): an agent
    reads the tool to call, a person the command to type. Before, the command line printed
    the tool's words ("list_nodes(backend=fake)") for every failed step."""
    from core.cli.acting import in_cli_words
    from core.service import views

    fake = _fake(service)
    real = fake.run_step

    def start_fails(op: str, args: dict[str, Any], progress: Any) -> dict[str, Any]:
        if op == "start":
            raise errors.Conflict(
                "node f2 left", hint=f"pick another ({errors.step('list_nodes', backend='fake')})"
            )
        return real(op, args, progress)

    monkeypatch.setattr(fake, "run_step", start_fails)
    plan = service.plan(Action.MIGRATE, "fake:w1", {"to": "f2"})
    result = service.perform(plan, principal=PERSON, confirmed=True)
    assert result.status == "failed" and result.execution is not None
    tools = "pick another (list_nodes(backend=fake))"
    assert tools in result.message and tools in (result.execution.error or "")
    assert tools in (result.execution.steps[-1].error or "")
    as_json = result.model_dump_json()  # what MCP and the audit serialize: one text, no markers
    assert tools in as_json and "⟦" not in as_json and "error_neutral" not in as_json
    assert tools in str(views.execution(result.execution, detail=True))
    person = in_cli_words(result)
    said = "pick another ('clawpoint nodes --backend fake')"
    assert said in person.message and person.execution is not None
    assert said in (person.execution.error or "") and said in (
        person.execution.steps[-1].error or ""
    )
    assert "list_nodes" not in person.model_dump_json()
