"""PlanScope: what policy, grants and views read of a plan is typed, and keeps its shape.

A misspelt key in a backend's scope used to pass silently and switch a rule off; the model
refuses it. The JSON a plan records (journal, audit, tool output) is the keys a backend set,
as before.
"""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from core.backends.base import PlanDraft
from core.guardrails import grants
from core.guardrails.policy import pool_of, undrain_claims
from core.model import Action, Plan, PlanScope
from tests.guardrails.conftest import make_plan


def test_a_misspelt_scope_key_fails_the_plan_instead_of_switching_a_rule_off() -> None:
    with pytest.raises(ValidationError, match="target_nodee"):
        PlanDraft(steps=[], summary="move", scope={"target_nodee": "n2"})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="gpus"):
        PlanScope(gpus="eight")  # type: ignore[arg-type]


def test_the_scope_serialises_to_the_keys_that_were_set_none_included() -> None:
    given = {"namespace": "team-a", "kind": "Pod", "node": None}
    plan = make_plan(scope=given)
    assert plan.scope.model_dump() == given
    recorded = json.loads(plan.model_dump_json())["scope"]
    assert recorded == given
    again = Plan.model_validate_json(plan.model_dump_json())
    assert again.scope == plan.scope and again.scope.model_dump() == given
    assert make_plan().model_dump()["scope"] == {}


def test_fields_set_after_drafting_are_recorded_too() -> None:
    scope = PlanScope(node="n1")
    scope.dry_run = [{"step": "cordon"}]
    assert scope.model_dump() == {"node": "n1", "dry_run": [{"step": "cordon"}]}


def test_every_grant_scope_key_reads_a_plan_field() -> None:
    """Each key a grant may name matches the field of the same name (labels by their key),
    so a grant key and the plan's scope cannot drift apart."""
    plan = make_plan(
        target="slurm:42",
        backend="slurm",
        scope={
            "namespace": "ns",
            "partition": "gpu",
            "node": "n1",
            "pool": "p",
            "labels": {"team": "a"},
            "node_labels": {"zone": "z"},
        },
    )
    wanted = {
        "backend": "slurm",
        "target": "slurm:42",
        "namespace": "ns",
        "partition": "gpu",
        "node": "n1",
        "pool": "p",
    }
    plain = [k for k in grants.SCOPE_KEYS if k not in ("trigger", grants.PRINCIPALS_KEY)]
    assert sorted(plain) == sorted(wanted)
    for key in plain:
        assert grants.scope_matches({key: wanted[key]}, plan), key
        assert not grants.scope_matches({key: "other"}, plan), key
    assert grants.scope_matches({"labels.team": "a", "node_labels.zone": "z"}, plan)
    assert not grants.scope_matches({"labels.zone": "z"}, plan)
    assert not grants.scope_matches({"node": "n1"}, make_plan())  # absent: fails closed


def test_policy_reads_the_pool_and_the_undrain_facts_from_fields() -> None:
    assert pool_of(make_plan(scope={"pool": "spot", "partition": "gpu"})) == "spot"
    assert pool_of(make_plan(scope={"partition": "gpu", "namespace": "ns"})) == "gpu"
    assert pool_of(make_plan(scope={"pool": ""}, backend="slurm")) == "slurm"
    undrain = make_plan(Action.UNDRAIN_NODE, scope={"drained_by": "agent", "node_down": True})
    assert undrain_claims(undrain.scope) == ["returning a down node to service"]
    assert undrain_claims(PlanScope()) == ["undoing a drain made by someone outside clawpoint"]
