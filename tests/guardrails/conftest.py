"""Shared fixtures: a fresh state database per test, stores on it, and plan builders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.actions import risk_of
from core.guardrails.approvals import ApprovalsConfig, ApprovalStore
from core.guardrails.audit import AuditLog
from core.guardrails.grants import GrantStore
from core.guardrails.schema import install
from core.model import Action, Plan, PlanStep, Principal, PrincipalKind
from core.state.db import Database

AGENT = Principal(id="agent-1", kind=PrincipalKind.AGENT)
OTHER_AGENT = Principal(id="agent-2", kind=PrincipalKind.AGENT)
ALICE = Principal(id="alice", kind=PrincipalKind.PERSON)
BOB = Principal(id="bob", kind=PrincipalKind.PERSON)
SECRET = b"k" * 32


def make_plan(
    action: Action = Action.MIGRATE,
    *,
    target: str = "local:train-1",
    params: dict[str, Any] | None = None,
    scope: dict[str, Any] | None = None,
    backend: str = "local",
) -> Plan:
    params = params or {}
    return Plan(
        action=action,
        target=target,
        backend=backend,
        params=params,
        steps=[
            PlanStep(name="save", op="checkpoint", description="Checkpoint train-1"),
            PlanStep(name="move", op="restore", description="Restore it on node-b"),
        ],
        risk=risk_of(action, params),
        summary=f"{action.value} {target} to node-b",
        expected_pause_s=40,
        saves="the full process state",
        rollback="restore the previous checkpoint on node-a",
        cost_effect="saves about $2.14/hour",
        scope=scope or {},
    ).sealed()


@pytest.fixture
def db(tmp_path: Path) -> Database:
    install()
    return Database(tmp_path / "state.db")


@pytest.fixture
def audit(db: Database) -> AuditLog:
    return AuditLog(db)


@pytest.fixture
def approvals(db: Database, audit: AuditLog) -> ApprovalStore:
    return ApprovalStore(db, secret=SECRET, audit=audit, config=ApprovalsConfig())


@pytest.fixture
def grants(db: Database, audit: AuditLog) -> GrantStore:
    return GrantStore(db, audit=audit)
