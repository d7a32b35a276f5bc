"""Runbooks for the urgent cases, through the installed ``clawpoint`` command and the real MCP
server over stdio, on the local backend with real workloads (CRIU where a workload moves).

Timeouts fire without a ``continue`` and withdraw the gate's approval; the person's chat code
works for runbook runs; spot runs never go back to the reclaimed node and say where the
workload went; an SLA rescue that would still be late fails and says what would help; a dead
node is failed over from its newest checkpoint without a save; unknown partitions and nodes
are errors; ``list_runs`` finds the run to continue; no shipped runbook ends silently on a
timeout.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
import yaml
from mcp import Client

from core.backends.local import LocalBackend
from core.config import Settings, load_settings
from core.errors import Conflict, NotFound
from core.model import Action, WorkloadState, utcnow
from core.runbooks import loading, schema
from core.runbooks.engine import Engine
from core.runbooks.store import RunStatus
from core.service.facade import Service, bootstrap
from tests.runbooks.conftest import AGENT, ROOT, approve, clawpoint
from tests.runbooks.test_mcp_runbooks import _call, _params
from tests.service.conftest import PERSON, counter, step, wait_step


def _json(proc: Any) -> Any:
    return json.loads(proc.stdout)


def _degrade(service: Service, node: str, health: str = "degraded") -> None:
    local = cast(LocalBackend, service.backend("local"))
    local.set_node_state(node, health=health, reason="xid 79: GPU fell off the bus")


def _short_gates(tmp: Path, name: str, timeout: str) -> Path:
    """A copy of the shipped runbooks with every gate of ``name`` timing out after
    ``timeout`` (the shipped minutes would make a test wait minutes)."""
    books = tmp / "runbooks"
    books.mkdir()
    for f in (ROOT / "runbooks").glob("*.yaml"):
        data = yaml.safe_load(f.read_text())
        if data["name"] == name:
            for s in data["steps"]:
                if s["kind"] == "approval":
                    s["timeout"] = timeout
        (books / f.name).write_text(yaml.safe_dump(data, sort_keys=False))
    return books


def _in_minutes(m: int) -> str:
    return (utcnow() + timedelta(minutes=m)).isoformat()


def _steps(run: dict[str, Any]) -> dict[str, Any]:
    return {s["id"]: s for s in run["steps"]}


# ---------------------------------------------------------------------------- timeouts


def test_gate_timeout_fires_without_continue_and_withdraws_its_approval(
    settings: Settings, service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _degrade(service, "node-b")
    books = _short_gates(tmp_path, "gpu-node-failure", "1s")
    monkeypatch.setenv("CLAWPOINT_RUNBOOKS", str(books))
    engine = Engine(service, runbooks_dir=books)
    run = engine.start("gpu-node-failure", {"node": "local:node-b"}, principal=AGENT)
    assert run.status is RunStatus.WAITING_APPROVAL and run.waiting is not None
    approval_id = str(run.waiting.approval_id)
    time.sleep(1.2)  # past the gate's 1 s timeout; nobody calls continue

    proc = clawpoint(settings, "runbook", "advance")
    assert proc.returncode == 0, proc.stderr
    (change,) = _json(proc)
    assert (change["id"], change["step"], change["status"]) == (run.id, "drain-gate", "failed")
    after = engine.status(run.id)
    assert after.status is RunStatus.FAILED and after.steps[-1].id == "timed-out"
    gate = next(s for s in after.steps if s.id == "drain-gate")
    assert gate.output == {"status": "timeout", "withdrawn": True, "approval_id": approval_id}

    # The withdrawn approval can no longer be approved, nor executed.
    late = clawpoint(settings, "approvals", "approve", approval_id)
    assert late.returncode == Conflict.exit_code, (late.stdout, late.stderr)
    assert service.get_approval(approval_id).status.value == "denied"
    assert all(n.schedulable for n in service.nodes("local"))  # nothing was drained
    again = clawpoint(settings, "runbook", "advance")
    assert _json(again) == []  # a finished run is not advanced twice


def test_question_timeout_and_not_yet_due(settings: Settings, service: Service) -> None:
    """``advance_due`` leaves a run whose wait is not over alone, and a question that timed
    out without a default fails the run (a maintenance drain nobody confirmed)."""
    engine = Engine(service)
    run = engine.start("node-maintenance-drain", {"node": "local:node-a"}, principal=AGENT)
    assert run.status is RunStatus.WAITING_ANSWER
    assert engine.advance_due() == []
    assert engine.status(run.id).status is RunStatus.WAITING_ANSWER
    (change,) = engine.advance_due(utcnow() + timedelta(days=1))
    assert change.id == run.id and change.status is RunStatus.FAILED
    after = engine.status(run.id)
    assert [s.id for s in after.steps][-2:] == ["confirm", "timed-out"]
    assert after.error is None or "drain" not in after.error
    assert all(n.schedulable for n in service.nodes("local"))


@pytest.mark.anyio
async def test_mcp_server_advances_timed_out_runs_by_itself(
    settings: Settings, service: Service, tmp_path: Path
) -> None:
    _degrade(service, "node-b")
    books = _short_gates(tmp_path, "gpu-node-failure", "1s")
    (settings.home / "config.toml").write_text(
        (settings.home / "config.toml").read_text() + "\n[recovery]\nevery_s = 0.5\n"
    )
    params = _params(settings)
    params.env = {**(params.env or {}), "CLAWPOINT_RUNBOOKS": str(books)}
    async with Client(params) as client:
        run = await _call(client, "start_runbook",
                          {"name": "gpu-node-failure", "params": {"node": "local:node-b"}})  # fmt: skip
        assert run["status"] == "waiting_approval"
        status = run
        for _ in range(200):  # nobody calls continue: the server's own task must move it
            await anyio.sleep(0.1)
            status = await _call(client, "runbook_status", {"run_id": run["id"], "detail": True})
            # "running" is the moment the server's task is advancing it: not an end
            if status["status"] not in ("waiting_approval", "running"):
                break
    assert status["status"] == "failed", status
    assert status["steps"][-1]["id"] == "timed-out"


# ---------------------------------------------------------------------------- spot + chat code


def _code(settings: Settings, approval_id: str) -> str:
    """The one-time code, as the person reads it (``clawpoint approvals show``)."""
    proc = clawpoint(settings, "approvals", "show", approval_id)
    assert proc.returncode == 0, proc.stderr
    found = re.search(r"Code: (\S+)", _json(proc)["text"])
    assert found, proc.stdout
    return found.group(1)


@pytest.mark.anyio
@pytest.mark.criu
async def test_spot_run_moves_with_one_approval_and_saves_only_without_a_destination(
    settings: Settings, service: Service, need_criu: None
) -> None:
    """With a node that can take it, the run migrates: one approval, and the workload is
    never left stopped waiting for a second one. With none (here: the only candidate named
    is the reclaimed node), it saves and stops it. The person's chat code works both ways:
    relayed to ``execute_approved`` (the run adopts that execution) and to
    ``continue_runbook``."""
    service.run_workload(counter(settings, "spot-w", mb=8), detach=True, principal=PERSON)
    service.run_workload(counter(settings, "spot-y", mb=8), detach=True, principal=PERSON)
    before = wait_step(settings, "spot-w", 3)
    wait_step(settings, "spot-y", 3)
    async with Client(_params(settings)) as client:
        run = await _call(client, "start_runbook",
                          {"name": "spot-interruption", "params": {"workload": "local:spot-w"},
                           "detail": True})  # fmt: skip
        assert (run["status"], run["current"]) == ("waiting_approval", "move-gate"), run
        assert _steps(run)["dest"]["output"]["scope"]["target_node"] == "node-b"
        assert "save" not in _steps(run)
        # Nothing has stopped it yet: it runs on the reclaimed node until the person answers.
        assert service.get_workload("local:spot-w").state is WorkloadState.RUNNING
        move_id = run["waiting"]["approval_id"]
        done = await _call(client, "execute_approved",
                           {"approval_id": move_id, "code": _code(settings, move_id)})  # fmt: skip
        assert done["status"] == "executed", done
        run = await _call(client, "continue_runbook", {"run_id": run["id"], "detail": True})
        assert run["status"] == "succeeded", (run.get("error"), run["steps"][-1])
        steps = _steps(run)
        assert steps["move-gate"]["output"]["status"] == "approved"
        assert steps["where"]["output"]["node"] == "node-b"
        assert "now runs on node-b" in steps["done"]["output"]["message"]
        assert not {"save", "save-gate", "fallback-checkpoint"} & set(steps)

        # No other node: save and stop in place, the code given to continue_runbook itself.
        run = await _call(client, "start_runbook",
                          {"name": "spot-interruption",
                           "params": {"workload": "local:spot-y", "to": "local:node-a"},
                           "detail": True})  # fmt: skip
        assert (run["status"], run["current"]) == ("waiting_approval", "save-gate"), run
        assert "move" not in _steps(run)
        save_id = run["waiting"]["approval_id"]
        bad = await client.call_tool("continue_runbook", {"run_id": run["id"], "code": "WRONG-00"})
        assert bad.is_error
        run = await _call(client, "continue_runbook",
                          {"run_id": run["id"], "code": _code(settings, save_id),
                           "detail": True})  # fmt: skip
    assert run["status"] == "failed" and run["steps"][-1]["id"] == "tell-no-dest", run
    assert _steps(run)["save-gate"]["output"]["result"]["status"] == "executed"
    assert service.get_workload("local:spot-y").state is WorkloadState.STOPPED

    w = service.get_workload("local:spot-w")
    assert (w.node, w.state) == ("node-b", WorkloadState.RUNNING)  # never the reclaimed node-a
    assert wait_step(settings, "spot-w", step(settings, "spot-w")) > before
    # The person was asked once per workload; spot-w was only ever migrated, never preempted.
    asked = [(a.action, a.target) for a in service.list_approvals()]
    assert sorted(asked) == [("migrate", "local:spot-w"), ("preempt", "local:spot-y")], asked


@pytest.mark.criu
def test_spot_run_refuses_the_reclaimed_node_as_destination(
    settings: Settings, service: Service, need_criu: None
) -> None:
    """Asked to resume onto the very node being reclaimed, the run saves the workload and
    stops clearly instead of sending it back there."""
    service.run_workload(counter(settings, "spot-x", mb=8), detach=True, principal=PERSON)
    wait_step(settings, "spot-x", 3)
    proc = clawpoint(settings, "runbook", "run", "spot-interruption",
                     "-p", "workload=local:spot-x", "-p", "to=local:node-a")  # fmt: skip
    run = _json(proc)
    assert run["current"] == "save-gate", run
    assert _steps(run)["dest"]["status"] == "error"
    proc = clawpoint(settings, "runbook", "continue", run["id"], "--yes")
    run = _json(proc)
    assert proc.returncode == 1 and run["status"] == "failed", run
    assert run["steps"][-1]["id"] == "tell-no-dest"
    assert "move" not in _steps(run) and "resume" not in _steps(run)
    assert service.get_workload("local:spot-x").state is WorkloadState.STOPPED


# ---------------------------------------------------------------------------- sla-rescue


SAME_SPEED_TOML = """
[[local.nodes]]
name = "node-a"
price_per_hour = 3.06

