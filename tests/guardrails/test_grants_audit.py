"""Standing approvals (scope, budget, expiry, revoke) and audit-chain tamper detection."""

from __future__ import annotations

import sqlite3
import threading
from datetime import timedelta

import pytest

from core import errors
from core.guardrails import grants as grants_mod
from core.guardrails.audit import AuditLog
from core.guardrails.durations import format_duration, parse_duration
from core.guardrails.grants import GrantStore
from core.model import Action, utcnow
from core.state.db import Database
from tests.guardrails.conftest import AGENT, ALICE, make_plan

GPU_SPOT = {"partition": "gpu", "trigger": "spot-interruption"}


def test_durations() -> None:
    assert parse_duration("2h") == timedelta(hours=2)
    assert parse_duration("30m") == timedelta(minutes=30)
    assert parse_duration("7d") == timedelta(days=7)
    assert format_duration(timedelta(hours=2)) == "2h"
    for bad in ("", "2x", "0m", "1h30m", "400d", True):
        with pytest.raises(errors.InvalidInput):
            parse_duration(bad)


def test_grant_matches_scope_and_trigger(grants: GrantStore) -> None:
    grant = grants.grant(
        Action.REQUEUE, GPU_SPOT, max_per_hour=5, expires="7d", reason="spot", granted_by=ALICE
    )
    plan = make_plan(Action.REQUEUE, scope={"partition": "gpu"})
    # A claimed trigger is not evidence: nothing observed, no grant (fail closed).
    assert grants.match(plan, "spot-interruption") is None
    grants.evidence.record("queue-backlog", plan.target, source="test")
    assert grants.match(plan, "spot-interruption") is None  # evidence of another trigger
    seen = grants.evidence.record("spot-interruption", plan.target, source="test")
    matched = grants.match(plan, None)  # observed: applies whatever the caller claims
    assert matched is not None and matched.id == grant.id and matched.evidence == seen
    cpu = make_plan(Action.REQUEUE, scope={"partition": "cpu"})
    assert grants.match(cpu, "spot-interruption") is None
    kill = make_plan(Action.KILL, scope={"partition": "gpu"})
    assert grants.match(kill, "spot-interruption") is None


def test_label_scopes(grants: GrantStore) -> None:
    grants.grant(
        Action.MIGRATE,
        {"node_labels.pool": "spot", "labels.team": "ml"},
        max_per_hour=1,
        expires="1h",
        reason="ml on spot",
        granted_by=ALICE,
    )
    good = make_plan(scope={"node_labels": {"pool": "spot"}, "labels": {"team": "ml"}})
    assert grants.match(good) is not None
    assert grants.match(make_plan(scope={"node_labels": {"pool": "spot"}})) is None


def test_only_people_grant_and_revoke(grants: GrantStore) -> None:
    with pytest.raises(errors.PolicyDenied, match="only a person"):
        grants.grant(
            Action.REQUEUE, GPU_SPOT, max_per_hour=5, expires="1h", reason="x", granted_by=AGENT
        )
    grant = grants.grant(
        Action.REQUEUE, GPU_SPOT, max_per_hour=5, expires="1h", reason="x", granted_by=ALICE
    )
    with pytest.raises(errors.PolicyDenied):
        grants.revoke(grant.id, by=AGENT)
    grants.revoke(grant.id, by=ALICE)
    plan = make_plan(Action.REQUEUE, scope={"partition": "gpu"})
    assert grants.match(plan, "spot-interruption") is None
    assert grants.list() == [] and len(grants.list(include_inactive=True)) == 1


def test_budget_is_counted_atomically(grants: GrantStore, audit: AuditLog) -> None:
    grant = grants.grant(
        Action.REQUEUE, GPU_SPOT, max_per_hour=3, expires="1h", reason="spot", granted_by=ALICE
    )
    plan = make_plan(Action.REQUEUE, scope={"partition": "gpu"})
    grants.evidence.record("spot-interruption", plan.target, source="test")
    barrier = threading.Barrier(6)
    claimed: list[str | None] = []

    def run() -> None:
        barrier.wait()
        got = grants.claim(plan, AGENT, "spot-interruption")
        claimed.append(got.id if got else None)

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert claimed.count(grant.id) == 3 and claimed.count(None) == 3
    assert grants.get(grant.id).used_last_hour == 3
    uses = [e for e in audit.entries(subject=grant.id) if e.kind == "grant.used"]
    assert len(uses) == 3 and all(e.data["plan_hash"] == plan.hash for e in uses)


