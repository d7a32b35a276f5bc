"""Restores say what really happened, through the installed ``clawpoint`` with real CRIU.

- A resume or failover restores a verified checkpoint of the lineage or fails (exit 8),
  leaving the workload stopped and its images as they were; it never starts from zero while
  saying "restored". Starting over takes an explicit, confirmed and audited ``--fresh``,
  which an agent cannot get without a person.
- ``restore CHECKPOINT`` restores exactly that checkpoint or fails (exit 8).
- A stop-checkpoint whose answer is lost, or late, does not strand a migration.
- ``run -- sh -c 'exit 7'`` reports the payload's exit status.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import pytest

from core.config import load_settings
from core.model import Action, Principal, PrincipalKind, RiskClass, WorkloadState
from core.service.facade import bootstrap
from tests.restore.conftest import Cli

pytestmark = [pytest.mark.criu, pytest.mark.timeout(600)]

AGENT = Principal(id="mcp:test", kind=PrincipalKind.AGENT)


def _first_change(cli: Cli, name: str, old: int, timeout_s: float = 60) -> int:
    """The first progress value the workload writes after ``old`` (a fresh start writes ~1,
    a restored one goes on from its checkpoint)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        s = cli.step(name)
        if s != old and s >= 0:
            return s
        time.sleep(0.01)
    raise AssertionError(f"{name} wrote no progress after {old}:\n{cli.log(name)}")


def _preempted(cli: Cli, name: str) -> int:
    """Checkpoint (leave running), then preempt: two checkpoints; the step it stopped at."""
    cli.start_counter(name)
    first = cli.wait_step(name, 20)
    assert cli.json("checkpoint", f"local:{name}")["status"] == "executed"
    cli.wait_step(name, first + 20)
    assert cli.json("preempt", f"local:{name}", "--yes")["status"] == "executed"
    assert cli.record(name).state is WorkloadState.STOPPED
    assert len(cli.checkpoints(name)) == 2
    return cli.step(name)


@pytest.mark.parametrize("damage", ["flipped-byte", "truncated"])
def test_resume_with_no_good_checkpoint_fails_and_changes_nothing(cli: Cli, damage: str) -> None:
    saved = _preempted(cli, "w")
    for info in cli.checkpoints("w"):
        cli.corrupt(info.id, truncate=damage == "truncated")
    ids = [c.id for c in cli.checkpoints("w")]
    digests = cli.image_digests("w")

    done = cli.run("resume", "local:w", "--yes", "--json")

    assert done.returncode == 8, done.stdout + done.stderr
    assert "corrupt" in (done.stdout + done.stderr)
    rec = cli.record("w")
    assert rec.state is WorkloadState.STOPPED
    assert not cli.alive("w")
    assert cli.image_digests("w") == digests  # the images were left exactly as they were
    assert [c.id for c in cli.checkpoints("w")] == ids  # nothing new, nothing deleted
    assert cli.step("w") == saved  # no payload ran: a fresh start would have written ~1

    # ``run`` under the same name (what a requeued Slurm job does) refuses the same way.
    again = cli.run("run", "--detach", "--name", "w", "--node", "node-a", "--", "sleep", "60")
    assert again.returncode == 8, again.stdout + again.stderr
    assert "--fresh" in again.stdout + again.stderr  # the way out is named
    assert not cli.alive("w") and cli.step("w") == saved
    assert cli.image_digests("w") == digests


