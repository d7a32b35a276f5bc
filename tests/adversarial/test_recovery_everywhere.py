"""Recovery everywhere: a running server finishes work whose process died, and an execution
counts against the policy's limits only while someone really drives it, in its own pool.

The orphan is real: the installed ``clawpoint migrate`` is SIGKILLed right after its
checkpoint step (the workload stopped, its image published, the journal still "running").
From then on no clawpoint command runs; only the server (and the test reading the state).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from core.model import Action, ExecutionStatus, Principal, PrincipalKind, WorkloadState
from core.service.journal import process_start
from tests.adversarial.conftest import ROOT, TRANSPORTS, Lab, agent_session, approval_id_of

pytestmark = [pytest.mark.anyio, pytest.mark.criu]

INSTALLED = ROOT / ".venv" / "bin" / "clawpoint"
AGENT = Principal(id="mcp:test", kind=PrincipalKind.AGENT)


def clawpoint() -> list[str]:
    """The installed console script (what a person runs); the module where none is built."""
    return [str(INSTALLED)] if INSTALLED.exists() else [sys.executable, "-m", "core.cli"]


def interrupt_migration(lab: Lab, workload: str) -> str:
    """Run ``clawpoint migrate WORKLOAD --yes`` and SIGKILL it once its checkpoint step is
    done: an orphan execution whose owner is dead. Its id."""
    proc = subprocess.Popen(
        [*clawpoint(), "migrate", workload, "--yes", "--json"],
        env=lab.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            with lab.service.db.read() as conn:
                row = conn.execute(
                    "SELECT e.id, s.status FROM execution_steps s JOIN executions e "
                    "ON e.id = s.execution_id WHERE e.target=? AND s.name='checkpoint'",
                    (workload,),
                ).fetchone()
            if row is not None and row["status"] == "done":
                proc.kill()
                proc.wait()
                return str(row["id"])
            time.sleep(0.01)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    pytest.fail("the migration finished before the test could interrupt it")


def execution_status(lab: Lab, execution_id: str) -> str:
    with lab.service.db.read() as conn:
        row = conn.execute("SELECT status FROM executions WHERE id=?", (execution_id,)).fetchone()
    return str(row["status"])


async def wait_until(check: Callable[[], bool], *, timeout_s: float = 120) -> None:
    """Poll ``check`` (a generous deadline only guards against hanging forever)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("the condition never became true")
        await anyio.sleep(0.1)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_running_server_finishes_an_interrupted_migration(
    lab_factory: Callable[[str], Lab], transport: str, need_criu: None
) -> None:
    lab = lab_factory("[recovery]\nevery_s = 0.5\n")
    workload = lab.start("orphaned", mb=50)
    async with agent_session(lab, transport) as agent:
        await agent.ok("list_workloads", {})  # serving; its start-up recovery found nothing
        execution_id = interrupt_migration(lab, workload)
        assert execution_status(lab, execution_id) == "running"
        # No clawpoint command runs from here on: only the server can finish the move.
        await wait_until(lambda: execution_status(lab, execution_id) != "running")
        assert execution_status(lab, execution_id) == ExecutionStatus.SUCCEEDED.value
        seen = await agent.ok("get_workload", {"workload": workload})
        assert seen["state"] in ("running", "checkpointing") and seen["node"] == "node-b", seen
    recovery = [e for e in lab.service.audit.entries() if e.kind == "recovery"]
    assert [(e.principal, e.data["execution"]) for e in recovery] == [
        ("system:recovery", execution_id)
    ]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_orphan_does_not_deny_an_unrelated_agent_action(
    lab_factory: Callable[[str], Lab], transport: str, need_criu: None
) -> None:
    # No periodic pass during the test: the orphan stays in the journal while the agent acts.
    lab = lab_factory("[recovery]\nevery_s = 3600\n")
    moved = lab.start("cut-short", mb=50)
    bystander = lab.start("bystander")
    async with agent_session(lab, transport) as agent:
        await agent.ok("list_workloads", {})
        execution_id = interrupt_migration(lab, moved)
        out = await agent.ok("preempt_workload", {"workload": bystander, "reason": "free node-a"})
        approval_id_of(out)  # waits for a person, as any preempt does; not denied
        assert execution_status(lab, execution_id) == "running"  # the orphan is still there
    w = lab.service.get_workload(bystander)
    assert w.node == "node-a" and w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING)


def test_limits_count_live_executions_of_the_same_pool_only(lab: Lab, need_criu: None) -> None:
    """node-a is pool "on-demand", node-b pool "spot" (the default local nodes)."""
    spot_1 = lab.start("spot-1", node="node-b")
    spot_2 = lab.start("spot-2", node="node-b")
    on_demand = lab.start("od-1", node="node-a")
    # A disruptive execution in flight in pool "spot", driven by another live process.
    plan = lab.service.plan(Action.PREEMPT, spot_1, {})
    execution = lab.service.journal.start(plan, "person:alice")
    owner = subprocess.Popen(["sleep", "600"])
    try:
        with lab.service.db.write() as conn:
            conn.execute(
                "UPDATE executions SET owner_pid=?, owner_start=? WHERE id=?",
                (owner.pid, process_start(owner.pid), execution.id),
            )

        def act(workload: str) -> Any:
            return lab.service.act(Action.PREEMPT, workload, {}, principal=AGENT, reason="r")

        # Another pool is not limited by it.
        elsewhere = act(on_demand)
        assert elsewhere.status == "approval_required", elsewhere.message
        # Its own pool is: one of its two workloads is already disrupted (limit 50%).
        same = act(spot_2)
        assert same.status == "denied" and "Pool spot already has 1 of 2" in same.message
    finally:
        owner.kill()
        owner.wait()
    # Its owner died: an orphan holds no slot, so the same request now waits for a person.
    again = act(spot_2)
    assert again.status == "approval_required", again.message
    assert lab.service.journal.count_running() == 0


def test_a_watch_pass_finishes_an_interrupted_migration(lab: Lab, need_criu: None) -> None:
    """``clawpoint watch`` is a long-running process too: each pass reconciles first."""
    workload = lab.start("watched", mb=50)
    execution_id = interrupt_migration(lab, workload)
    done = subprocess.run(
        [*clawpoint(), "watch", "--once", "--json"],
        env=lab.env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert execution_status(lab, execution_id) == "succeeded"
    assert lab.node_of(workload) == "node-b"
    report = json.loads(done.stdout)
    assert [(e["id"], e["status"]) for e in report["recovered"]] == [(execution_id, "succeeded")]
    assert report["exit_code"] == done.returncode == 21  # "acted this pass"
