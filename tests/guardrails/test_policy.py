"""Policy: documented defaults, rule matching (scope, GPUs, time windows), limits, dry-run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core import errors
from core.guardrails.policy import (
    Outcome,
    PolicyConfig,
    PolicyContext,
    PoolLoad,
    evaluate,
)
from core.model import Action, Preconditions, RiskClass, WorkloadState
from tests.guardrails.conftest import make_plan

# A Wednesday, 14:30 UTC.
WED_AFTERNOON = datetime(2025, 6, 11, 14, 30, tzinfo=UTC)


def ctx(**kw: object) -> PolicyContext:
    return PolicyContext.model_validate({"now": WED_AFTERNOON, **kw})


@pytest.mark.parametrize(
    ("action", "params", "outcome", "risk"),
    [
        (Action.CHECKPOINT, {}, Outcome.ALLOW, RiskClass.SAFE),
        (Action.CHECKPOINT, {"stop": True}, Outcome.APPROVE, RiskClass.DISRUPTIVE),
        (Action.MIGRATE, {}, Outcome.APPROVE, RiskClass.DISRUPTIVE),
        (Action.PREEMPT, {}, Outcome.APPROVE, RiskClass.DISRUPTIVE),
        (Action.RESUME, {}, Outcome.APPROVE, RiskClass.DISRUPTIVE),
        (Action.RESTORE, {}, Outcome.APPROVE, RiskClass.DISRUPTIVE),
        (Action.FAILOVER, {}, Outcome.APPROVE, RiskClass.DISRUPTIVE),
        (Action.REQUEUE, {}, Outcome.APPROVE, RiskClass.DISRUPTIVE),
        (Action.DRAIN_NODE, {"save": True}, Outcome.APPROVE, RiskClass.DISRUPTIVE),
        (Action.DRAIN_NODE, {"save": False}, Outcome.APPROVE, RiskClass.DESTRUCTIVE),
        (Action.KILL, {}, Outcome.APPROVE, RiskClass.DESTRUCTIVE),
        (Action.SCALE, {"down_without_save": True}, Outcome.APPROVE, RiskClass.DESTRUCTIVE),
        (Action.DELETE_CHECKPOINT, {}, Outcome.APPROVE, RiskClass.DESTRUCTIVE),
    ],
)
def test_defaults(
    action: Action, params: dict[str, object], outcome: Outcome, risk: RiskClass
) -> None:
    decision = evaluate(make_plan(action, params=params), PolicyConfig(), ctx())
    assert decision.outcome is outcome
    assert decision.risk is risk
    assert decision.rule_id == f"default:{risk.value}"
    assert decision.reason.endswith(".") and action.value in decision.reason


def test_declared_risk_cannot_understate_the_action() -> None:
    plan = make_plan(Action.KILL).model_copy(update={"risk": RiskClass.SAFE})
    plan = plan.sealed()
    assert evaluate(plan, PolicyConfig(), ctx()).risk is RiskClass.DESTRUCTIVE


def test_newest_good_checkpoint_of_live_workload_is_protected() -> None:
    plan = make_plan(Action.DELETE_CHECKPOINT, target="local:train-1/7")
    allow_all = PolicyConfig.from_mapping(
        {"rules": [{"id": "yolo", "outcome": "allow", "risk": ["destructive"]}]}
    )
    decision = evaluate(plan, allow_all, ctx(deletes_newest_good_checkpoint=True))
    assert decision.outcome is Outcome.DENY
    assert decision.rule_id == "protect-newest-checkpoint"
    assert evaluate(plan, allow_all, ctx()).outcome is Outcome.ALLOW


def test_first_matching_rule_wins_with_scope_labels_and_gpus() -> None:
    policy = PolicyConfig.from_mapping(
        {
            "rules": [
                {
                    "id": "prod-no-kill",
                    "outcome": "deny",
                    "actions": ["kill"],
                    "namespaces": ["prod"],
                },
                {"id": "big-gpu", "outcome": "approve", "gpus_min": 4},
                {
                    "id": "dev-free",
                    "outcome": "allow",
                    "namespaces": ["dev"],
                    "workload_labels": {"team": "ml"},
                },
                {"id": "spot-nodes", "outcome": "allow", "node_labels": {"pool": "spot"}},
            ]
        }
    )
    dev = {"namespace": "dev", "labels": {"team": "ml"}, "gpus": 1}
    assert evaluate(make_plan(scope=dev), policy, ctx()).rule_id == "dev-free"
    assert evaluate(make_plan(scope={**dev, "gpus": 8}), policy, ctx()).rule_id == "big-gpu"
    assert evaluate(make_plan(Action.KILL, scope={"namespace": "prod"}), policy, ctx()).outcome is (
        Outcome.DENY
    )
    # A label value that differs, or a missing label, does not match.
    other_team = {"namespace": "dev", "labels": {"team": "web"}}
    assert evaluate(make_plan(scope=other_team), policy, ctx()).rule_id == "default:disruptive"
    spot = {"node_labels": {"pool": "spot"}}
    assert evaluate(make_plan(scope=spot), policy, ctx()).rule_id == "spot-nodes"


def test_time_windows_in_utc_including_wraparound() -> None:
    policy = PolicyConfig.from_mapping(
        {
            "rules": [
                {
                    "id": "office",
                    "outcome": "allow",
                    "when": [{"days": ["mon", "tue", "wed", "thu", "fri"], "hours": "9-17"}],
                },
                {"id": "night", "outcome": "deny", "when": [{"days": ["wed"], "hours": "22-6"}]},
            ]
        }
    )
    plan = make_plan()
    assert evaluate(plan, policy, ctx()).rule_id == "office"
    evening = datetime(2025, 6, 11, 18, 0, tzinfo=UTC)
    assert evaluate(plan, policy, ctx(now=evening)).rule_id == "default:disruptive"
    late = datetime(2025, 6, 11, 23, 0, tzinfo=UTC)
    assert evaluate(plan, policy, ctx(now=late)).rule_id == "night"
    # 03:00 Thursday belongs to Wednesday's night window.
    early_thu = datetime(2025, 6, 12, 3, 0, tzinfo=UTC)
    assert evaluate(plan, policy, ctx(now=early_thu)).rule_id == "night"
    saturday = datetime(2025, 6, 14, 10, 0, tzinfo=UTC)
    assert evaluate(plan, policy, ctx(now=saturday)).rule_id == "default:disruptive"


def test_limits_deny_even_when_a_rule_allows() -> None:
    policy = PolicyConfig.from_mapping(
        {
            "rules": [{"id": "all", "outcome": "allow"}],
            "limits": {
                "max_concurrent_disruptive": 1,
                "rate_per_hour": {"disruptive": 3},
                "max_blast_radius": 0.25,
            },
        }
    )
    plan = make_plan(scope={"partition": "gpu"})
    assert evaluate(plan, policy, ctx()).outcome is Outcome.ALLOW
    busy = evaluate(plan, policy, ctx(running_disruptive=1))
    assert (busy.outcome, busy.rule_id) == (Outcome.DENY, "limit:concurrency")
    rate = evaluate(plan, policy, ctx(actions_last_hour={"disruptive": 3}))
    assert (rate.outcome, rate.rule_id) == (Outcome.DENY, "limit:rate-disruptive")
    # 8 workloads at 25%: two may be disrupted at once.
    one = ctx(pools={"gpu": PoolLoad(workloads=8, workloads_disrupted=1)})
    two = ctx(pools={"gpu": PoolLoad(workloads=8, workloads_disrupted=2)})
    assert evaluate(plan, policy, one).outcome is Outcome.ALLOW
    blast = evaluate(plan, policy, two)
    assert (blast.outcome, blast.rule_id) == (Outcome.DENY, "limit:blast-radius")
    assert "gpu" in blast.reason
    # Draining counts nodes, and one node is always allowed in a small pool.
    drain = make_plan(Action.DRAIN_NODE, params={"save": True}, scope={"partition": "gpu"})
    small = ctx(pools={"gpu": PoolLoad(nodes=2, nodes_drained=0)})
    assert evaluate(drain, policy, small).outcome is Outcome.ALLOW
    small_busy = ctx(pools={"gpu": PoolLoad(nodes=2, nodes_drained=1)})
    assert evaluate(drain, policy, small_busy).rule_id == "limit:blast-radius"
    # Restoring a workload that is already down disrupts nothing: not held back by the
    # blast radius (its recorded state is re-checked before the first step).
    dead = make_plan(Action.FAILOVER, scope={"partition": "gpu"}).model_copy(
        update={
            "preconditions": Preconditions(workload="local:train-1", state=WorkloadState.FAILED)
        }
    )
    assert evaluate(dead.sealed(), policy, two).outcome is Outcome.ALLOW
    alive = make_plan(Action.FAILOVER, scope={"partition": "gpu"})  # a spot notice's failover
    assert evaluate(alive, policy, two).rule_id == "limit:blast-radius"
    # Safe checkpoints are not held back by the disruptive limits.
    safe = make_plan(Action.CHECKPOINT, scope={"partition": "gpu"})
    assert evaluate(safe, policy, ctx(running_disruptive=5)).outcome is Outcome.ALLOW


def test_dry_run_denies_every_mutation_with_a_reason() -> None:
    policy = PolicyConfig(dry_run=True)
    decision = evaluate(make_plan(Action.CHECKPOINT), policy, ctx())
    assert decision.outcome is Outcome.DENY and decision.dry_run
    assert "Dry-run" in decision.reason


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"rules": [{"id": "x", "outcome": "maybe"}]}, "policy.rules.0.outcome"),
        (
            {"rules": [{"id": "x", "outcome": "allow", "namespace": ["a"]}]},
            "policy.rules.0.namespace",
        ),
        ({"limits": {"max_blast_radius": 2}}, "policy.limits.max_blast_radius"),
        (
            {"rules": [{"id": "x", "outcome": "allow", "when": [{"hours": "25-3"}]}]},
            "policy.rules.0.when.0.hours",
        ),
        ({"dryrun": True}, "policy.dryrun"),
        ({"defaults": {"read": "deny"}}, "defaults.read"),
        ({"rules": [{"id": "a", "outcome": "allow"}, {"id": "a", "outcome": "deny"}]}, "'a'"),
    ],
)
def test_validation_errors_name_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(errors.InvalidInput) as info:
        PolicyConfig.from_mapping(data)
    assert key in info.value.message


def test_rules_can_match_who_asks() -> None:
    policy = PolicyConfig.from_mapping(
        {
            "rules": [
                {
                    "id": "people-at-cli",
                    "outcome": "allow",
                    "principals": ["person"],
                    "risk": ["disruptive"],
                }
            ]
        }
    )
    plan = make_plan()
    assert evaluate(plan, policy, ctx(principal_kind="person")).rule_id == "people-at-cli"
    assert evaluate(plan, policy, ctx(principal_kind="agent")).rule_id == "default:disruptive"
    assert evaluate(plan, policy, ctx()).rule_id == "default:disruptive"