def test_budget_refills_and_grant_expires(
    grants: GrantStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    grants.grant(
        Action.REQUEUE, GPU_SPOT, max_per_hour=1, expires="2h", reason="spot", granted_by=ALICE
    )
    plan = make_plan(Action.REQUEUE, scope={"partition": "gpu"})
    start = utcnow()
    grants.evidence.record("spot-interruption", plan.target, source="test",
                           expires_at=start + timedelta(hours=3))  # fmt: skip
    assert grants.claim(plan, AGENT, "spot-interruption") is not None
    assert grants.claim(plan, AGENT, "spot-interruption") is None
    monkeypatch.setattr(grants_mod, "utcnow", lambda: start + timedelta(minutes=61))
    assert grants.claim(plan, AGENT, "spot-interruption") is not None
    monkeypatch.setattr(grants_mod, "utcnow", lambda: start + timedelta(hours=2, minutes=1))
    assert grants.claim(plan, AGENT, "spot-interruption") is None


# -- audit ----------------------------------------------------------------------------------


def filled(audit: AuditLog, n: int = 5) -> AuditLog:
    for i in range(n):
        audit.append("test", principal="person:alice", subject=f"s{i}", data={"i": i})
    return audit


def tamper(db: Database, sql: str, *args: object) -> None:
    conn = sqlite3.connect(db.path)
    conn.execute(sql, args)
    conn.commit()
    conn.close()


def test_intact_chain_verifies(audit: AuditLog) -> None:
    result = filled(audit).verify()
    assert result.ok and result.entries == 5
    assert audit.head().seq == 5


def test_edit_is_detected(audit: AuditLog, db: Database) -> None:
    filled(audit)
    tamper(db, "UPDATE audit SET data='{\"i\": 99}' WHERE seq=3")
    result = audit.verify()
    assert not result.ok and result.first_bad_seq == 3 and "modified" in result.problem


def test_delete_middle_is_detected(audit: AuditLog, db: Database) -> None:
    filled(audit)
    tamper(db, "DELETE FROM audit WHERE seq=2")
    result = audit.verify()
    assert not result.ok and result.first_bad_seq == 2 and "missing" in result.problem


@pytest.mark.parametrize("count", [1, 2])
def test_delete_last_is_detected(audit: AuditLog, db: Database, count: int) -> None:
    filled(audit)
    tamper(db, "DELETE FROM audit WHERE seq>?", 5 - count)
    result = audit.verify()
    assert not result.ok and result.first_bad_seq == 6 - count
    assert "deleted from the end" in result.problem


def test_delete_last_and_head_is_detected(audit: AuditLog, db: Database) -> None:
    filled(audit)
    tamper(db, "DELETE FROM audit WHERE seq=5")
    tamper(db, "DELETE FROM audit_head")
    result = audit.verify()
    assert not result.ok and "head record is missing" in result.problem


def test_delete_last_and_rewrite_head_is_detected(audit: AuditLog, db: Database) -> None:
    filled(audit)
    row = sqlite3.connect(db.path).execute("SELECT hash FROM audit WHERE seq=4").fetchone()
    tamper(db, "DELETE FROM audit WHERE seq=5")
    tamper(db, "UPDATE audit_head SET seq=4, hash=?", row[0])
    result = audit.verify()
    assert not result.ok and result.first_bad_seq == 5 and "numbered 5" in result.problem


def test_swap_is_detected(audit: AuditLog, db: Database) -> None:
    filled(audit)
    conn = sqlite3.connect(db.path)
    two = conn.execute("SELECT kind, subject, data FROM audit WHERE seq=2").fetchone()
    three = conn.execute("SELECT kind, subject, data FROM audit WHERE seq=3").fetchone()
    conn.execute("UPDATE audit SET kind=?, subject=?, data=? WHERE seq=3", two)
    conn.execute("UPDATE audit SET kind=?, subject=?, data=? WHERE seq=2", three)
    conn.commit()
    conn.close()
    result = audit.verify()
    assert not result.ok and result.first_bad_seq == 2


def test_appends_after_verification_keep_working(audit: AuditLog) -> None:
    filled(audit, 2)
    assert audit.verify().ok
    filled(audit, 2)
    assert audit.verify().ok and audit.verify().entries == 4
