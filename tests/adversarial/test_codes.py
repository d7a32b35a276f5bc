"""One-time approval codes reach people only, and guessing them locks the request."""

from __future__ import annotations

import pytest

from core.guardrails.approvals import ApprovalStatus
from core.guardrails.prompts import format_code
from core.model import Action
from tests.adversarial.conftest import (
    PERSON,
    TRANSPORTS,
    Lab,
    agent_session,
    approval_id_of,
)

pytestmark = [pytest.mark.anyio, pytest.mark.criu]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_no_tool_output_ever_contains_an_approval_code(
    lab: Lab, transport: str, need_criu: None
) -> None:
    workload = lab.start("codes")
    lab.service.act(  # a checkpoint, so there is something to list and delete
        Action.CHECKPOINT,
        workload,
        {"stop": False},
        principal=PERSON,
    )
    codes: dict[str, str] = {}
    async with agent_session(lab, transport) as agent:
        requests = [
            ("migrate_workload", {"workload": workload, "reason": "spot is cheaper"}),
            ("preempt_workload", {"workload": workload}),
            ("drain_node", {"node": "local:node-a"}),
            ("delete_checkpoint", {"checkpoint": f"{workload}@1"}),
        ]
        for tool, args in requests:
            out = await agent.ok(tool, args)
            if out["status"] == "approval_required":
                approval_id = approval_id_of(out)
                # The people path: what the page, the webhook and 'approvals show' display.
                codes[approval_id] = lab.service.guard.approvals.reveal_code(
                    approval_id, principal=PERSON
                )
                shown = lab.service.approval_text(approval_id, principal=PERSON)
                assert format_code(codes[approval_id]) in shown
        assert len(codes) >= 3, codes
        for approval_id in codes:
            await agent.ok("get_approval", {"approval_id": approval_id})
            await agent.error("execute_approved", {"approval_id": approval_id})
            await agent.error("execute_approved", {"approval_id": approval_id, "code": "WRONG123"})
        for status in (None, "pending", "approved", "denied", "expired", "used", "locked"):
            await agent.call("list_approvals", {"status": status} if status else {})
        first = next(iter(codes))
        lab.service.approve(first, principal=PERSON, via="cli")
        await agent.ok("execute_approved", {"approval_id": first})
        await agent.ok("get_approval", {"approval_id": first})
        await agent.ok("list_workloads", {})
        await agent.ok("cluster_status", {})
        await agent.read_everything()  # tool list, resources (audit, policy), prompts

    everything = "\n".join(agent.seen)
    assert len(everything) > 5000  # the session really said a lot
    for approval_id, code in codes.items():
        for form in (code, format_code(code), code.lower()):
            assert form not in everything, f"the code of {approval_id} reached the agent"
    # And the state database never stores a code in the clear either.
    raw = lab.settings.state_db.read_bytes()
    assert not any(code.encode() in raw for code in codes.values())


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_guessing_codes_locks_the_request(lab: Lab, transport: str, need_criu: None) -> None:
    workload = lab.start("guess")
    async with agent_session(lab, transport) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload})
        approval_id = approval_id_of(out)
        right = lab.service.guard.approvals.reveal_code(approval_id, principal=PERSON)
        wrong = ["AAAAAAAA", "BBBB-CCCC", "23456789"]
        for i, guess in enumerate(wrong):
            text = await agent.error(
                "execute_approved", {"approval_id": approval_id, "code": guess}
            )
            assert "wrong code" in text
            if i < len(wrong) - 1:
                assert f"{len(wrong) - 1 - i} attempts left" in text
        assert "locked" in text
        view = lab.service.get_approval(approval_id)
        assert view.status is ApprovalStatus.LOCKED and view.failed_attempts == 3
        # Now even the right code fails, in any spelling.
        for code in (right, format_code(right), right.lower()):
            text = await agent.error("execute_approved", {"approval_id": approval_id, "code": code})
            assert "locked" in text
        assert lab.service.get_approval(approval_id).status is ApprovalStatus.LOCKED
    assert lab.executions() == []
    assert lab.node_of(workload) == "node-a"
    kinds = [e.kind for e in lab.service.audit.entries()]
    assert kinds.count("approval.code-rejected") == 3 and "approval.locked" in kinds


async def test_the_right_code_from_a_person_approves_once(lab: Lab, need_criu: None) -> None:
    """The control case: the chat-code flow works, so the refusals above are meaningful."""
    workload = lab.start("chat")
    async with agent_session(lab, "http") as agent:
        approval_id = approval_id_of(await agent.ok("migrate_workload", {"workload": workload}))
        code = lab.service.guard.approvals.reveal_code(approval_id, principal=PERSON)
        done = await agent.ok(
            "execute_approved", {"approval_id": approval_id, "code": format_code(code).lower()}
        )
        assert done["status"] == "executed"
        text = await agent.error("execute_approved", {"approval_id": approval_id, "code": code})
        assert "not pending" in text or "used" in text
    view = lab.service.get_approval(approval_id)
    assert view.status is ApprovalStatus.USED and view.decided_via == "chat-code"
    assert lab.node_of(workload) == "node-b"
