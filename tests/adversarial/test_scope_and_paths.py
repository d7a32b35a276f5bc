"""Out-of-scope targets are refused, and with no way to reach a person nothing waits: refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from core.model import Action
from tests.adversarial.conftest import PERSON, TRANSPORTS, Lab, agent_session

pytestmark = [pytest.mark.anyio, pytest.mark.criu]

SPOT_OFF_LIMITS = """
[[policy.rules]]
id = "agents-keep-off-spot"
outcome = "deny"
principals = ["agent"]
node_labels = { pool = "spot" }
reason = "Agents may not touch workloads on spot nodes."

[[policy.rules]]
id = "no-agent-drains"
outcome = "deny"
principals = ["agent"]
backends = ["local"]
actions = ["drain_node"]
"""


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_out_of_scope_targets_are_denied(
    lab_factory: Callable[[str], Lab], transport: str, need_criu: None
) -> None:
    lab = lab_factory(SPOT_OFF_LIMITS)
    on_spot = lab.start("on-spot", node="node-b")
    async with agent_session(lab, transport) as agent:
        for tool, args in [
            ("migrate_workload", {"workload": on_spot, "to": "node-a"}),
            ("preempt_workload", {"workload": on_spot}),
            ("checkpoint_workload", {"workload": on_spot}),  # even the safe action
            ("drain_node", {"node": "local:node-a"}),
        ]:
            out = await agent.ok(tool, args)
            assert out["status"] == "denied", (tool, out)
            assert out.get("approval") is None
        out = await agent.ok("migrate_workload", {"workload": on_spot, "dry_run": True})
        assert out["status"] == "planned" and "it would be refused" in out["message"]
    assert lab.service.list_approvals() == []  # nothing waits for a person
    assert lab.executions() == []
    assert lab.node_of(on_spot) == "node-b" and lab.service.checkpoints(on_spot) == []
    decisions = [e for e in lab.service.audit.entries() if e.kind == "decision"]
    assert {e.data["rule_id"] for e in decisions} >= {"agents-keep-off-spot", "no-agent-drains"}
    # The rule names agents only: a person at the CLI is still asked to confirm, as usual.
    person = lab.service.act(Action.MIGRATE, on_spot, {}, principal=PERSON)
    assert person.status == "approval_required"


async def test_no_approval_path_means_denied_and_nothing_pending(
    lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    lab = lab_factory("[approvals]\ncli_enabled = false\n")  # no page, no webhook either
    workload = lab.start("nobody")
    for transport in TRANSPORTS:  # HTTP without an approver token serves no page
        async with agent_session(lab, transport) as agent:
            for tool, args in [
                ("migrate_workload", {"workload": workload}),
                ("preempt_workload", {"workload": workload}),
            ]:
                out = await agent.ok(tool, args)
                assert out["status"] == "denied", out
                assert "no person can be reached" in out["message"]
                assert out.get("approval") is None
            listed = await agent.ok("list_approvals", {"status": "all"})
            assert listed["approvals"] == []
    assert lab.service.list_approvals() == []
    assert lab.executions() == []
    assert lab.node_of(workload) == "node-a"
    assert sum(e.kind == "approval.no-path" for e in lab.service.audit.entries()) == 4
