"""A dry run spends nothing, and the elicitation preview sees standing approvals.

A person grants "migrate this workload, at most once an hour". Dry runs, however many,
leave that budget alone, so the real run still has it; the preview that decides whether to
ask the client's user counts the grant, so nobody is asked about a plan it covers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp.types import ElicitResult

from core.model import Action
from tests.adversarial.conftest import PERSON, TRANSPORTS, Lab, agent_session, approval_id_of

pytestmark = [pytest.mark.anyio, pytest.mark.criu]

ELICITATION_ON = """[mcp]
elicitation_approval = true
elicitation_clients = ["*"]
elicitation_transports = ["stdio", "http"]
"""


def _grant(lab: Lab, workload: str) -> str:
    grant = lab.service.grant(
        Action.MIGRATE, {"target": workload}, max_per_hour=1, expires="1h",
        reason="rebalance this one", principal=PERSON,
    )  # fmt: skip
    return grant.id


def _used(lab: Lab, grant_id: str) -> int:
    return lab.service.guard.grants.get(grant_id).used_last_hour


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_dry_runs_leave_the_grant_budget_untouched(
    lab: Lab, transport: str, need_criu: None
) -> None:
    workload = lab.start("dry-grant")
    grant_id = _grant(lab, workload)
    async with agent_session(lab, transport) as agent:
        for _ in range(2):
            out = await agent.ok("migrate_workload", {"workload": workload, "dry_run": True})
            assert out["status"] == "planned", out
            assert grant_id in out["message"]  # the preview says the grant would cover it
        assert _used(lab, grant_id) == 0
        assert lab.executions() == [] and lab.service.list_approvals(status=None) == []
        done = await agent.ok("migrate_workload", {"workload": workload})
        assert done["status"] == "executed", done
        assert _used(lab, grant_id) == 1
        # The budget is spent now: the next real move needs a person again.
        again = await agent.ok("migrate_workload", {"workload": workload})
        approval_id_of(again)
    assert lab.node_of(workload) == "node-b"


async def test_the_elicitation_preview_respects_grants(
    lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    lab = lab_factory(ELICITATION_ON)
    workload = lab.start("preview-grant")
    grant_id = _grant(lab, workload)
    asked: list[str] = []

    async def accept(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True})

    async with agent_session(lab, "stdio", elicitation_callback=accept) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload})
        assert out["status"] == "executed", out
        assert asked == []  # the grant covered it: nobody needed asking
        assert lab.service.list_approvals(status=None) == [] and _used(lab, grant_id) == 1
        # With the budget spent, the move back is a question for the client's user.
        back = await agent.ok("migrate_workload", {"workload": workload})
        assert back["status"] == "executed", back
    assert len(asked) == 1 and _used(lab, grant_id) == 1
    (view,) = lab.service.list_approvals(status=None)
    assert view.decided_via == "elicitation"
    assert lab.node_of(workload) == "node-a"
