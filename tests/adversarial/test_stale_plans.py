"""Stale approved plans are refused: an approval runs its plan only in the world it was made for.

An agent requests an action over MCP, a person approves it with the installed
``clawpoint approvals approve``, then the world changes (the person moves, resumes the
workload with the installed CLI). Executing the approval must then be refused with a
conflict that says to plan again, and leave the workload exactly as it is: same node, same
process, no new execution, the approval unused.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from core.guardrails.approvals import ApprovalStatus
from core.model import WorkloadState
from tests.adversarial.conftest import (
    ROOT,
    TRANSPORTS,
    Agent,
    Lab,
    agent_session,
    approval_id_of,
)

pytestmark = [pytest.mark.anyio, pytest.mark.criu]

INSTALLED = ROOT / ".venv" / "bin" / "clawpoint"


def person(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    """A person at the terminal: the installed console script (the module where none is built)."""
    cmd = [str(INSTALLED)] if INSTALLED.exists() else [sys.executable, "-m", "core.cli"]
    done = subprocess.run([*cmd, *args], env=lab.env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"clawpoint {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


async def request_and_approve(lab: Lab, agent: Agent, tool: str, args: dict[str, str]) -> str:
    out = await agent.ok(tool, {**args, "reason": "rebalance"})
    approval_id = approval_id_of(out)
    person(lab, "approvals", "approve", approval_id)
    assert lab.service.get_approval(approval_id).status is ApprovalStatus.APPROVED
    return approval_id


async def refused_and_untouched(lab: Lab, agent: Agent, approval_id: str, workload: str) -> None:
    """Executing the approval is refused; the workload, the journal and the approval are as
    they were."""
    before = lab.service.get_workload(workload)
    plan_hash = lab.service.get_approval(approval_id).plan_hash
    text = await agent.error("execute_approved", {"approval_id": approval_id})
    assert "conflict" in text and "has changed" in text and "plan it again" in text, text
    after = lab.service.get_workload(workload)
    assert (after.node, after.pid, after.state) == (before.node, before.pid, before.state)
    assert lab.executions(plan_hash) == []
    assert lab.service.get_approval(approval_id).status is ApprovalStatus.APPROVED  # unused


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_approved_migration_is_refused_after_a_person_moved_the_workload(
    lab: Lab, transport: str, need_criu: None
) -> None:
    workload = lab.start("stale-move")
    async with agent_session(lab, transport) as agent:
        approval_id = await request_and_approve(
            lab, agent, "migrate_workload", {"workload": workload}
        )
        person(lab, "migrate", workload, "--to", "node-b", "--yes")  # done by hand meanwhile
        assert lab.node_of(workload) == "node-b"
        await refused_and_untouched(lab, agent, approval_id, workload)
    assert lab.service.get_workload(workload).state in (
        WorkloadState.RUNNING,
        WorkloadState.CHECKPOINTING,
    )


async def test_an_approved_preempt_is_refused_on_another_node_than_it_frees(
    lab: Lab, need_criu: None
) -> None:
    workload = lab.start("stale-preempt")
    async with agent_session(lab, "stdio") as agent:
        approval_id = await request_and_approve(
            lab, agent, "preempt_workload", {"workload": workload}
        )
        assert "freeing node node-a" in lab.service.get_approval(approval_id).summary
        person(lab, "migrate", workload, "--to", "node-b", "--yes")
        await refused_and_untouched(lab, agent, approval_id, workload)
    assert lab.node_of(workload) == "node-b"  # still running there: node-b was never the deal


async def test_an_approved_restore_is_refused_once_the_workload_runs_again(
    lab: Lab, need_criu: None
) -> None:
    workload = lab.start("stale-restore")
    person(lab, "preempt", workload, "--yes")  # saved and stopped: a restore makes sense now
    checkpoint = lab.service.checkpoints(workload)[0].id
    async with agent_session(lab, "stdio") as agent:
        approval_id = await request_and_approve(
            lab, agent, "restore_checkpoint", {"checkpoint": checkpoint}
        )
        person(lab, "resume", workload, "--yes")  # a person brought it back meanwhile
        assert lab.service.get_workload(workload).state in (
            WorkloadState.RUNNING,
            WorkloadState.CHECKPOINTING,
        )
        await refused_and_untouched(lab, agent, approval_id, workload)
