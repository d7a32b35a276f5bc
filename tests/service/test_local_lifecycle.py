"""The foundation's acceptance path through the service facade with real CRIU:
a 200 MB self-verifying workload is checkpointed (leave-running), migrated, SIGKILLed and
failed over, and never loses progress or fails its own state check."""

from __future__ import annotations

import os
import signal
import time

import pytest

from core import errors
from core.config import Settings
from core.model import Action, ExecutionStatus, RiskClass, WorkloadState
from core.service.facade import Service
from tests.service.conftest import AGENT, PERSON, counter, log_text, step, wait_step

pytestmark = [pytest.mark.criu]


def test_checkpoint_migrate_kill_failover(
    service: Service, settings: Settings, need_criu: None
) -> None:
    service.run_workload(counter(settings, "w200", every=3.0), detach=True, principal=PERSON)
    wait_step(settings, "w200", 10)

    # Leave-running checkpoint: safe, allowed for an agent, workload keeps counting.
    result = service.act(Action.CHECKPOINT, "local:w200", {"stop": False}, principal=AGENT)
    assert result.status == "executed", result.message
    assert result.plan.risk is RiskClass.SAFE
    ckpt_id = result.execution.steps[0].output["checkpoint_id"]  # type: ignore[union-attr]
    assert service.checkpoints("local:w200")[0].id == f"local:{ckpt_id}"
    assert service.checkpoints("local:w200")[0].size_bytes > 200 * 2**20
    s = step(settings, "w200")
    wait_step(settings, "w200", s + 5)
    assert service.get_workload("local:w200").state in (
        WorkloadState.RUNNING,
        WorkloadState.CHECKPOINTING,
    )

    # Migrate to the other node: resumes at or after the checkpointed step, never from zero.
    before = step(settings, "w200")
    result = service.act(Action.MIGRATE, "local:w200", {}, principal=PERSON, confirmed=True)
    assert result.status == "executed", result.message
    w = service.get_workload("local:w200")
    assert w.node == "node-b" and w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING)
    after = wait_step(settings, "w200", -1)
    assert after >= before > 0

    # SIGKILL the payload, then fail over: resumes from the last (periodic) checkpoint.
    wait_step(settings, "w200", after + 60)
    assert w.pid is not None
    os.kill(w.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while service.get_workload("local:w200").state is not WorkloadState.FAILED:
        assert time.monotonic() < deadline, "the wrapper did not record the death"
        time.sleep(0.05)
    # The payload's output reaches its log through the wrapper's pipe, so the last step it
    # printed is read once the wrapper has recorded the death (the pipe is drained by then).
    at_kill = step(settings, "w200")
    newest = service.checkpoints("local:w200")[0]
    result = service.act(
        Action.FAILOVER, "local:w200", {"to": "node-a"}, principal=PERSON, confirmed=True
    )
    assert result.status == "executed", result.message
    # The failover restored the newest good checkpoint; the step it resumed from is the one
    # that checkpoint recorded (the progress file already shows later steps, since the
    # restore is watched for a moment before it is reported done).
    assert result.execution is not None
    restored = [s.output.get("restored_from") for s in result.execution.steps if s.output]
    assert newest.id.split(":", 1)[1] in restored or newest.id in restored, restored
    resumed = int(newest.extra["progress"]["step"])
    assert 0 < resumed <= at_kill
    # Lost work is bounded by one checkpoint interval (3 s at 0.02 s per step + dump time).
    assert at_kill - resumed <= 3.0 / 0.02 + 50
    wait_step(settings, "w200", resumed + 20)
    assert "STATE CHECK FAILED" not in log_text(settings, "w200")


def test_agent_disruptive_request_waits_for_a_person(
    service: Service, settings: Settings, need_criu: None
) -> None:
    service.run_workload(counter(settings, "w-agent", mb=20), detach=True, principal=PERSON)
    wait_step(settings, "w-agent", 3)
    result = service.act(Action.MIGRATE, "local:w-agent", {}, principal=AGENT, reason="cheaper")
    assert result.status == "approval_required"
    assert result.approval and result.approval["id"]
    assert any(p["kind"] == "cli" for p in result.approval["how_to_approve"])
    # Nothing happened: same node, running, no checkpoint.
    w = service.get_workload("local:w-agent")
    assert w.node == "node-a" and w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING)
    assert len(service.checkpoints("local:w-agent")) == 0
    # A person approves; the agent executes exactly once.
    service.approve(result.approval["id"], principal=PERSON, via="cli")
    done = service.execute_approved(result.approval["id"], principal=AGENT)
    assert done.status == "executed", done.message
    assert service.get_workload("local:w-agent").node == "node-b"
    with pytest.raises(errors.ApprovalRequired):
        service.execute_approved(result.approval["id"], principal=AGENT)


