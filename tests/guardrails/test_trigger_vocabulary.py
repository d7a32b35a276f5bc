"""The triggers a standing approval may name are exactly those clawpoint observes.

A grant scoped to ``trigger=spot-interuption`` (a typo) was made and then never applied:
no signal ever records that trigger, and the person who made it believed spot notices
handled. ``core.model.TRIGGERS`` is the vocabulary; this pins it to its two producers, the
watch's signal sightings and the planner's proposals (read from the planner's source), and
checks that a grant naming anything else is refused when made.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core import errors
from core.guardrails.grants import check_scope
from core.model import TRIGGERS
from core.watch.evidence import SIGNAL_TRIGGERS

PLANNER = Path(__file__).resolve().parents[2] / "core" / "planner" / "planner.py"


def _planner_triggers() -> set[str]:
    """String triggers in the planner: ``trigger="..."``, ``trigger = "..."``, the trigger
    argument of ``self._propose(w, ACTION, TRIGGER, ...)`` and ``self._evacuate(w, TRIGGER, ...)``."""
    found: set[str] = set()

    def text(node: ast.AST) -> str | None:
        return (
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
        )

    for node in ast.walk(ast.parse(PLANNER.read_text(encoding="utf-8"))):
        if isinstance(node, ast.keyword) and node.arg == "trigger" and text(node.value):
            found.add(str(text(node.value)))
        elif (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "trigger" for t in node.targets)
            and text(node.value)
        ):
            found.add(str(text(node.value)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            at = {"_propose": 2, "_evacuate": 1}.get(node.func.attr)
            if at is not None and len(node.args) > at and text(node.args[at]):
                found.add(str(text(node.args[at])))
    return found


def test_the_vocabulary_is_what_the_signals_and_the_planner_produce() -> None:
    planner = _planner_triggers()
    assert len(planner) >= 8, f"the scan found too few triggers: {planner}"
    assert planner | SIGNAL_TRIGGERS == TRIGGERS


@pytest.mark.parametrize("trigger", [*sorted(TRIGGERS), "spot", "gpu-failed", " Node-Down "])
def test_a_grant_may_name_any_observed_trigger_or_its_alias(trigger: str) -> None:
    assert check_scope({"trigger": trigger}) == {"trigger": trigger}


@pytest.mark.parametrize(
    ("trigger", "says"),
    [("spot-interuption", "did you mean 'spot-interruption'?"), ("bogus", "names no signal"),
     ("manual", "names no signal")],
)  # fmt: skip
def test_a_trigger_nothing_observes_is_refused_when_the_grant_is_made(
    trigger: str, says: str
) -> None:
    with pytest.raises(errors.InvalidInput) as exc:
        check_scope({"trigger": trigger})
    assert says in exc.value.message and "spot-interruption" in exc.value.hint
