"""A drained node comes back through the interfaces people and agents use.

A drain prints its undo; running exactly that command line with the installed ``clawpoint``
returns the node to service. An agent uses the ``undrain_node`` MCP tool over a real
client: it undoes its own drain without a person (safe), but undoing a person's drain, a
cordon made outside clawpoint, or returning a down node to service waits for a person.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from core.backends.local.backend import LocalBackend
from core.config import load_settings
from core.service.facade import bootstrap
from tests.backends.named import CLAWPOINT, ROOT


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    # PYTHONPATH: the installed command runs this checkout's code.
    env.update(CLAWPOINT_HOME=str(home), COLUMNS="200", PYTHONPATH=str(ROOT))
    return env


def clawpoint(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLAWPOINT), *argv], capture_output=True, text=True, env=_env(home), timeout=120
    )


def node(home: Path, name: str) -> dict[str, Any]:
    listed = clawpoint(home, "nodes", "--json")
    assert listed.returncode == 0, listed.stderr
    return next(n for n in json.loads(listed.stdout) if n["name"] == name)


def test_the_drains_undo_command_returns_the_node(tmp_path: Path) -> None:
    home = tmp_path / "home"
    drained = clawpoint(home, "drain", "local:node-b", "--yes", "--json", "--reason", "disk swap")
    assert drained.returncode == 0, drained.stderr
    result = json.loads(drained.stdout)
    assert result["status"] == "executed"
    assert node(home, "node-b")["schedulable"] is False

    # The plan's own undo, run as written (the CLI names it as the command, quoted).
    rollback = result["plan"]["rollback"]
    line = shlex.split(rollback[rollback.index("'clawpoint ") :])[0]
    argv = line.split()[1:]
    assert argv == ["nodes", "undrain", "local:node-b"]
    undone = clawpoint(home, *argv, "--json")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    back = json.loads(undone.stdout)
    assert back["status"] == "executed" and back["plan"]["risk"] == "safe"
    assert back["plan"]["action"] == "undrain_node"
    assert node(home, "node-b")["schedulable"] is True
    assert node(home, "node-b")["state"] == "up"

    again = clawpoint(home, "nodes", "undrain", "local:node-b")
    assert again.returncode == 10 and "not drained" in again.stderr
    assert "hint:" in again.stderr
    missing = clawpoint(home, "nodes", "undrain", "local:node-z", "--json")
    assert missing.returncode == 3 and json.loads(missing.stdout)["error"] == "not-found"
    # Listing still works with the group's options.
    assert clawpoint(home, "nodes", "--backend", "local").returncode == 0


def _agent_calls(home: Path, *calls: tuple[str, dict[str, Any]]) -> tuple[Any, list[Any]]:
    """Call tools in one MCP session over stdio (the installed server); the undrain tool's
    description and each result."""
    params = StdioServerParameters(command=str(CLAWPOINT), args=["serve"], env=_env(home))

    async def agent() -> tuple[Any, list[Any]]:
        async with Client(params) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            return tools["undrain_node"], [await client.call_tool(n, a) for n, a in calls]

    return anyio.run(agent)


def _undrain(node: str) -> tuple[str, dict[str, Any]]:
    return ("undrain_node", {"node": node, "reason": "maintenance done"})


def test_an_agent_does_not_undo_a_persons_drain(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert (
        clawpoint(home, "drain", "local:node-a", "--yes", "--reason", "disk swap").returncode == 0
    )
    assert node(home, "node-a")["schedulable"] is False
    tool, [result] = _agent_calls(home, _undrain("local:node-a"))
    ann = tool.annotations
    # readOnlyHint defaults to false in the MCP spec, so a lean tool list may leave it out;
    # it must never claim read-only, and must say it is not destructive.
    assert ann is not None and not ann.read_only_hint and ann.destructive_hint is False
    out = result.structured_content
    assert not result.is_error and out["status"] == "approval_required", result.content
    assert "undoing a drain made by a person" in out["message"], out["message"]
    assert node(home, "node-a")["schedulable"] is False  # still in maintenance
    # The person who can say yes undrains it at the terminal, as the drain's undo says.
    back = clawpoint(home, "nodes", "undrain", "local:node-a", "--json")
    assert back.returncode == 0, back.stdout + back.stderr
    assert node(home, "node-a")["schedulable"] is True


def test_an_agent_undoes_its_own_drain_but_not_a_down_node_or_an_unknown_cordon(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    granted = clawpoint(home, "approvals", "grant", "--action", "drain_node", "--scope",
                        "backend=local", "--reason", "agents drain empty nodes")  # fmt: skip
    assert granted.returncode == 0, granted.stderr
    drain_b = ("drain_node", {"node": "local:node-b", "reason": "agent drain"})
    _, [drained, undone] = _agent_calls(home, drain_b, _undrain("local:node-b"))
    assert drained.structured_content["status"] == "executed", drained.content
    assert undone.structured_content["status"] == "executed", undone.content
    assert node(home, "node-b")["schedulable"] is True

    # Drained by the agent, then down: returning a down node needs a person.
    _, [drained] = _agent_calls(home, drain_b)
    assert drained.structured_content["status"] == "executed", drained.content
    local = _local(home)
    local.set_node_state("node-b", health="down", reason="agent drain")
    _, [asked] = _agent_calls(home, _undrain("local:node-b"))
    out = asked.structured_content
    assert out["status"] == "approval_required", out
    assert "returning a down node to service" in out["message"]
    assert "undoing a drain" not in out["message"]  # the drain itself was the agent's

    # Cordoned outside clawpoint (no drain of ours explains it): a person decides.
    local.set_node_state("node-a", schedulable=False, reason="rack work")
    _, [asked] = _agent_calls(home, _undrain("local:node-a"))
    out = asked.structured_content
    assert out["status"] == "approval_required", out
    assert "undoing a drain made by someone outside clawpoint" in out["message"]
    assert node(home, "node-a")["schedulable"] is False


def _local(home: Path) -> LocalBackend:
    local = bootstrap(load_settings(home)).backend("local")
    assert isinstance(local, LocalBackend)
    return local