def test_person_must_confirm(service: Service, settings: Settings, need_criu: None) -> None:
    service.run_workload(counter(settings, "w-conf", mb=20), detach=True, principal=PERSON)
    wait_step(settings, "w-conf", 3)
    result = service.act(Action.PREEMPT, "local:w-conf", {}, principal=PERSON, confirmed=False)
    assert result.status == "approval_required"
    assert service.get_workload("local:w-conf").state is WorkloadState.RUNNING


def test_preempt_frees_node_and_resume_keeps_progress(
    service: Service, settings: Settings, need_criu: None
) -> None:
    service.run_workload(counter(settings, "w-pre", mb=50), detach=True, principal=PERSON)
    wait_step(settings, "w-pre", 20)
    result = service.act(Action.PREEMPT, "local:w-pre", {}, principal=PERSON, confirmed=True)
    assert result.status == "executed"
    saved = step(settings, "w-pre")
    assert service.get_workload("local:w-pre").state is WorkloadState.STOPPED
    node_a = next(n for n in service.nodes("local") if n.name == "node-a")
    assert "local:w-pre" not in node_a.workloads
    result = service.act(Action.RESUME, "local:w-pre", {}, principal=PERSON, confirmed=True)
    assert result.status == "executed"
    assert wait_step(settings, "w-pre", saved - 1) >= saved


def test_killed_mid_migration_is_finished_by_recovery(
    service: Service, settings: Settings, need_criu: None
) -> None:
    """clawpoint itself SIGKILLed between the checkpoint and the restore: the next start of
    clawpoint finishes the migration from the journal; the workload is neither lost nor
    duplicated."""
    import subprocess
    import sys

    service.run_workload(counter(settings, "w-crash", mb=50), detach=True, principal=PERSON)
    wait_step(settings, "w-crash", 10)
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "migrate", "local:w-crash", "--yes", "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # Kill the CLI as soon as the journal shows the checkpoint step finished.
    deadline = time.monotonic() + 60
    killed_after_checkpoint = False
    while time.monotonic() < deadline and proc.poll() is None:
        with service.db.read() as conn:
            row = conn.execute(
                "SELECT s.status FROM execution_steps s JOIN executions e ON e.id = s.execution_id "
                "WHERE e.target='local:w-crash' AND s.name='checkpoint'"
            ).fetchone()
        if row and row[0] == "done":
            proc.kill()
            killed_after_checkpoint = True
            break
        time.sleep(0.01)
    proc.wait()
    if not killed_after_checkpoint:
        pytest.fail("the migration finished before the test could interrupt it")
    recovered = service.recover()
    assert len(recovered) == 1
    assert recovered[0].status is ExecutionStatus.SUCCEEDED, recovered[0].error
    w = service.get_workload("local:w-crash")
    assert w.state is WorkloadState.RUNNING and w.node == "node-b"
    wait_step(settings, "w-crash", step(settings, "w-crash"))
    assert service.recover() == []  # nothing left to recover, nothing run twice


@pytest.mark.parametrize(
    "bad", ["../x", "local:../x", "local:", "x", "local:a;rm -rf /", "nope:w", "local:missing"]
)
def test_bad_ids_are_refused(service: Service, bad: str) -> None:
    with pytest.raises((errors.InvalidInput, errors.NotFound)) as info:
        service.plan(Action.MIGRATE, bad, {})
    assert info.value.hint
