"""A drained node comes back through the interfaces people and agents use.

A drain prints its undo; running exactly that command line with the installed ``clawpoint``
returns the node to service. An agent does the same with the ``undrain_node`` MCP tool over
a real client (safe: allowed without a person by the default policy).
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

from tests.backends.named import CLAWPOINT


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(CLAWPOINT_HOME=str(home), COLUMNS="200")
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

    # The plan's own undo, run as written.
    rollback = result["plan"]["rollback"]
    line = rollback[rollback.index("clawpoint ") :]
    argv = shlex.split(line)[1:]
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


def test_an_agent_undrains_with_the_mcp_tool(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert clawpoint(home, "drain", "local:node-a", "--yes").returncode == 0
    assert node(home, "node-a")["schedulable"] is False
    params = StdioServerParameters(command=str(CLAWPOINT), args=["serve"], env=_env(home))

    async def agent() -> tuple[Any, Any]:
        async with Client(params) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            result = await client.call_tool(
                "undrain_node", {"node": "local:node-a", "reason": "maintenance done"}
            )
            return tools["undrain_node"], result

    tool, result = anyio.run(agent)
    ann = tool.annotations
    # readOnlyHint defaults to false in the MCP spec, so a lean tool list may leave it out;
    # it must never claim read-only, and must say it is not destructive.
    assert ann is not None and not ann.read_only_hint and ann.destructive_hint is False
    assert not result.is_error, result.content
    assert result.structured_content["status"] == "executed", result.structured_content
    assert node(home, "node-a")["schedulable"] is True
