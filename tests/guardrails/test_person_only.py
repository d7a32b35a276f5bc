"""Person-only parameters (``core.actions.ActionSpec.person_only``, failover's ``fenced``):
a fact only a person can vouch for. Whatever the rules and standing grants say, a plan that
sets one needs a person's out-of-band approval; the agent's own client cannot give it."""

from __future__ import annotations

import pytest

from core import errors
from core.guardrails.approvals import ApprovalStore
from core.guardrails.audit import AuditLog
from core.guardrails.grants import GrantStore
from core.guardrails.guard import Guard
from core.guardrails.policy import Outcome, PolicyConfig, PolicyContext, PolicyRule
from core.model import Action, Preconditions, Principal, PrincipalKind, RiskClass, WorkloadState
from tests.guardrails.conftest import ALICE, make_plan

AGENT = Principal(id="agent-1", kind=PrincipalKind.AGENT)
CLIENT = Principal(id="elicitation:client@agent-1", kind=PrincipalKind.CLIENT_USER)


def test_a_grant_covers_failover_but_never_a_fenced_one(
    approvals: ApprovalStore, grants: GrantStore, audit: AuditLog
) -> None:
    rules = [PolicyRule(id="failover-ok", outcome=Outcome.ALLOW, actions=[Action.FAILOVER])]
    guard = Guard(policy=PolicyConfig(), approvals=approvals, grants=grants, audit=audit)
    grants.grant(Action.FAILOVER, {}, max_per_hour=5, expires="1h", reason="lost nodes",
                 granted_by=ALICE)  # fmt: skip
    plain = make_plan(Action.FAILOVER, target="k8s:n2", backend="k8s")
    fenced = make_plan(Action.FAILOVER, target="k8s:n2", backend="k8s", params={"fenced": True})
    assert fenced.risk is RiskClass.DESTRUCTIVE

    assert guard.decide(plain, AGENT, PolicyContext()).outcome is Outcome.ALLOW  # the grant
    decision = guard.decide(fenced, AGENT, PolicyContext())
    assert decision.outcome is Outcome.APPROVE and decision.grant_id is None
    assert decision.approval == "out-of-band"
    guard.policy = PolicyConfig(rules=rules)
    assert guard.decide(fenced, AGENT, PolicyContext()).outcome is Outcome.APPROVE

    view, _paths = guard.request_approval(fenced, AGENT, "n2 is off", needs=decision.approval)
    with pytest.raises(errors.PolicyDenied):
        approvals.confirm_by_client(view.id, CLIENT, approved=True, note="sure")


def test_a_workload_a_person_killed_is_brought_back_only_by_a_person(
    approvals: ApprovalStore, grants: GrantStore, audit: AuditLog
) -> None:
    rules = [PolicyRule(id="failover-ok", outcome=Outcome.ALLOW, actions=[Action.FAILOVER])]
    guard = Guard(policy=PolicyConfig(rules=rules), approvals=approvals, grants=grants,
                  audit=audit)  # fmt: skip
    grants.grant(Action.FAILOVER, {}, max_per_hour=5, expires="1h", reason="dead nodes",
                 granted_by=ALICE)  # fmt: skip
    died = make_plan(Action.FAILOVER).model_copy(
        update={
            "preconditions": Preconditions(workload="local:train-1", state=WorkloadState.FAILED)
        }
    )
    killed = died.model_copy(
        update={"preconditions": died.preconditions.model_copy(update={"killed": True})}
    )
    assert guard.decide(died.sealed(), AGENT, PolicyContext()).outcome is Outcome.ALLOW
    decision = guard.decide(killed.sealed(), AGENT, PolicyContext())
    assert decision.outcome is Outcome.APPROVE and decision.grant_id is None
    assert decision.approval == "out-of-band" and "killed" in decision.reason
    assert killed.sealed().hash != died.sealed().hash  # the approval names exactly this plan
