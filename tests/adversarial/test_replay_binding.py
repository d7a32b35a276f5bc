"""An approval runs its own plan, once, while it is valid: no replay, no swap, no reuse.

Each test drives the real server as an agent (stdio and HTTP) and has a person approve
through the service (what ``clawpoint approvals approve`` calls), with small CRIU workloads.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from core import errors
from core.guardrails.approvals import ApprovalStatus
from core.model import Action, Principal, PrincipalKind
from tests.adversarial.conftest import (
    PERSON,
    TRANSPORTS,
    Lab,
    agent_session,
    approval_id_of,
)

pytestmark = [pytest.mark.anyio, pytest.mark.criu]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_used_approval_cannot_be_replayed(
    lab: Lab, transport: str, need_criu: None
) -> None:
    workload = lab.start("replay")
    async with agent_session(lab, transport) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload, "reason": "rebalance"})
        approval_id, plan_hash = approval_id_of(out), out["plan"]["hash"]
        lab.service.approve(approval_id, principal=PERSON, via="cli")
        done = await agent.ok("execute_approved", {"approval_id": approval_id})
        assert done["status"] == "executed", done
        assert lab.node_of(workload) == "node-b"
        for _ in range(2):
            text = await agent.error("execute_approved", {"approval_id": approval_id})
            assert "used" in text and "cannot be used" in text
    assert len(lab.executions(plan_hash)) == 1
    view = lab.service.get_approval(approval_id)
    assert view.status is ApprovalStatus.USED and view.decided_by == PERSON.id
    assert lab.node_of(workload) == "node-b"  # not moved back, not moved twice


def test_the_store_refuses_a_different_plan_hash(lab: Lab, need_criu: None) -> None:
    workload = lab.start("swap-store")
    other = lab.start("swap-other")
    agent = Principal(id="mcp:stdio", kind=PrincipalKind.AGENT)
    approved = lab.service.act(Action.MIGRATE, workload, {}, principal=agent)
    assert approved.status == "approval_required" and approved.approval
    approval_id = approved.approval["id"]
    lab.service.approve(approval_id, principal=PERSON, via="cli")
    changed = [
        lab.service.plan(Action.MIGRATE, other, {}),  # changed target
        lab.service.plan(Action.MIGRATE, workload, {"to": "node-b"}),  # changed parameters
        lab.service.plan(Action.PREEMPT, workload, {}),  # changed action
    ]
    for plan in changed:
        assert approved.plan is not None and plan.hash != approved.plan.hash
        with pytest.raises(errors.PolicyDenied, match="the plan changed after it was approved"):
            lab.service.guard.consume(approval_id, plan, agent)
    # Refusals used nothing up: the approval still runs exactly its own plan.
    assert lab.service.get_approval(approval_id).status is ApprovalStatus.APPROVED
    assert lab.executions() == []
    assert lab.node_of(workload) == "node-a" and lab.node_of(other) == "node-a"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_changed_request_gets_a_new_pending_approval(
    lab: Lab, transport: str, need_criu: None
) -> None:
    workload = lab.start("swap")
    other = lab.start("swap-b")
    async with agent_session(lab, transport) as agent:
        first = await agent.ok("migrate_workload", {"workload": workload})
        approval_id = approval_id_of(first)
        lab.service.approve(approval_id, principal=PERSON, via="cli")
        # Same tool, changed parameters, changed target, changed action: each is a new request
        # that waits for a person; none reuses the approved one, none executes.
        for tool, args in [
            ("migrate_workload", {"workload": workload, "to": "node-b"}),
            ("migrate_workload", {"workload": other}),
            ("preempt_workload", {"workload": workload}),
        ]:
            out = await agent.ok(tool, args)
            new_id = approval_id_of(out)
            assert new_id != approval_id and out["plan"]["hash"] != first["plan"]["hash"]
            assert lab.service.get_approval(new_id).status is ApprovalStatus.PENDING
        assert lab.service.get_approval(approval_id).status is ApprovalStatus.APPROVED
        assert lab.executions() == []
        assert lab.node_of(workload) == "node-a" and lab.node_of(other) == "node-a"
        # The approved request still runs exactly what the person saw.
        done = await agent.ok("execute_approved", {"approval_id": approval_id})
        assert done["plan"]["hash"] == first["plan"]["hash"] and done["status"] == "executed"
    assert [e["plan_hash"] for e in lab.executions()] == [first["plan"]["hash"]]
    assert lab.node_of(workload) == "node-b" and lab.node_of(other) == "node-a"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_expired_approvals_fail(
    lab_factory: Callable[[str], Lab], transport: str, need_criu: None
) -> None:
    lab = lab_factory('[approvals]\nexpiry = "2s"\n')
    workload = lab.start("late")
    async with agent_session(lab, transport) as agent:
        approved = approval_id_of(await agent.ok("migrate_workload", {"workload": workload}))
        lab.service.approve(approved, principal=PERSON, via="cli")
        waiting = approval_id_of(await agent.ok("preempt_workload", {"workload": workload}))
        await anyio.sleep(2.5)  # past the expiry of both (approval restarts the clock)
        text = await agent.error("execute_approved", {"approval_id": approved})
        assert "expired" in text
        assert lab.service.get_approval(approved).status is ApprovalStatus.EXPIRED
        # A pending one expired too: a person can no longer approve it.
        with pytest.raises(errors.Conflict, match="expired"):
            lab.service.approve(waiting, principal=PERSON, via="cli")
        text = await agent.error("execute_approved", {"approval_id": waiting})
        assert "expired" in text
    assert lab.executions() == []
    assert lab.node_of(workload) == "node-a"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_two_concurrent_executions_run_once(
    lab_factory: Callable[[str], Lab], transport: str, need_criu: None
) -> None:
    # Limits loose enough that both calls reach the approval itself (with the defaults the
    # blast-radius limit may refuse the second while the first runs, which proves less).
    lab = lab_factory("[policy.limits]\nmax_blast_radius = 1.0\nmax_concurrent_disruptive = 5\n")
    workload = lab.start("race")
    lab.start("bystander")  # a second workload in the pool, so one may be disrupted at a time
    server = lab.http_server() if transport == "http" else None
    async with agent_session(lab, transport, server=server) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload})
        approval_id, plan_hash = approval_id_of(out), out["plan"]["hash"]
    # The racers are new sessions of the same agent: the person releases it to any session.
    lab.service.approve(approval_id, principal=PERSON, via="cli", any_session=True)

    results: list[tuple[bool, str, dict[str, object] | None]] = []

    async def execute(ready: anyio.Event, go: anyio.Event) -> None:
        # Two separate sessions (over stdio: two server processes on one state database).
        async with agent_session(lab, transport, server=server) as racer:
            ready.set()
            await go.wait()
            r = await racer.call("execute_approved", {"approval_id": approval_id})
            results.append((r.is_error, str(r.content[0].text), r.structured_content))

    go = anyio.Event()
    readies = [anyio.Event(), anyio.Event()]
    async with anyio.create_task_group() as tg:
        for ready in readies:
            tg.start_soon(execute, ready, go)
        for ready in readies:
            await ready.wait()
        go.set()

    executed = [r for r in results if not r[0] and r[2] and r[2]["status"] == "executed"]
    failed = [r for r in results if r[0]]
    assert len(executed) == 1 and len(failed) == 1, results
    # Refused by whichever guard it reaches first: the approval already used, or the
    # workload's lease held by the first execution (a migration's standby step makes the
    # first one start its execution early); either way it ran nothing.
    refusal = failed[0][1]
    assert "is used, not approved" in refusal or "is already being changed by" in refusal, refusal
    assert len(lab.executions(plan_hash)) == 1
    assert len([e for e in lab.service.audit.entries() if e.kind == "approval.used"]) == 1
    assert lab.node_of(workload) == "node-b"
    assert len(lab.service.checkpoints(workload)) == 1  # saved once, moved once
