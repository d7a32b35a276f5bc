"""Elicitation, where the operator allows it: the user at the agent's client answers.

Every test here runs with ``[mcp] elicitation_approval`` on for any client over both
transports (off by default: see test_elicitation_trust.py); no answer path means no
execution.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from mcp.types import ElicitResult

from core.guardrails.approvals import ApprovalStatus
from core.model import Action
from tests.adversarial.conftest import PERSON, TRANSPORTS, Lab, agent_session

pytestmark = [pytest.mark.anyio, pytest.mark.criu]

ELICITATION_ON = """[mcp]
elicitation_approval = true
elicitation_clients = ["*"]
elicitation_transports = ["stdio", "http"]
"""


@pytest.fixture
def lab(lab_factory: Callable[[str], Lab]) -> Lab:
    return lab_factory(ELICITATION_ON)


def person(action: str, content: dict[str, Any] | None, asked: list[str]) -> Any:
    async def callback(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action=action, content=content)

    return callback


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_person_accepting_through_the_client_executes_once(
    lab: Lab, transport: str, need_criu: None
) -> None:
    workload = lab.start("elicit-yes")
    asked: list[str] = []
    answer = person("accept", {"approve": True, "note": "go ahead"}, asked)
    async with agent_session(lab, transport, elicitation_callback=answer) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload, "reason": "cheaper"})
        assert out["status"] == "executed", out
    assert (
        len(asked) == 1 and "Move local:elicit-yes" in asked[0] and "Risk: disruptive" in asked[0]
    )
    (view,) = lab.service.list_approvals(status=None)
    assert view.status is ApprovalStatus.USED
    assert view.decided_by and view.decided_by.startswith("elicitation:")
    assert view.decided_by.endswith("@" + view.requester)  # the client's user, in that session
    assert view.decided_via == "elicitation" and view.requester != view.decided_by
    assert len(lab.executions(view.plan_hash)) == 1
    assert lab.node_of(workload) == "node-b"


@pytest.mark.parametrize(
    ("transport", "action", "content"),
    [
        ("stdio", "decline", None),
        ("http", "cancel", None),
        ("http", "accept", {"approve": False, "note": "not now"}),
    ],
)
async def test_a_person_declining_through_the_client_denies(
    lab: Lab, transport: str, action: str, content: dict[str, Any] | None, need_criu: None
) -> None:
    workload = lab.start("elicit-no")
    asked: list[str] = []
    async with agent_session(
        lab, transport, elicitation_callback=person(action, content, asked)
    ) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload})
        assert out["status"] == "denied", out
        assert "declined" in out["message"]
        # The declined request cannot be executed afterwards either.
        (view,) = lab.service.list_approvals(status=None)
        text = await agent.error("execute_approved", {"approval_id": view.id})
        assert "denied" in text
    assert len(asked) == 1
    (view,) = lab.service.list_approvals(status=None)
    assert view.status is ApprovalStatus.DENIED and view.decided_via == "elicitation"
    assert lab.executions() == []
    assert lab.node_of(workload) == "node-a"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_client_without_elicitation_gets_approval_required(
    lab: Lab, transport: str, need_criu: None
) -> None:
    workload = lab.start("elicit-none")
    async with agent_session(lab, transport) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload})
        assert out["status"] == "approval_required", out
        kinds = {p["kind"] for p in out["approval"]["how_to_approve"]}
        assert "elicitation" not in kinds and "cli" in kinds
    (view,) = lab.service.list_approvals(status=None)
    assert view.status is ApprovalStatus.PENDING and view.decided_by is None
    assert lab.executions() == []
    assert lab.node_of(workload) == "node-a"


async def test_dry_run_never_asks_the_person(lab: Lab, need_criu: None) -> None:
    workload = lab.start("elicit-dry")
    asked: list[str] = []
    answer = person("accept", {"approve": True}, asked)
    async with agent_session(lab, "http", elicitation_callback=answer) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload, "dry_run": True})
        assert out["status"] == "planned"
    assert asked == [] and lab.service.list_approvals(status=None) == []
    assert lab.node_of(workload) == "node-a"


async def test_a_yes_counts_only_for_the_plan_the_person_saw(lab: Lab, need_criu: None) -> None:
    """Legacy sessions ask while the call waits: if the world changes meanwhile, the tool's
    fresh plan differs from the question, and the person's yes must not run it."""
    workload = lab.start("elicit-stale")
    asked: list[str] = []

    async def person_who_moves_it_first(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        # While the person reads "move from node-a to node-b", someone else does exactly that.
        moved = await anyio.to_thread.run_sync(
            lambda: lab.service.act(Action.MIGRATE, workload, {}, principal=PERSON, confirmed=True)
        )
        assert moved.status == "executed"
        return ElicitResult(action="accept", content={"approve": True})

    async with agent_session(
        lab, "stdio", elicitation_callback=person_who_moves_it_first, mode="legacy"
    ) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload})
    assert len(asked) == 1 and "from node-a to node-b" in asked[0]
    # The tool's plan is now node-b -> node-a, which nobody approved: it waits for a person.
    assert out["status"] == "approval_required", out
    assert "from node-b to node-a" in out["plan"]["summary"]
    (view,) = lab.service.list_approvals(status=None)
    assert view.status is ApprovalStatus.PENDING and view.decided_by is None
    assert len(lab.executions()) == 1  # only the person's own migration ran
    assert lab.node_of(workload) == "node-b"
