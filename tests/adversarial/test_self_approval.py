"""An agent cannot approve its own request: not by any tool, argument or made-up code.

Every tool the server lists is called with the pending approval's id in every string slot and
with made-up "approval" arguments; afterwards the approval is still pending, nothing was
approved or executed, and the workload has not moved. Over stdio and over HTTP.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.guardrails.approvals import ApprovalStatus
from tests.adversarial.conftest import (
    PERSON,
    TRANSPORTS,
    Lab,
    agent_session,
    approval_id_of,
)

pytestmark = [pytest.mark.anyio, pytest.mark.criu]

# Arguments an agent might invent to approve itself; the hidden elicitation parameter is one.
FORGED = {
    "approved": True,
    "approve": True,
    "confirmed": True,
    "principal": "person:alice",
    "asked": {"action": "accept", "content": {"approve": True}},
}


def _value(name: str, schema: dict[str, Any], *, approval_id: str, workload: str) -> Any:
    """A plausible, hostile value for one tool parameter."""
    kinds = {schema.get("type")} | {s.get("type") for s in schema.get("anyOf", [])}
    if "boolean" in kinds:
        return name != "dry_run"  # really act, where acting is possible
    if "integer" in kinds or "number" in kinds:
        return 1
    if "object" in kinds:
        return {"approval_id": approval_id, "approved": True}
    if name in ("workload",):
        return workload
    if name == "node":
        return "local:node-a"
    if name == "checkpoint":
        return f"{workload}@1"
    if name in ("to", "backend", "status"):
        return None
    return approval_id  # approval ids, run ids, names, reasons, codes...


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_no_tool_or_argument_approves_a_pending_request(
    lab: Lab, transport: str, need_criu: None
) -> None:
    workload = lab.start("selfie")
    async with agent_session(lab, transport) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload, "reason": "test"})
        approval_id = approval_id_of(out)
        plan_hash = out["plan"]["hash"]

        tools = (await agent.client.list_tools()).tools
        names = {t.name for t in tools}
        # No tool is named for approving, denying or granting (execute_approved only runs).
        assert not {n for n in names if any(w in n for w in ("approve", "deny", "grant"))} - {
            "execute_approved"
        }
        for tool in tools:
            props: dict[str, Any] = tool.input_schema.get("properties", {})
            assert not set(props) & set(FORGED), f"{tool.name} takes {set(props) & set(FORGED)}"
            args = {
                k: _value(k, s, approval_id=approval_id, workload=workload)
                for k, s in props.items()
                if k != "code"
            }
            args = {k: v for k, v in args.items() if v is not None}
            await agent.call(tool.name, args)  # success or error, it must not approve
            forged = await agent.call(tool.name, {**args, **FORGED})
            assert forged.is_error, f"{tool.name} accepted made-up approval arguments"
            assert lab.service.get_approval(approval_id).status is ApprovalStatus.PENDING, tool.name

    # Nothing anywhere was approved, nothing disruptive ran, the workload did not move.
    statuses = {a.status for a in lab.service.list_approvals()}
    assert statuses <= {ApprovalStatus.PENDING, ApprovalStatus.DENIED}, statuses
    assert not any(
        e.kind in ("approval.approved", "approval.used") for e in lab.service.audit.entries()
    )
    assert lab.executions(plan_hash) == []
    assert lab.node_of(workload) == "node-a"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_execute_approved_needs_a_persons_decision(
    lab: Lab, transport: str, need_criu: None
) -> None:
    workload = lab.start("pending")
    async with agent_session(lab, transport) as agent:
        approval_id = approval_id_of(await agent.ok("migrate_workload", {"workload": workload}))
        # Pending: executing is refused, repeatedly, and nothing runs.
        for _ in range(2):
            text = await agent.error("execute_approved", {"approval_id": approval_id})
            assert "pending" in text and "not approved" in text
        # A made-up code fails and is counted against the request.
        text = await agent.error(
            "execute_approved", {"approval_id": approval_id, "code": "AAAA-BBBB"}
        )
        assert "wrong code" in text and "2 attempts left" in text
        view = lab.service.get_approval(approval_id)
        assert view.status is ApprovalStatus.PENDING and view.failed_attempts == 1
        # An unknown approval id is simply not found.
        text = await agent.error("execute_approved", {"approval_id": "apr-0000000000"})
        assert "no approval" in text
    assert lab.executions() == []
    assert lab.node_of(workload) == "node-a"
    # The person can still approve it afterwards: the agent's tries blocked nothing else.
    lab.service.approve(approval_id, principal=PERSON, via="cli")
