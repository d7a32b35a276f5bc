"""A noisy agent cannot flood people with approval requests, nor the audit log with dry runs.

Driven over a real MCP client (``clawpoint serve`` over stdio and streamable HTTP):

- asking again for the same action and target, with another reason, returns the request
  already waiting (same id) and notifies nobody again; a pending request's
  ``execute_approved`` says to wait, never to ask again, and following that advice makes no
  second request;
- one agent's pending requests are capped (``[approvals] max_pending_per_principal``): past
  it a request is refused, naming the cap, and nothing is created; sessions of one agent
  share the cap;
- ``list_approvals`` pages;
- a loop of dry runs leaves a bounded number of audit entries.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from core.guardrails.approvals import ApprovalStatus
from core.guardrails.dry_runs import PER_WINDOW
from tests.adversarial.conftest import PERSON, TRANSPORTS, Lab, agent_session, approval_id_of

pytestmark = [pytest.mark.anyio]

NODES = """
[[local.nodes]]
name = "n1"
[[local.nodes]]
name = "n2"
[[local.nodes]]
name = "n3"
"""


def _pending(lab: Lab) -> list[str]:
    return [v.id for v in lab.service.list_approvals(status="pending")]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_asking_again_returns_the_request_already_waiting(lab: Lab, transport: str) -> None:
    async with agent_session(lab, transport) as agent:
        first = await agent.ok("drain_node", {"node": "local:node-a", "reason": "maintenance"})
        approval_id = approval_id_of(first)
        # A different reason is not a different request.
        again = await agent.ok("drain_node", {"node": "local:node-a", "reason": "disk is full"})
        assert approval_id_of(again) == approval_id
        assert "already waiting" in again["message"] and "no new request" in again["message"]
        assert "do not request it again" in again["next"]
        # The agent tries to run it before the person decided: told to wait, not to re-ask.
        text = await agent.error("execute_approved", {"approval_id": approval_id})
        assert "pending" in text and "not approved" in text
        assert "do not request it again" in text and "request a new approval" not in text
        # Following the advice (or not): asking once more still makes no second request.
        third = await agent.ok("drain_node", {"node": "local:node-a"})
        assert approval_id_of(third) == approval_id
        assert _pending(lab) == [approval_id]
        requested = [e for e in lab.service.audit.entries() if e.kind == "approval.requested"]
        assert [e.subject for e in requested] == [approval_id]
        # The person approves the one request; the agent runs it once.
        lab.service.approve(approval_id, principal=PERSON, via="cli")
        done = await agent.ok("execute_approved", {"approval_id": approval_id})
        assert done["status"] == "executed", done
    assert lab.service.get_approval(approval_id).status is ApprovalStatus.USED


async def test_each_agent_has_a_cap_on_pending_requests(
    lab_factory: Callable[[str], Lab],
) -> None:
    lab = lab_factory("[approvals]\nmax_pending_per_principal = 3\n" + NODES)
    async with agent_session(lab, "stdio") as agent:
        for node in ("n1", "n2", "n3"):
            approval_id_of(await agent.ok("drain_node", {"node": f"local:{node}"}))
        refused = await agent.ok("cordon_node", {"node": "local:n1"})
        assert refused["status"] == "denied", refused
        assert "max_pending_per_principal = 3" in refused["message"]
        assert "wait until a person decides" in refused["message"]
        assert refused.get("approval") is None
        # The same request as one already waiting is still answered with it.
        assert approval_id_of(await agent.ok("drain_node", {"node": "local:n1"}))
        page = await agent.ok("list_approvals", {"limit": 2})
        assert len(page["approvals"]) == 2 and page["next_cursor"]
        rest = await agent.ok("list_approvals", {"limit": 2, "cursor": page["next_cursor"]})
        assert len(rest["approvals"]) == 1 and rest.get("next_cursor") is None
    # Another session of the same agent (a new stdio server) shares the cap.
    async with agent_session(lab, "stdio") as other:
        refused = await other.ok("cordon_node", {"node": "local:n2"})
        assert refused["status"] == "denied" and "max_pending_per_principal" in refused["message"]
    assert len(_pending(lab)) == 3
    # Once a person decides one, there is room again.
    lab.service.deny(_pending(lab)[0], principal=PERSON, why="not now", via="cli")
    async with agent_session(lab, "stdio") as agent:
        approval_id_of(await agent.ok("cordon_node", {"node": "local:n1"}))


def _audit_after(lab: Lab, seq: int) -> list[str]:
    """The kinds of the audit entries after ``seq``, oldest first."""
    return [e.kind for e in sorted(lab.service.audit.entries(), key=lambda e: e.seq) if e.seq > seq]


async def test_a_loop_of_dry_runs_leaves_a_bounded_audit_trail(lab: Lab) -> None:
    entries = lab.service.audit.entries(limit=1)
    before = entries[0].seq if entries else 0
    async with agent_session(lab, "stdio") as agent:
        for _ in range(60):  # the same dry run, over and over
            out = await agent.ok("drain_node", {"node": "local:node-a", "dry_run": True})
            assert out["status"] == "planned"
        same = _audit_after(lab, before)
        assert same == ["plan", "decision"], same  # audited once
        for i in range(PER_WINDOW + 20):  # all different (another reason each time)
            out = await agent.ok(
                "drain_node", {"node": "local:node-b", "dry_run": True, "reason": f"try {i}"}
            )
            assert out["status"] == "planned"  # the answer is never affected
    kinds = _audit_after(lab, before)
    assert kinds.count("dry-run.unaudited") == 1
    assert kinds.count("plan") == PER_WINDOW, kinds.count("plan")
    assert len(kinds) == 2 * PER_WINDOW + 1, len(kinds)
    assert lab.service.audit.verify().ok
