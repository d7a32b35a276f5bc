"""Approvals: who may approve, binding to the plan hash, single use, expiry, chat codes."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest

from core import errors
from core.guardrails import approvals as approvals_mod
from core.guardrails.approval_codes import CODE_ALPHABET, load_or_create_secret
from core.guardrails.approvals import (
    ApprovalsConfig,
    ApprovalStatus,
    ApprovalStore,
    ApprovalView,
)
from core.guardrails.audit import AuditLog
from core.model import Action, Principal, PrincipalKind, utcnow
from core.state.db import Database
from tests.guardrails.conftest import AGENT, ALICE, BOB, OTHER_AGENT, SECRET, make_plan


def test_agents_and_the_requester_can_never_approve(approvals: ApprovalStore) -> None:
    view = approvals.create(make_plan(), AGENT, "spot notice")
    for who in (AGENT, OTHER_AGENT, Principal(id="cron", kind=PrincipalKind.SCHEDULER)):
        with pytest.raises(errors.PolicyDenied, match="only a person"):
            approvals.approve(view.id, who)
    # A person who requested cannot approve their own request either, even as a person.
    mine = approvals.create(make_plan(), ALICE, "maintenance")
    with pytest.raises(errors.PolicyDenied, match="cannot decide"):
        approvals.approve(mine.id, ALICE)
    # A person whose id equals the requesting agent's id is still the requester.
    twin = Principal(id=AGENT.id, kind=PrincipalKind.PERSON)
    with pytest.raises(errors.PolicyDenied, match="cannot decide"):
        approvals.approve(view.id, twin)
    assert approvals.get(view.id).status is ApprovalStatus.PENDING
    assert approvals.approve(mine.id, BOB).status is ApprovalStatus.APPROVED


def test_used_approval_cannot_be_replayed(approvals: ApprovalStore) -> None:
    plan = make_plan()
    view = approvals.create(plan, AGENT, "spot notice")
    approvals.approve(view.id, ALICE)
    used = approvals.consume(view.id, plan.hash, AGENT)
    assert used.status is ApprovalStatus.USED and used.used_at is not None
    with pytest.raises(errors.ApprovalRequired, match="is used"):
        approvals.consume(view.id, plan.hash, AGENT)


def test_pending_or_denied_approval_cannot_be_consumed(approvals: ApprovalStore) -> None:
    plan = make_plan()
    view = approvals.create(plan, AGENT, "x")
    with pytest.raises(errors.ApprovalRequired, match="pending"):
        approvals.consume(view.id, plan.hash, AGENT)
    approvals.deny(view.id, ALICE, "not during the demo")
    with pytest.raises(errors.ApprovalRequired, match="denied"):
        approvals.consume(view.id, plan.hash, AGENT)
    assert approvals.get(view.id).note == "not during the demo"


def test_changed_plan_does_not_match_the_approval(approvals: ApprovalStore) -> None:
    plan = make_plan(params={"to": "node-b"})
    view = approvals.create(plan, AGENT, "x")
    approvals.approve(view.id, ALICE)
    changed = make_plan(params={"to": "node-c"})
    assert changed.hash != plan.hash
    with pytest.raises(errors.PolicyDenied, match="plan changed"):
        approvals.consume(view.id, changed.hash, AGENT)
    other_target = make_plan(target="local:train-2", params={"to": "node-b"})
    with pytest.raises(errors.PolicyDenied, match="plan changed"):
        approvals.consume(view.id, other_target.hash, AGENT)
    # The mismatch did not burn the approval for the right plan.
    assert approvals.consume(view.id, plan.hash, AGENT).status is ApprovalStatus.USED


def test_another_agent_cannot_use_someone_elses_approval(approvals: ApprovalStore) -> None:
    plan = make_plan()
    view = approvals.create(plan, AGENT, "x")
    approvals.approve(view.id, ALICE)
    with pytest.raises(errors.PolicyDenied, match="requested by"):
        approvals.consume(view.id, plan.hash, OTHER_AGENT)


def test_unsealed_plan_cannot_be_submitted(approvals: ApprovalStore) -> None:
    plan = make_plan().model_copy(update={"target": "local:other"})
    with pytest.raises(errors.InvalidInput, match="not sealed"):
        approvals.create(plan, AGENT, "x")


def test_expiry_of_pending_and_of_approved(
    approvals: ApprovalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = make_plan()
    pending = approvals.create(plan, AGENT, "x")
    approved = approvals.create(plan, AGENT, "y")
    approvals.approve(approved.id, ALICE)
    later = utcnow() + timedelta(minutes=16)
    monkeypatch.setattr(approvals_mod, "utcnow", lambda: later)
    assert approvals.get(pending.id).status is ApprovalStatus.EXPIRED
    with pytest.raises(errors.Conflict, match="expired"):
        approvals.approve(pending.id, ALICE)
    with pytest.raises(errors.ApprovalRequired, match="expired"):
        approvals.consume(approved.id, plan.hash, AGENT)


def test_reading_the_queue_waits_for_no_writer_unless_something_is_due(
    tmp_path: Path, audit: AuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every read expires what is due; with nothing due it must not queue for the write lock
    # behind another process's write (the MCP read tools list approvals on every call).
    path = tmp_path / "state.db"
    store = ApprovalStore(Database(path, timeout_s=0.2), secret=SECRET, audit=audit,
                          config=ApprovalsConfig())  # fmt: skip
    view = store.create(make_plan(), AGENT, "x")
    other = Database(path)
    with other.write() as conn:  # another writer holds the lock meanwhile
        conn.execute("SELECT 1")
        assert store.get(view.id).status is ApprovalStatus.PENDING
        assert store.count(status=ApprovalStatus.PENDING) == 1
        assert [v.id for v in store.page(status=ApprovalStatus.PENDING)[0]] == [view.id]
        later = utcnow() + timedelta(minutes=16)
        monkeypatch.setattr(approvals_mod, "utcnow", lambda: later)
        with pytest.raises(errors.OperationFailed, match="locked"):
            store.count()  # now one is due: expiring it needs the lock
    assert store.get(view.id).status is ApprovalStatus.EXPIRED


def test_two_threads_consume_once(approvals: ApprovalStore) -> None:
    plan = make_plan()
    view = approvals.create(plan, AGENT, "x")
    approvals.approve(view.id, ALICE)
    barrier = threading.Barrier(4)
    results: list[str] = []

    def run() -> None:
        barrier.wait()
        try:
            approvals.consume(view.id, plan.hash, AGENT)
            results.append("ok")
        except errors.ApprovalRequired:
            results.append("refused")

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["ok", "refused", "refused", "refused"]


def test_chat_code_approves_and_names_the_path(approvals: ApprovalStore) -> None:
    view = approvals.create(make_plan(), AGENT, "x")
    code = approvals.reveal_code(view.id, principal=ALICE)
    assert len(code) == 8 and set(code) <= set(CODE_ALPHABET)
    typed = f"{code[:4].lower()}-{code[4:]}"  # people type lower case and dashes
    approved = approvals.approve_with_code(view.id, typed, AGENT)
    assert approved.status is ApprovalStatus.APPROVED
    assert approved.decided_by == "person via chat code"
    assert approved.decided_via == "chat-code"


def test_wrong_codes_lock_the_request(approvals: ApprovalStore) -> None:
    view = approvals.create(make_plan(), AGENT, "x")
    code = approvals.reveal_code(view.id, principal=ALICE)
    wrong = "".join("A" if c != "A" else "B" for c in code)
    with pytest.raises(errors.PolicyDenied, match="2 attempts left"):
        approvals.approve_with_code(view.id, wrong, AGENT)
    with pytest.raises(errors.PolicyDenied, match="1 attempts left"):
        approvals.approve_with_code(view.id, wrong, AGENT)
    with pytest.raises(errors.PolicyDenied, match="locked"):
        approvals.approve_with_code(view.id, wrong, AGENT)
    assert approvals.get(view.id).status is ApprovalStatus.LOCKED
    # Even the right code no longer works, and neither does a person's approval.
    with pytest.raises(errors.Conflict, match="locked"):
        approvals.approve_with_code(view.id, code, AGENT)
    with pytest.raises(errors.Conflict):
        approvals.approve(view.id, ALICE)


def test_no_agent_view_contains_the_code(approvals: ApprovalStore, db: Database) -> None:
    view = approvals.create(make_plan(), AGENT, "x")
    code = approvals.reveal_code(view.id, principal=ALICE)
    assert "code" not in ApprovalView.model_fields
    for shown in (view, approvals.get(view.id), *approvals.list()):
        assert code not in shown.model_dump_json()
    with pytest.raises(errors.PolicyDenied, match="only a person"):
        approvals.reveal_code(view.id, principal=AGENT)
    # The database holds only a hash of the code.
    files = [db.path, db.path.with_name("state.db-wal")]
    raw = b"".join(f.read_bytes() for f in files if f.exists())
    assert raw and code.encode() not in raw


def test_codes_depend_on_the_secret(db: Database, audit: AuditLog) -> None:
    one = ApprovalStore(db, secret=SECRET, audit=audit)
    two = ApprovalStore(db, secret=b"z" * 32, audit=audit)
    view = one.create(make_plan(), AGENT, "x")
    assert one.reveal_code(view.id, principal=ALICE) != two.reveal_code(view.id, principal=ALICE)


def test_secret_file_is_private_and_stable(tmp_path: Path) -> None:
    path = tmp_path / "approval.key"
    key = load_or_create_secret(path)
    assert load_or_create_secret(path) == key and len(key) == 32
    assert path.stat().st_mode & 0o077 == 0


def test_events_are_audited(approvals: ApprovalStore, audit: AuditLog) -> None:
    plan = make_plan(Action.KILL)
    view = approvals.create(plan, AGENT, "runaway job")
    approvals.approve(view.id, ALICE)
    approvals.consume(view.id, plan.hash, AGENT)
    kinds = [(e.kind, e.principal) for e in audit.entries(subject=view.id)]
    assert kinds == [
        ("approval.requested", "agent:agent-1"),
        ("approval.approved", "person:alice"),
        ("approval.used", "agent:agent-1"),
    ]
    assert audit.verify().ok


def test_expiry_is_configurable() -> None:
    assert ApprovalsConfig(expiry="2h").expiry_delta == timedelta(hours=2)
    with pytest.raises(ValueError, match="expiry"):
        ApprovalsConfig(expiry="soon")


def test_a_person_cannot_approve_their_own_request_with_its_code(
    approvals: ApprovalStore,
) -> None:
    view = approvals.create(make_plan(), ALICE, "x")
    code = approvals.reveal_code(view.id, principal=ALICE)
    with pytest.raises(errors.PolicyDenied, match="cannot approve"):
        approvals.approve_with_code(view.id, code, ALICE)
    assert approvals.get(view.id).status is ApprovalStatus.PENDING
