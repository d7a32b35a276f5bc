"""Every hint and rollback written in the code names real commands and real tools.

The texts come from core/ and mcp_server/ (``hint=`` and ``rollback=``, read with ``ast``);
the commands are checked against the installed console script's ``--help``, the tools
against what a live ``clawpoint serve`` lists to a real MCP client. The plans the contract
suite builds at run time are checked the same way (tests/backends/test_contract.py).
"""

from __future__ import annotations

import pytest

from tests.backends.named import (
    NOT_TOOLS,
    InstalledCli,
    SourceText,
    command_refs,
    config_keys,
    source_texts,
    tool_like,
)


@pytest.fixture(scope="module")
def texts() -> list[SourceText]:
    found = source_texts()
    assert len(found) > 100, "the scan found too few hints: is it still reading the code?"
    return found


def test_commands_named_in_hints_and_rollbacks_exist(
    texts: list[SourceText], cli: InstalledCli
) -> None:
    named = [(t, ref) for t in texts for ref in command_refs(t.text)]
    assert len(named) > 30
    problems = [
        f"{t.where} ({t.kind}) {t.text!r}: {problem}"
        for t, ref in named
        if (problem := cli.problem(ref))
    ]
    assert not problems, "\n".join(problems)


def test_tools_named_in_hints_and_rollbacks_exist(
    texts: list[SourceText], live_tools: set[str]
) -> None:
    keys = config_keys() | NOT_TOOLS
    named = {(t.where, t.text, n) for t in texts for n in tool_like(t.text, not_tools=keys)}
    assert any(n == "list_nodes" for _, _, n in named), "the scan must see tool names"
    problems = [f"{w} {text!r}: no MCP tool {n}" for w, text, n in named if n not in live_tools]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("text", "refs"),
    [
        ("undrain: clawpoint nodes undrain local:node-a", [["nodes", "undrain", "local:node-a"]]),
        ("pick a healthy node ('clawpoint nodes')", [["nodes"]]),
        ("list the jobs (clawpoint workloads --backend slurm) and pass", [["workloads", "--backend", "slurm"]]),
        ("omit it to let clawpoint pick one", []),
        ("check the wrapper's log under the clawpoint log directory", []),
        ("upgrade clawpoint, or point CLAWPOINT_HOME elsewhere", []),
        ("see /tmp/clawpoint-slurm-job-1 and clawpoint_x", []),
        ("the audit log (resource clawpoint://audit/recent)", []),
    ],
)  # fmt: skip
def test_references_are_read_from_text(text: str, refs: list[list[str]]) -> None:
    assert command_refs(text) == refs


@pytest.mark.parametrize(
    ("argv", "wrong"),
    [
        (["nodes", "undrain", "local:node-a"], None),
        (["nodes", "--backend", "slurm"], None),
        (["migrate", "X", "--to", "Y"], None),
        (["run", "--name", "N", "--", "python", "x.py"], None),
        (["approvals", "approve", "ID"], None),
        (["approvals"], None),
        (["undrain", "X"], "not a clawpoint command"),
        (["nodes", "frobnicate", "X"], "no command 'frobnicate'"),
        (["migrate", "X", "--too", "Y"], "no option --too"),
        (["preempt", "X", "Y"], "takes 1 argument(s), not 2"),
        (["config", "chek"], "no command 'chek'"),
    ],
)
def test_the_cli_check_can_fail(cli: InstalledCli, argv: list[str], wrong: str | None) -> None:
    problem = cli.problem(argv)
    if wrong is None:
        assert problem is None
    else:
        assert problem is not None and wrong in problem


def test_the_tool_check_sees_unknown_names(live_tools: set[str]) -> None:
    keys = config_keys() | NOT_TOOLS
    found = tool_like(
        "read it with runbook_status, or undrain_nodes; set checkpoint_dir", not_tools=keys
    )
    assert found - live_tools == {"undrain_nodes"}
