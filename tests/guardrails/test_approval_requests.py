"""The request path of the approval store, the page's throttle and Host check, the dry-run
budget: the rules behind the flood tests (tests/adversarial/test_approval_floods.py,
tests/mcp/test_approval_page_floods.py), checked directly and quickly."""

from __future__ import annotations

import pytest

from core import errors
from core.guardrails.approvals import ApprovalsConfig, ApprovalStatus, ApprovalStore
from core.guardrails.dry_runs import DryRunAudit
from core.model import Plan, Preconditions, Principal, PrincipalKind, WorkloadState
from mcp_server.approval_page import LoginThrottle, host_allowed, parse_host
from tests.guardrails.conftest import ALICE, make_plan

SESSION_A = Principal(id="mcp:stdio/aaaa0001", kind=PrincipalKind.AGENT)
SESSION_B = Principal(id="mcp:stdio/bbbb0002", kind=PrincipalKind.AGENT)


def _on(plan: Plan, node: str) -> Plan:
    pre = Preconditions(workload=plan.target, state=WorkloadState.RUNNING, node=node)
    return plan.model_copy(update={"preconditions": pre}).sealed()


def test_a_repeat_returns_the_waiting_request_whatever_its_reason(
    approvals: ApprovalStore,
) -> None:
    first, created = approvals.request(make_plan(), SESSION_A, "spot notice")
    assert created
    other_reason = make_plan(params={"reason": "cheaper"})
    again, created = approvals.request(other_reason, SESSION_A, "cheaper")
    assert not created and again.id == first.id and again.reason == "spot notice"
    # Another action, target or session is another request.
    assert approvals.request(make_plan(target="local:other"), SESSION_A, "x")[1]
    assert approvals.request(make_plan(), SESSION_B, "x")[0].id != first.id
    # Once decided, asking again is a new request.
    approvals.deny(first.id, ALICE, "no")
    assert approvals.request(make_plan(), SESSION_A, "again")[0].id != first.id


def test_a_waiting_request_for_a_changed_world_is_replaced(approvals: ApprovalStore) -> None:
    old, _ = approvals.request(_on(make_plan(), "node-a"), SESSION_A, "x")
    new, created = approvals.request(_on(make_plan(), "node-b"), SESSION_A, "x")
    assert created and new.id != old.id
    replaced = approvals.get(old.id)
    assert replaced.status is ApprovalStatus.DENIED and "superseded" in replaced.note
    assert [v.id for v in approvals.list(status=ApprovalStatus.PENDING)] == [new.id]


def test_the_cap_counts_every_session_of_an_agent_and_never_people(
    approvals: ApprovalStore,
) -> None:
    approvals.config = ApprovalsConfig(max_pending_per_principal=2)
    approvals.request(make_plan(target="local:a"), SESSION_A, "x")
    approvals.request(make_plan(target="local:b"), SESSION_B, "x")
    with pytest.raises(errors.PolicyDenied, match="max_pending_per_principal = 2") as caught:
        approvals.request(make_plan(target="local:c"), SESSION_A, "x")
    assert caught.value.code == "approval-cap"
    assert approvals.count(status=ApprovalStatus.PENDING) == 2
    other = Principal(id="mcp:another-agent", kind=PrincipalKind.AGENT)
    assert approvals.request(make_plan(target="local:c"), other, "x")[1]
    assert approvals.create(make_plan(target="local:d"), ALICE, "x").status.value == "pending"


def test_pages_walk_every_request_once_newest_first(approvals: ApprovalStore) -> None:
    approvals.config = ApprovalsConfig(max_pending_per_principal=50)
    ids = [approvals.create(make_plan(target=f"local:j{i}"), SESSION_A, "x").id for i in range(7)]
    seen, cursor = [], None
    while True:
        page, cursor = approvals.page(status=ApprovalStatus.PENDING, limit=3, cursor=cursor)
        seen += [v.id for v in page]
        if cursor is None:
            break
    assert seen == ids[::-1]
    with pytest.raises(errors.InvalidInput, match="names no approval"):
        approvals.page(cursor="apr-nothing")


def test_host_headers_parse_into_name_and_port() -> None:
    assert parse_host("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_host("[::1]:80") == ("[::1]", 80)
    assert parse_host("LocalHost") == ("localhost", None)
    for bad in ("127.0.0.1:1@evil.example", "127.0.0.1:", "a b", "127.0.0.1:65536", "x/y", ""):
        assert parse_host(bad) is None, bad
    allowed = ["127.0.0.1:*", "localhost", "[::1]:*"]
    assert host_allowed("127.0.0.1:9", allowed) and host_allowed("localhost", allowed)
    assert not host_allowed("127.0.0.1", allowed)  # NAME:* wants a port; NAME alone is listed
    assert not host_allowed("localhost:9", allowed)
    assert not host_allowed("127.0.0.1:9@evil.example", allowed)
    assert not host_allowed("127.0.0.10:9", allowed)


def test_the_throttle_counts_at_the_start_and_shares_a_global_budget() -> None:
    now = [0.0]
    throttle = LoginThrottle(limit=2, global_limit=3, window_s=10, clock=lambda: now[0])
    assert throttle.attempt("a") is None and throttle.attempt("a") is None
    assert throttle.attempt("a") == 10  # counted when they started, not when they failed
    assert throttle.attempt("b") is None
    throttle.succeeded("b")
    assert throttle.attempt("c") is None  # b's success gave its attempt back: 3 in all
    assert throttle.attempt("d") == 10  # the global budget is spent
    now[0] = 10.0
    assert throttle.attempt("d") is None


def test_dry_runs_are_audited_once_each_and_within_a_budget() -> None:
    now = [0.0]
    budget = DryRunAudit(window_s=60, per_window=2, clock=lambda: now[0])
    assert budget.admit("p", "h1") == "audit"
    assert budget.admit("p", "h1") == "skip"  # identical: once per window
    assert budget.admit("p", "h2") == "audit"
    assert budget.admit("p", "h3") == "note"  # past the budget: one note
    assert budget.admit("p", "h4") == "skip"
    assert budget.admit("q", "h1") == "audit"  # each principal has its own
    now[0] = 61.0
    assert budget.admit("p", "h1") == "audit"
