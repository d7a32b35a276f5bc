"""A client the operator allows to answer (elicitation) still cannot approve a destructive plan
by default: a client declaring an allowed name approved a fresh restart (all progress gone)
with nobody reading the question. Destructive plans wait for a person on a people path
unless ``[mcp] elicitation_destructive = true``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from core.guardrails.approvals import ApprovalStatus
from core.model import Action, WorkloadState
from tests.adversarial.conftest import PERSON, Lab, agent_session, approval_id_of
from tests.adversarial.test_elicitation_trust import ALLOW_TRUSTED, TRUSTED, auto_accept

pytestmark = [pytest.mark.anyio, pytest.mark.criu]


def _stopped(lab: Lab, name: str) -> str:
    workload = lab.start(name)
    done = lab.service.act(Action.PREEMPT, workload, {}, principal=PERSON, confirmed=True)
    assert done.status == "executed", done.message
    assert lab.service.get_workload(workload).state is WorkloadState.STOPPED
    return workload


async def test_an_allowed_client_cannot_approve_a_fresh_restart_or_a_kill(
    lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    lab = lab_factory(ALLOW_TRUSTED)
    stopped = _stopped(lab, "fresh")
    running = lab.start("kill-me", node="node-b")
    before = len(lab.executions())
    asked: list[str] = []
    async with agent_session(
        lab, "stdio", elicitation_callback=auto_accept(asked), client_name=TRUSTED
    ) as agent:
        calls: list[tuple[str, dict[str, Any]]] = [
            ("resume_workload", {"workload": stopped, "fresh": True}),
            ("kill_workload", {"workload": running}),
        ]
        for tool, args in calls:
            out = await agent.ok(tool, args)
            approval_id = approval_id_of(out)
            kinds = {p["kind"] for p in out["approval"]["how_to_approve"]}
            assert "elicitation" not in kinds, out
            view = lab.service.get_approval(approval_id)
            assert view.status is ApprovalStatus.PENDING and view.needs == "out-of-band"
        # A disruptive plan is still the client's to answer, as the operator allowed.
        moved = await agent.ok("migrate_workload", {"workload": running})
        assert moved["status"] == "executed", moved
    assert len(asked) == 1  # only the migration was asked about
    assert len(lab.executions()) == before + 1
    assert lab.service.get_workload(stopped).state is WorkloadState.STOPPED
    assert lab.service.get_workload(running).state is WorkloadState.RUNNING


async def test_the_operator_can_opt_destructive_plans_in(
    lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    lab = lab_factory(ALLOW_TRUSTED + "elicitation_destructive = true\n")
    stopped = _stopped(lab, "fresh-ok")
    asked: list[str] = []
    async with agent_session(
        lab, "stdio", elicitation_callback=auto_accept(asked), client_name=TRUSTED
    ) as agent:
        out = await agent.ok("resume_workload", {"workload": stopped, "fresh": True})
    assert out["status"] == "executed", out
    assert len(asked) == 1 and "destructive" in asked[0]
