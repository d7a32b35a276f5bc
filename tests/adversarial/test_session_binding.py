"""An approved plan belongs to the session that asked for it, unless a person says otherwise.

Two agents (two stdio server processes, or two HTTP agent tokens) against one clawpoint
home: session A requests a move, a person approves, session B tries to run it (directly or
by relaying the one-time code) and is refused; A runs it. A person who approves with
``clawpoint approvals approve ID --any-session`` (the installed command) lets any session
of the same agent run it, and still no other agent.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from core.guardrails.approvals import ApprovalStatus
from tests.adversarial.conftest import (
    PERSON,
    ROOT,
    Lab,
    agent_session,
    approval_id_of,
)

pytestmark = [pytest.mark.anyio, pytest.mark.criu]

CLAWPOINT = ROOT / ".venv" / "bin" / "clawpoint"
TOKEN_B = "agent-b-" + "7f3c9e1a5b2d4c6e8f0a1b3c5d7e9f11"


async def test_another_stdio_session_cannot_execute_an_approval(lab: Lab, need_criu: None) -> None:
    workload = lab.start("bound-stdio")
    async with agent_session(lab, "stdio") as a, agent_session(lab, "stdio") as b:
        out = await a.ok("migrate_workload", {"workload": workload, "reason": "cheaper node"})
        approval_id, plan_hash = approval_id_of(out), out["plan"]["hash"]
        lab.service.approve(approval_id, principal=PERSON, via="cli")

        text = await b.error("execute_approved", {"approval_id": approval_id})
        requester = lab.service.get_approval(approval_id).requester
        assert requester.startswith("mcp:stdio/"), requester
        assert f"requested by {requester}" in text and "--any-session" in text, text
        # Relaying the chat code does not help the other session either, and costs nothing.
        pending = approval_id_of(await a.ok("preempt_workload", {"workload": workload}))
        code = lab.service.guard.approvals.reveal_code(pending, principal=PERSON)
        text = await b.error("execute_approved", {"approval_id": pending, "code": code})
        assert f"requested by {requester}" in text, text
        still = lab.service.get_approval(pending)
        assert still.status is ApprovalStatus.PENDING and still.failed_attempts == 0
        assert lab.executions() == [] and lab.node_of(workload) == "node-a"

        assert lab.service.get_approval(approval_id).status is ApprovalStatus.APPROVED
        done = await a.ok("execute_approved", {"approval_id": approval_id})
        assert done["status"] == "executed", done
    assert len(lab.executions(plan_hash)) == 1
    assert lab.node_of(workload) == "node-b"
    assert lab.service.get_approval(approval_id).status is ApprovalStatus.USED


async def test_another_http_agent_cannot_execute_an_approval(
    lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    lab = lab_factory(f'[mcp]\nagent_tokens = {{ agent-b = "{TOKEN_B}" }}\n')
    workload = lab.start("bound-http")
    server = lab.http_server()
    async with (
        agent_session(lab, "http", server=server) as a,
        agent_session(lab, "http", server=server, token=TOKEN_B) as b,
    ):
        out = await a.ok("migrate_workload", {"workload": workload})
        approval_id = approval_id_of(out)
        assert lab.service.get_approval(approval_id).requester == "mcp:clawpoint-agent"
        lab.service.approve(approval_id, principal=PERSON, via="cli")
        text = await b.error("execute_approved", {"approval_id": approval_id})
        assert "requested by mcp:clawpoint-agent" in text and "mcp:agent-b" in text, text
        assert lab.executions() == [] and lab.node_of(workload) == "node-a"
        # B's own requests are its own: A cannot run them.
        mine = approval_id_of(await b.ok("preempt_workload", {"workload": workload}))
        assert lab.service.get_approval(mine).requester == "mcp:agent-b"
        done = await a.ok("execute_approved", {"approval_id": approval_id})
        assert done["status"] == "executed", done
    assert lab.node_of(workload) == "node-b"


def _approve_any_session(lab: Lab, approval_id: str) -> str:
    """A person at the terminal, with the installed command."""
    proc = subprocess.run(
        [str(CLAWPOINT), "approvals", "approve", approval_id, "--any-session"],
        env=lab.env(), capture_output=True, text=True, timeout=120, cwd=Path.home(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


async def test_a_person_can_release_an_approval_to_any_session(lab: Lab, need_criu: None) -> None:
    workload = lab.start("any-session")
    async with agent_session(lab, "stdio") as a:
        approval_id = approval_id_of(await a.ok("migrate_workload", {"workload": workload}))
    # Session A is gone (its server process ended); a person releases the approval.
    said = _approve_any_session(lab, approval_id)
    assert "Any session of the requesting agent" in said, said
    view = lab.service.get_approval(approval_id)
    assert view.status is ApprovalStatus.APPROVED and view.executable_by == "agent"
    async with agent_session(lab, "http") as other_agent:  # a different agent: still no
        text = await other_agent.error("execute_approved", {"approval_id": approval_id})
        assert "cannot use it" in text, text
    async with agent_session(lab, "stdio") as b:  # another session of the same agent: yes
        done = await b.ok("execute_approved", {"approval_id": approval_id})
        assert done["status"] == "executed", done
    assert lab.node_of(workload) == "node-b"
    assert lab.service.get_approval(approval_id).status is ApprovalStatus.USED


async def test_another_agent_cannot_continue_a_runbook_run(lab: Lab, need_criu: None) -> None:
    """Continuing a run executes the plans approved for the run's principal: only that agent
    (in any of its sessions: a run outlives them) or a person may continue it."""
    workload = lab.start("bound-run")
    async with agent_session(lab, "stdio") as a:
        run = await a.ok("start_runbook", {"name": "spot-interruption",
                                           "params": {"workload": workload}})  # fmt: skip
        assert (run["status"], run["current"]) == ("waiting_approval", "move-gate"), run
    lab.service.approve(run["waiting"]["approval_id"], principal=PERSON, via="cli")
    async with agent_session(lab, "http") as other_agent:
        text = await other_agent.error("continue_runbook", {"run_id": run["id"]})
        assert "cannot continue it" in text, text
    assert lab.executions() == [] and lab.node_of(workload) == "node-a"
    async with agent_session(lab, "stdio") as a_again:  # the same agent, a later session
        after = await a_again.ok("continue_runbook", {"run_id": run["id"]})
    assert after["status"] == "succeeded", after
    assert len(lab.executions()) == 1  # the approved migrate ran, once
    assert lab.node_of(workload) == "node-b"
