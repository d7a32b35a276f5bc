"""Every audit record about a plan carries its hash the same way (``AuditLog.for_plan``): one
key finds a plan's whole trail, from its planning to its execution."""

from __future__ import annotations

from core.model import Action
from core.service.facade import Service
from tests.service.conftest import PERSON

PLAN_KINDS = {"plan", "decision", "approval.confirmed", "execution"}


def test_a_plans_trail_is_found_by_its_hash(service: Service) -> None:
    done = service.act(
        Action.CORDON_NODE, "local:node-b", {}, principal=PERSON, confirmed=True, reason="trail"
    )
    assert done.status == "executed", done.message
    assert done.plan is not None
    trail = [
        e for e in service.audit.entries(limit=50) if e.data.get("plan_hash") == done.plan.hash
    ]
    assert {e.kind for e in trail} >= PLAN_KINDS, [e.kind for e in trail]
    for entry in trail:
        assert entry.subject == done.plan.target
        assert entry.data["plan_hash"] == done.plan.hash
    assert "hash" not in {k for e in trail for k in e.data}
