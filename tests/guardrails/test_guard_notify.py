"""The guard facade and the webhook, against a real HTTP receiver on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import errors
from core.guardrails.approvals import ApprovalsConfig, ApprovalStatus, ApprovalStore
from core.guardrails.audit import AuditLog
from core.guardrails.grants import GrantStore
from core.guardrails.guard import Guard
from core.guardrails.notify import Notifier, NotifyConfig
from core.guardrails.policy import Outcome, PolicyConfig, PolicyContext
from core.model import Action
from core.state.db import Database
from tests.guardrails.conftest import AGENT, ALICE, SECRET, make_plan
from tests.webhook import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def make_guard(
    db: Database,
    *,
    policy: PolicyConfig | None = None,
    approvals: ApprovalsConfig | None = None,
    webhook: str | None = None,
) -> Guard:
    audit = AuditLog(db)
    return Guard(
        policy=policy or PolicyConfig(),
        approvals=ApprovalStore(db, secret=SECRET, audit=audit, config=approvals),
        grants=GrantStore(db, audit=audit),
        audit=audit,
        notifier=Notifier(NotifyConfig(webhook_url=webhook, attempts=3)) if webhook else None,
    )


def test_decide_is_audited_with_reason_and_rule(db: Database) -> None:
    guard = make_guard(db)
    plan = make_plan()
    decision = guard.decide(plan, AGENT, PolicyContext())
    assert decision.outcome is Outcome.APPROVE and decision.plan_hash == plan.hash
    [entry] = [e for e in guard.audit.entries() if e.kind == "decision"]
    assert entry.principal == "agent:agent-1" and entry.subject == plan.target
    assert entry.data["rule_id"] == "default:disruptive" and entry.data["reason"]


def test_standing_grant_turns_approve_into_allow_but_not_deny(db: Database) -> None:
    guard = make_guard(db)
    grant = guard.grants.grant(
        Action.REQUEUE,
        {"partition": "gpu", "trigger": "spot-interruption"},
        max_per_hour=1,
        expires="1d",
        reason="spot notices",
        granted_by=ALICE,
    )
    plan = make_plan(Action.REQUEUE, scope={"partition": "gpu"})
    guard.grants.evidence.record("spot-interruption", plan.target, source="test")
    first = guard.decide(plan, AGENT, PolicyContext(), trigger="spot-interruption")
    assert (first.outcome, first.grant_id) == (Outcome.ALLOW, grant.id)
    assert "spot notices" in first.reason
    second = guard.decide(plan, AGENT, PolicyContext(), trigger="spot-interruption")
    assert (second.outcome, second.grant_id) == (Outcome.APPROVE, None)  # budget spent
    dry = make_guard(db, policy=PolicyConfig(dry_run=True))
    assert dry.decide(plan, AGENT, PolicyContext(), trigger="spot-interruption").outcome is (
        Outcome.DENY
    )


def test_unsealed_or_altered_plan_is_refused(db: Database) -> None:
    guard = make_guard(db)
    altered = make_plan().model_copy(update={"params": {"to": "elsewhere"}})
    with pytest.raises(errors.InvalidInput, match="not sealed"):
        guard.decide(altered, AGENT, PolicyContext())


def test_no_path_fails_closed(db: Database) -> None:
    guard = make_guard(db, approvals=ApprovalsConfig(cli_enabled=False))
    with pytest.raises(errors.PolicyDenied, match="no person") as info:
        guard.request_approval(make_plan(), AGENT, "spot notice")
    assert "page_url" in info.value.hint
    assert guard.approvals.list(status=ApprovalStatus.PENDING) == []


def test_failing_webhook_as_only_path_fails_closed(db: Database, receiver: Receiver) -> None:
    receiver.statuses = [503, 503, 503]
    guard = make_guard(db, approvals=ApprovalsConfig(cli_enabled=False), webhook=receiver.url)
    with pytest.raises(errors.PolicyDenied, match="no person"):
        guard.request_approval(make_plan(), AGENT, "spot notice")
    assert len(receiver.bodies) == 3  # retried, then gave up
    assert guard.approvals.list(status=ApprovalStatus.PENDING) == []


def test_webhook_payload_and_paths(db: Database, receiver: Receiver) -> None:
    receiver.statuses = [502]  # one transient failure, then delivered
    page = "http://127.0.0.1:8765/approvals"
    guard = make_guard(db, approvals=ApprovalsConfig(page_url=page), webhook=receiver.url)
    plan = make_plan()
    view, paths = guard.request_approval(plan, AGENT, "node-a is being reclaimed")
    by_kind = {p.kind: p for p in paths}
    assert set(by_kind) == {"cli", "page", "webhook", "chat-code"}
    assert all(p.available for p in paths)
    assert f"clawpoint approvals approve {view.id}" in by_kind["cli"].how
    assert by_kind["page"].how == f"open {page}/{view.id}"
    assert len(receiver.bodies) == 2
    body = receiver.bodies[-1]
    code = guard.approvals.reveal_code(view.id, principal=ALICE)
    assert body["clawpoint"]["code"] == code
    assert body["clawpoint"]["approval_id"] == view.id
    assert body["clawpoint"]["plan_hash"] == plan.hash
    assert "node-a is being reclaimed" in body["text"]
    assert f"{code[:4]}-{code[4:]}" in body["text"]
    assert "about 40 s" in body["text"] and "$2.14" in body["text"]
    assert body["blocks"][0]["type"] == "header"
    # What the agent gets back never contains the code.
    agent_side = view.model_dump_json() + json.dumps([p.model_dump() for p in paths])
    assert code not in agent_side
    # The approval is then resolved and used exactly once.
    guard.approvals.approve_with_code(view.id, code, AGENT)
    assert guard.consume(view.id, plan, AGENT).status is ApprovalStatus.USED
    kinds = [e.kind for e in guard.audit.entries(subject=view.id)]
    assert kinds == ["approval.requested", "approval.paths", "approval.approved", "approval.used"]


def test_client_error_is_not_retried(receiver: Receiver) -> None:
    receiver.statuses = [404]
    notifier = Notifier(NotifyConfig(webhook_url=receiver.url, attempts=3))
    assert notifier.send({"text": "x"}) is False
    assert len(receiver.bodies) == 1


def test_elicitation_alone_is_a_path(db: Database) -> None:
    guard = make_guard(db, approvals=ApprovalsConfig(cli_enabled=False))
    view, paths = guard.request_approval(make_plan(), AGENT, "x", elicitation_available=True)
    assert [p.kind for p in paths] == ["elicitation"]  # no code path: nothing shows the code
    assert view.status is ApprovalStatus.PENDING


def test_webhook_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="webhook_url"):
        NotifyConfig(webhook_url="file:///etc/passwd")


def test_open_wires_everything_from_settings(db: Database, tmp_path: Path) -> None:
    guard = Guard.open(db, home=tmp_path, approvals=ApprovalsConfig(page_url="http://x/a"))
    view, paths = guard.request_approval(make_plan(), AGENT, "x")
    assert {p.kind for p in paths} == {"cli", "page", "chat-code"}
    assert (tmp_path / "approval.key").exists() and guard.audit.verify().ok
    assert guard.notifier is None and view.status is ApprovalStatus.PENDING


def test_webhook_message_says_what_the_situation_says(db: Database, receiver: Receiver) -> None:
    from datetime import timedelta

    from core.guardrails.request_facts import Notice, Situation
    from core.model import utcnow

    guard = make_guard(db, webhook=receiver.url)
    plan = make_plan().model_copy(update={"rollback": "migrate it back --to node-a"}).sealed()
    now = utcnow()
    guard.situation = lambda p: Situation(
        now=now,
        notices=[Notice(trigger="spot-interruption", node="local:node-a", source="aws-imds",
                        deadline=now + timedelta(seconds=110))],
        node="local:node-a",
        unsafe_nodes={"local:node-a": "being reclaimed"},
    )  # fmt: skip
    guard.request_approval(plan, AGENT, "spot notice")
    said = receiver.bodies[-1]
    assert "node-a is reclaimed in 1 min 50 s" in said["clawpoint"]["deadline"]
    assert "no way back to node-a" in said["clawpoint"]["undo"]
    assert "If nobody acts" in json.dumps(said["blocks"])

    def unreadable(p: object) -> Situation:
        raise RuntimeError("backend down")

    guard.situation = unreadable  # a world that cannot be read never stops a request
    view, _ = guard.request_approval(make_plan(target="local:other"), AGENT, "x")
    assert view.status is ApprovalStatus.PENDING
    assert receiver.bodies[-1]["clawpoint"]["undo"] == "restore the previous checkpoint on node-a"
