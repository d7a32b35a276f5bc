"""Undrain needs a person when it undoes a person's drain or returns a down node.

The policy reads the facts the service records in the undrain plan's scope
(``core.service.drains``: ``drained_by``, ``node_down``); the journal side is covered
through the installed command in tests/backends/test_undrain.py. Here: every combination,
for each principal kind, on the Slurm backend too (where RESUME also revives a DOWN node).
"""

from __future__ import annotations

from typing import Any

import pytest

from core.guardrails.policy import Outcome, PolicyConfig, PolicyContext, evaluate
from core.model import Action, PrincipalKind
from tests.guardrails.conftest import make_plan


def _decide(scope: dict[str, Any], kind: PrincipalKind, backend: str = "local") -> Any:
    plan = make_plan(Action.UNDRAIN_NODE, target=f"{backend}:n1", scope=scope, backend=backend)
    return evaluate(plan, PolicyConfig(), PolicyContext(principal_kind=kind))


@pytest.mark.parametrize("backend", ["local", "slurm", "k8s"])
@pytest.mark.parametrize("kind", [PrincipalKind.AGENT, PrincipalKind.SCHEDULER])
def test_others_undo_only_a_drain_of_clawpoints_own_on_a_node_that_is_up(
    backend: str, kind: PrincipalKind
) -> None:
    for by in ("agent", "scheduler"):
        assert _decide({"drained_by": by, "node_down": False}, kind, backend).outcome is (
            Outcome.ALLOW
        )
    for scope, said in [
        ({"drained_by": "person", "node_down": False}, "undoing a drain made by a person"),
        ({"drained_by": "unknown", "node_down": False}, "someone outside clawpoint"),
        ({}, "someone outside clawpoint"),  # no facts: fail closed
        ({"drained_by": "agent", "node_down": True}, "returning a down node to service"),
    ]:
        d = _decide(scope, kind, backend)
        assert (d.outcome, d.approval) == (Outcome.APPROVE, "out-of-band"), (scope, d)
        assert said in d.reason and d.rule_id.startswith("person-only:"), d.reason


def test_a_person_undrains_anything_as_before() -> None:
    for scope in ({"drained_by": "person", "node_down": True}, {}):
        assert _decide(scope, PrincipalKind.PERSON, "slurm").outcome is Outcome.ALLOW