def test_fresh_start_needs_a_person_and_is_audited(cli: Cli) -> None:
    saved = _preempted(cli, "f")
    for info in cli.checkpoints("f"):
        cli.corrupt(info.id)
    assert cli.run("resume", "local:f", "--yes", "--json").returncode == 8

    # An agent asking for a fresh start gets a destructive plan a person must approve.
    service = bootstrap(load_settings(cli.home))
    asked = service.act(Action.RESUME, "local:f", {"fresh": True}, principal=AGENT)
    assert asked.plan is not None and asked.plan.risk is RiskClass.DESTRUCTIVE
    assert asked.status == "approval_required", asked.message
    # A person who does not confirm changes nothing either.
    unconfirmed = cli.run("resume", "local:f", "--fresh", "--json")
    assert unconfirmed.returncode == 6, unconfirmed.stdout + unconfirmed.stderr
    assert cli.record("f").state is WorkloadState.STOPPED and not cli.alive("f")

    done = cli.run("resume", "local:f", "--fresh", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["plan"]["risk"] == "destructive"
    assert result["execution"]["steps"][-1]["output"]["restored_from"] is None
    assert _first_change(cli, "f", saved) < saved  # started over, as asked
    audit = cli.json("audit", "--limit", "200")
    plans = [e for e in audit if e["kind"] == "plan" and e["subject"] == "local:f"]
    fresh = [e for e in plans if "--fresh" in e["data"]["summary"]]
    assert fresh and all(e["data"]["risk"] == "destructive" for e in fresh)
    assert any(e["kind"] == "approval.confirmed" and e["subject"] == "local:f" for e in audit)


def test_failover_with_no_good_checkpoint_fails(cli: Cli) -> None:
    cli.start_counter("d")
    cli.wait_step("d", 20)
    assert cli.json("checkpoint", "local:d")["status"] == "executed"
    payload = cli.record("d").pid
    assert payload is not None
    os.kill(payload, signal.SIGKILL)
    cli.wait_state("d", WorkloadState.FAILED, timeout_s=30)
    at_death = cli.step("d")
    for info in cli.checkpoints("d"):
        cli.corrupt(info.id)
    digests = cli.image_digests("d")

    done = cli.run("failover", "local:d", "--yes", "--json")

    assert done.returncode == 8, done.stdout + done.stderr
    assert cli.record("d").state is WorkloadState.FAILED
    assert not cli.alive("d")
    assert cli.image_digests("d") == digests
    assert cli.step("d") == at_death


def test_restore_restores_exactly_the_checkpoint_asked_for(cli: Cli) -> None:
    saved = _preempted(cli, "r")
    older, newer = sorted(cli.checkpoints("r"), key=lambda c: c.seq)
    cli.corrupt(older.id)
    digests = cli.image_digests("r")

    done = cli.run("restore", f"local:{older.id}", "--yes", "--json")

    assert done.returncode == 8, done.stdout + done.stderr
    assert cli.record("r").state is WorkloadState.STOPPED
    assert not cli.alive("r")
    assert cli.image_digests("r") == digests
    assert cli.step("r") == saved  # the newer checkpoint was not restored in its place

    # The good one restores, exactly, and the counter goes on from it (not from 1).
    done = cli.run("restore", f"local:{newer.id}", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["execution"]["steps"][-1]["output"]["restored_from"] == newer.id
    assert _first_change(cli, "r", saved) > saved
    assert "STATE CHECK FAILED" not in cli.log("r")


def _migrate(cli: Cli, name: str) -> tuple[dict[str, Any], int]:
    before = cli.wait_step(name, 20)
    done = cli.run("migrate", f"local:{name}", "--to", "node-b", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr + cli.log(name)
    result = json.loads(done.stdout)
    assert result["status"] == "executed"
    rec = cli.record(name)
    assert rec.state is WorkloadState.RUNNING and rec.node == "node-b"
    return result, before


def _step(result: dict[str, Any], name: str) -> dict[str, Any]:
    out = next(s["output"] for s in result["execution"]["steps"] if s["name"] == name)
    assert isinstance(out, dict)
    return out


def test_a_lost_checkpoint_answer_does_not_strand_a_migration(cli: Cli) -> None:
    """The wrapper drops its answer to the stop-checkpoint (test hook): the checkpoint is
    published and the wrapper stopped, so the move goes on, reported as reconciled."""
    cli.start_counter("lost", CLAWPOINT_TEST_DROP_REPLY="1")
    result, before = _migrate(cli, "lost")
    checkpoint = _step(result, "checkpoint")
    assert checkpoint["reconciled"] is True
    assert checkpoint["checkpoint_id"] == cli.checkpoints("lost")[0].id
    stopped_at = cli.checkpoints("lost")[0].extra["progress"]["step"]
    assert stopped_at >= before
    assert cli.wait_step("lost", stopped_at) > stopped_at
    assert "STATE CHECK FAILED" not in cli.log("lost")


def test_a_late_checkpoint_answer_still_arrives(cli: Cli) -> None:
    """The answer is written 2 s after the payload ended: the wrapper waits to write it
    before it exits, so the migration gets it and needs no reconciliation."""
    cli.start_counter("late", CLAWPOINT_TEST_REPLY_DELAY_S="2")
    result, before = _migrate(cli, "late")
    checkpoint = _step(result, "checkpoint")
    assert "reconciled" not in checkpoint
    assert "test_hook_delaying_reply" in cli.log("late")  # the delay really happened
    assert cli.wait_step("late", before) > before


def test_run_reports_the_payloads_exit_status(cli: Cli) -> None:
    cli.names.append("seven")
    done = cli.run("run", "--name", "seven", "--engine", "criu", "--", "sh", "-c", "exit 7")
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "exit status 7" in text
    assert "PID namespace" not in text
    rec = cli.record("seven")
    assert rec.state is WorkloadState.FAILED and rec.exit_status == "exit 7"


def test_a_lost_terminate_answer_is_reconciled(cli: Cli) -> None:
    """The wrapper ends the workload but drops its answer (test hook): the kill is done."""
    cli.start_counter("gone", CLAWPOINT_TEST_DROP_REPLY="1")
    cli.wait_step("gone", 5)
    service = bootstrap(load_settings(cli.home))
    person = Principal(id="tester", kind=PrincipalKind.PERSON)
    result = service.act(Action.KILL, "local:gone", {}, principal=person, confirmed=True)
    assert result.status == "executed", result.message
    assert result.execution is not None
    assert result.execution.steps[0].output["reconciled"] is True
    rec = cli.record("gone")
    assert rec.state is WorkloadState.FAILED and rec.exit_status == "killed"
    assert not cli.alive("gone")