[[local.nodes]]
name = "node-b"
price_per_hour = 0.92

[[local.nodes]]
name = "node-c"
price_per_hour = 9.0
labels = {"clawpoint.io/speed" = "20"}
"""


@pytest.mark.criu
def test_sla_rescue_fails_when_the_move_would_still_be_late(
    settings: Settings, need_criu: None
) -> None:
    (settings.home / "config.toml").write_text(SAME_SPEED_TOML)
    svc = bootstrap(load_settings(settings.home))
    labels = {"clawpoint.io/deadline": _in_minutes(10), "clawpoint.io/expected-duration": "2h"}
    spec = counter(settings, "late-w", mb=8).model_copy(update={"labels": labels})
    svc.run_workload(spec, detach=True, principal=PERSON)
    try:
        wait_step(settings, "late-w", 3)
        proc = clawpoint(settings, "runbook", "run", "sla-rescue", "-p", "workload=local:late-w")
        run = _json(proc)
        assert proc.returncode == 1 and run["status"] == "failed", run
        proj = _steps(run)["plan"]["output"]["projection"]
        assert proj["target_node"] == "node-b" and proj["meets_deadline"] is False
        assert proj["slack_s"] < 0 and proj["projected_finish"]
        assert any("node-c" in o for o in proj["options"]), proj
        assert "still finishes" in run["error"] and "node-c" in run["error"]
        assert "choose" not in _steps(run) and "migrate" not in _steps(run)
        assert svc.get_workload("local:late-w").node == "node-a"  # not moved for nothing
    finally:
        svc.act(Action.KILL, "local:late-w", {}, principal=PERSON, confirmed=True)


@pytest.mark.anyio
@pytest.mark.criu
async def test_sla_rescue_projects_a_finish_inside_the_deadline(
    settings: Settings, service: Service, need_criu: None
) -> None:
    labels = {"clawpoint.io/deadline": _in_minutes(10), "clawpoint.io/expected-duration": "2h"}
    spec = counter(settings, "fast-w", mb=8).model_copy(update={"labels": labels})
    service.run_workload(spec, detach=True, principal=PERSON)
    wait_step(settings, "fast-w", 3)
    proc = clawpoint(settings, "runbook", "run", "sla-rescue", "-p", "workload=local:fast-w")
    run = _json(proc)
    assert run["status"] == "waiting_answer", run
    proj = _steps(run)["plan"]["output"]["projection"]
    assert proj["target_node"] == "node-b" and proj["target_speed"] == 20.0
    assert proj["meets_deadline"] is True and proj["slack_s"] > 0
    assert "projected finish there" in run["waiting"]["question"]
    async with Client(_params(settings)) as client:  # an agent's dry run carries it too
        out = await _call(client, "migrate_workload", {"workload": "local:fast-w", "dry_run": True})
    assert out["status"] == "planned"
    assert out["plan"]["projection"]["meets_deadline"] is True
    assert out["plan"]["projection"]["target_node"] == "node-b"


# ---------------------------------------------------------------------------- gpu-node-failure


@pytest.mark.criu
def test_down_node_fails_over_from_the_newest_checkpoint_without_a_save(
    settings: Settings, service: Service, need_criu: None
) -> None:
    service.run_workload(counter(settings, "dead-w", mb=8), detach=True, principal=PERSON)
    wait_step(settings, "dead-w", 3)
    saved = service.act(Action.CHECKPOINT, "local:dead-w", {"stop": False}, principal=PERSON,
                        confirmed=True)  # fmt: skip
    assert saved.status == "executed", saved.message
    w = service.get_workload("local:dead-w")
    assert w.pid is not None
    os.kill(w.pid, signal.SIGKILL)  # the node died with it
    for _ in range(600):
        if service.get_workload("local:dead-w").state is WorkloadState.FAILED:
            break
        time.sleep(0.05)
    _degrade(service, "node-a", "down")
    engine = Engine(service)
    run = engine.start("gpu-node-failure",
                       {"node": "local:node-a", "workload": "local:dead-w"}, principal=AGENT)  # fmt: skip
    assert (run.status, run.current) == (RunStatus.WAITING_APPROVAL, "down-gate"), run
    ids = [s.id for s in run.steps]
    assert "drain" not in ids and "drain-gate" not in ids  # never a save on a dead node
    assert run.waiting is not None
    approve(settings, str(run.waiting.approval_id))
    run = engine.continue_(run.id, principal=AGENT)
    assert run.status is RunStatus.SUCCEEDED, (run.error, run.steps[-1])
    assert run.steps[-1].id == "down-done"
    w = service.get_workload("local:dead-w")
    assert (w.node, w.state) == ("node-b", WorkloadState.RUNNING)
    assert len(service.checkpoints("local:dead-w")) == 1  # restored, nothing new saved
    assert wait_step(settings, "dead-w", -1) > 0


# ---------------------------------------------------------------------------- unknown names


def test_unknown_partition_and_node_are_errors(settings: Settings, service: Service) -> None:
    proc = clawpoint(settings, "runbook", "run", "queue-backlog", "-p", "partition=nope")
    run = _json(proc)
    assert proc.returncode == 1 and run["status"] == "failed", run
    assert "no partition or queue 'nope'" in run["error"]
    assert not any("below threshold" in m for m in run["messages"])

    proc = clawpoint(settings, "runbook", "run", "node-maintenance-drain", "-p", "node=local:nod-a")
    assert proc.returncode == NotFound.exit_code, (proc.stdout, proc.stderr)
    assert "no node local:nod-a" in proc.stdout + proc.stderr
    runs = _json(clawpoint(settings, "runbook", "runs"))
    assert [r["runbook"] for r in runs] == ["queue-backlog"]  # the bad node started nothing


# ---------------------------------------------------------------------------- list_runs


@pytest.mark.anyio
async def test_list_runs_finds_the_run_to_continue(settings: Settings, service: Service) -> None:
    _degrade(service, "node-b")
    async with Client(_params(settings)) as client:
        first = await _call(client, "start_runbook",
                            {"name": "gpu-node-failure", "params": {"node": "local:node-b"}})  # fmt: skip
        for _ in range(2):
            await _call(client, "start_runbook",
                        {"name": "gpu-node-failure", "params": {"node": "local:node-a"}})  # fmt: skip
    async with Client(_params(settings)) as fresh:  # a new session knows no run id
        page = await _call(fresh, "list_runs", {"limit": 2})
        assert len(page["runs"]) == 2 and page["next_cursor"]
        rest = await _call(fresh, "list_runs", {"limit": 2, "cursor": page["next_cursor"]})
        assert [r["id"] for r in rest["runs"]] == [first["id"]] and "next_cursor" not in rest
        waiting = await _call(fresh, "list_runs", {"status": "waiting"})
        (rec,) = waiting["runs"]
        assert rec["id"] == first["id"] and rec["status"] == "waiting_approval"
        assert rec["waits_for"] == f"approval {first['waiting']['approval_id']}"
        assert "continue_runbook" in rec["next"] and "steps" not in rec
        bad = await fresh.call_tool("list_runs", {"status": "nope"})
        assert bad.is_error and "status must be one of waiting, running" in " ".join(
            getattr(c, "text", "") for c in bad.content
        )
    runs = _json(clawpoint(settings, "runbook", "runs", "--status", "waiting"))
    assert [r["id"] for r in runs] == [first["id"]]
    assert runs[0]["waits_for"].startswith("approval ")


# ---------------------------------------------------------------------------- every runbook


def _ends_failing(rb: schema.Runbook, target: str) -> bool:
    """True when flow ``target`` is a fallback branch (a step that acts; its own gates are
    checked too) or leads through notifications to a failed end, never to a quiet success."""
    while target not in ("stop", "fail", "continue"):
        step = rb.step(target)
        if not isinstance(step, schema.NotifyStep):
            return True
        target = step.next
    return target == "fail"


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "runbooks").glob("*.yaml")))
def test_no_shipped_runbook_ends_silently_on_a_timeout(name: str) -> None:
    """Every gate has a timeout that ends the run as failed with a message (not a quiet
    success), and every question without a default does the same."""
    rb = loading.load_runbook(ROOT / "runbooks" / f"{name}.yaml")
    for s in rb.steps:
        if isinstance(s, schema.ApprovalStep) or (
            isinstance(s, schema.AskStep) and s.default is None
        ):
            assert s.timeout <= 2 * 3600, (name, s.id)
            assert _ends_failing(rb, s.on_timeout), (name, s.id, s.on_timeout)
