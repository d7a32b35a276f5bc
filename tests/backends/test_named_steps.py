"""Every next step the code names in the neutral form (``core.errors.step``) is a tool the
live server lists and, rendered for the command line (``core.cli.wording``), a command the
installed script parses; and each interface sees its own words.

The steps are read from core/ and mcp_server/ with ``ast``: each ``errors.step("NAME",
KEY=VALUE, ...)`` call, a value that is not a constant standing for an id (``X``), and each
plan rollback's ``undo_step(Action.NAME, TARGET, KEY=VALUE, ...)`` (the action's tool from
the catalogue, its target as the target's argument).
"""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest

from core import errors
from core.actions import CATALOGUE
from core.cli import wording
from core.model import Action
from tests.backends.named import ROOT, InstalledCli


def _keywords(node: ast.Call) -> dict[str, str]:
    return {
        str(k.arg): (str(k.value.value).lower() if isinstance(k.value.value, bool)
                     else str(k.value.value))
        if isinstance(k.value, ast.Constant) else "X"
        for k in node.keywords
        if k.arg is not None  # a **mapping: its keys are checked where they are made
    }  # fmt: skip


def _actions(node: ast.expr) -> list[Action]:
    """The actions an ``undo_step`` call's first argument can be (``Action.X``, or either
    arm of a conditional)."""
    if isinstance(node, ast.IfExp):
        return _actions(node.body) + _actions(node.orelse)
    assert isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name), ast.dump(node)
    assert node.value.id == "Action", ast.dump(node)
    return [Action[node.attr]]


def _steps() -> list[tuple[str, str, dict[str, str]]]:
    found: list[tuple[str, str, dict[str, str]]] = []
    for root in ("core", "mcp_server"):
        for path in sorted((ROOT / root).rglob("*.py")):
            where_file = str(Path(path).relative_to(ROOT))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                where = f"{where_file}:{node.lineno}"
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name == "undo_step" and where_file != "core/actions.py":
                    for action in _actions(node.args[0]):
                        spec = CATALOGUE[action]
                        found.append((where, spec.mcp_tool,
                                      {spec.target.value: "X", **_keywords(node)}))  # fmt: skip
                    continue
                if not (isinstance(func, ast.Attribute) and func.attr == "step"
                        and isinstance(func.value, ast.Name) and func.value.id == "errors"):  # fmt: skip
                    continue
                first = node.args[0]
                if where_file == "core/actions.py" and not isinstance(first, ast.Constant):
                    continue  # undo_step itself: its callers are read above
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), where
                found.append((where, first.value, _keywords(node)))
    return found


@pytest.fixture(scope="module")
def steps() -> list[tuple[str, str, dict[str, str]]]:
    found = _steps()
    assert len(found) >= 15, "the scan found too few steps: is it still reading the code?"
    return found


def test_every_step_is_a_live_tool(
    steps: list[tuple[str, str, dict[str, str]]], live_tools: set[str]
) -> None:
    missing = [f"{where}: {name}" for where, name, _ in steps if name not in live_tools]
    assert not missing, "\n".join(missing)


def test_every_step_is_a_real_command(
    steps: list[tuple[str, str, dict[str, str]]], cli: InstalledCli
) -> None:
    problems = []
    for where, name, args in steps:
        said = wording.cli(name, args)
        assert said.startswith("'clawpoint ") and said.endswith("'"), (where, said)
        problem = cli.problem(shlex.split(said.strip("'"))[1:])
        if problem:
            problems.append(f"{where}: {said}: {problem}")
    assert not problems, "\n".join(problems)


def test_each_interface_reads_its_own_words() -> None:
    exc = errors.NotFound(
        "no workload local:a",
        hint=f"see {errors.step('list_checkpoints', workload='local:a', detail=True)} or "
        f"{errors.step('failover_workload', workload='local:a', fresh=True, to=None)}; "
        f"pass another node as {errors.arg('to')}",
    )
    assert exc.hint == (
        "see list_checkpoints(workload=local:a, detail=true) or "
        "failover_workload(workload=local:a, fresh=true); pass another node as to"
    )
    assert exc.rendered(wording.cli)[1] == (
        "see 'clawpoint checkpoints local:a --json' or 'clawpoint failover local:a --fresh'; "
        "pass another node as --to"
    )
    assert exc.to_dict(wording.cli)["hint"] == exc.rendered(wording.cli)[1]
    assert "⟦" not in str(exc) and "⟦" not in exc.to_dict()["hint"]
