"""Every next step the code names in the neutral form (``core.errors.step``) is a tool the
live server lists and, rendered for the command line (``core.cli.wording``), a command the
installed script parses; and each interface sees its own words.

The steps are read from core/ and mcp_server/ with ``ast``: each ``errors.step("NAME",
KEY=VALUE, ...)`` call, a value that is not a constant standing for an id (``X``).
"""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest

from core import errors
from core.cli import wording
from tests.backends.named import ROOT, InstalledCli


def _steps() -> list[tuple[str, str, dict[str, str]]]:
    found: list[tuple[str, str, dict[str, str]]] = []
    for root in ("core", "mcp_server"):
        for path in sorted((ROOT / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "step" and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "errors"):  # fmt: skip
                    continue
                first = node.args[0]
                assert isinstance(first, ast.Constant) and isinstance(first.value, str)
                args = {
                    str(k.arg): (str(k.value.value).lower() if isinstance(k.value.value, bool)
                                 else str(k.value.value))
                    if isinstance(k.value, ast.Constant) else "X"
                    for k in node.keywords
                }  # fmt: skip
                where = f"{Path(path).relative_to(ROOT)}:{node.lineno}"
                found.append((where, first.value, args))
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
