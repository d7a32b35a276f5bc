"""What each client shows the model of a tool result, through the installed ``clawpoint
serve`` and the real clients: the SDK's, mcporter's ``call`` and OpenClaw's projection.

A result's full data travels once, as structured content; its text copy is a one-line
summary (``mcp_server.result_text``), except for a client whose protocol has no structured
content (before 2025-06-18) or when ``[mcp] result_text = "json"``.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from bench import tokens
from core.config import Settings
from core.service.facade import Service
from tests.service.conftest import PERSON, counter, wait_step

ROOT = Path(__file__).resolve().parents[2]
CLAWPOINT = Path(sys.executable).parent / "clawpoint"
NODE_BIN = Path(os.environ.get("CLAWPOINT_NODE_BIN", "/opt/clawpoint-node/bin"))
OPENCLAW_DIST = NODE_BIN.parent / "lib" / "node_modules" / "openclaw" / "dist"
NODES = '[[local.nodes]]\nname = "node-a"\n[[local.nodes]]\nname = "node-b"\nspot = true\n'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _home(settings: Settings, extra: str = "") -> Path:
    settings.home.mkdir(parents=True, exist_ok=True)
    (settings.home / "config.toml").write_text(NODES + extra)
    return settings.home


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update({"CLAWPOINT_HOME": str(home), "PYTHONPATH": str(ROOT)})
    return env


def _serve(home: Path) -> StdioServerParameters:
    return StdioServerParameters(command=str(CLAWPOINT), args=["serve"], env=_env(home))


def _text(result: Any) -> str:
    return tokens.result_text(result)


@pytest.mark.anyio
async def test_the_text_copy_is_a_one_line_summary_of_the_structured_content(
    settings: Settings,
) -> None:
    async with Client(_serve(_home(settings))) as client:
        assert client.protocol_version == "2026-07-28"
        listed = await client.call_tool("list_nodes", {})
        data = listed.structured_content
        assert data is not None and [n["id"] for n in data["nodes"]] == [
            "local:node-a", "local:node-b"
        ]  # fmt: skip
        text = _text(listed)
        assert text == "2 nodes: local:node-a, local:node-b", text
        assert tokens.count(text) * 4 < tokens.count(data)  # not a second copy of the data
        bad = await client.call_tool("get_workload", {"workload": "local:nope"})
        assert bad.is_error and "Next step" in _text(bad)  # errors keep their whole message


@pytest.mark.anyio
@pytest.mark.criu
async def test_an_action_summary_names_the_approval_and_the_next_step(
    settings: Settings, service: Service, need_criu: None
) -> None:
    _home(settings)
    service.run_workload(counter(settings, "rt-w", mb=8), detach=True, principal=PERSON)
    wait_step(settings, "rt-w", 3)
    async with Client(_serve(settings.home)) as client:
        moved = await client.call_tool("migrate_workload", {"workload": "local:rt-w"})
        out = moved.structured_content
        assert out is not None and out["status"] == "approval_required", out
        text = _text(moved)
        assert "\n" not in text and text.startswith("approval_required: ")
        assert f"approval={out['approval']['id']}" in text
        assert text.endswith(f"Next: {out['next']}")
        assert tokens.count(text) < tokens.count(out) / 2


@pytest.mark.anyio
async def test_json_text_when_the_operator_asks_for_it(settings: Settings) -> None:
    home = _home(settings, '[mcp]\nresult_text = "json"\n')
    async with Client(_serve(home)) as client:
        listed = await client.call_tool("list_nodes", {})
        assert json.loads(_text(listed)) == listed.structured_content
        assert "\n" not in _text(listed) and ", " not in _text(listed)  # compact


def _rpc(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> dict[str, Any] | None:
    """Send one JSON-RPC message; for a request, its response (the lines before it are
    notifications)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()
    if "id" not in message:
        return None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1)
        if ready:
            reply = json.loads(proc.stdout.readline())
            if reply.get("id") == message["id"]:
                return dict(reply)
    raise AssertionError(f"no answer to {message['method']}")


def test_a_client_without_structured_content_gets_the_whole_data_as_text(
    settings: Settings,
) -> None:
    """Protocol 2025-03-26 has no structuredContent (its clients ignore the field): the text
    is the whole data, as before."""
    proc = subprocess.Popen(
        [str(CLAWPOINT), "serve"], env=_env(_home(settings)), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        init = _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-03-26", "capabilities": {},
            "clientInfo": {"name": "old-host", "version": "1"}}})  # fmt: skip
        assert init is not None and init["result"]["protocolVersion"] == "2025-03-26", init
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        called = _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                             "params": {"name": "list_nodes", "arguments": {}}})  # fmt: skip
        assert called is not None
        result = called["result"]
        data = json.loads(result["content"][0]["text"])
        assert data == result.get("structuredContent", data)
        assert [n["id"] for n in data["nodes"]] == ["local:node-a", "local:node-b"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _need_node_tool(name: str) -> Path:
    tool = NODE_BIN / name
    if not (tool.exists() and (NODE_BIN / "node").exists()):
        pytest.skip(f"{name} not in {NODE_BIN}: run scripts/install-node-tools.sh")
    return tool


@pytest.mark.node
def test_mcporter_call_prints_the_structured_content(settings: Settings) -> None:
    """mcporter's ``call`` (default output) prints the structured content, every field."""
    mcporter = _need_node_tool("mcporter")
    home = _home(settings)
    args = [str(mcporter), "call", "--stdio", str(CLAWPOINT), "--stdio-arg", "serve",
            "--env", f"CLAWPOINT_HOME={home}", "--env", f"PYTHONPATH={ROOT}", "list_nodes"]  # fmt: skip
    env = {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ['PATH']}", "HOME": str(home)}
    proc = subprocess.run(args, env=env, cwd=home, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = json.loads(proc.stdout)
    assert [n["id"] for n in shown["nodes"]] == ["local:node-a", "local:node-b"]
    assert shown["nodes"][1]["spot"] is True and shown["total"] == 2


def _openclaw_projection() -> tuple[Path, str]:
    """OpenClaw's module that turns an MCP tool result into what the model reads, and the
    name it exports ``projectMcpCallToolResult`` under (the bundle renames exports)."""
    for path in sorted(OPENCLAW_DIST.glob("mcp-content-*.mjs")):
        text = path.read_text(encoding="utf-8")
        found = re.search(r"projectMcpCallToolResult as (\w+)", text)
        if "function projectMcpCallToolResult(" in text and found:
            return path, found.group(1)
    pytest.skip(f"OpenClaw's MCP result projection not found in {OPENCLAW_DIST}")


@pytest.mark.node
@pytest.mark.anyio
async def test_openclaw_shows_the_model_the_structured_content_and_the_summary_once(
    settings: Settings,
) -> None:
    _need_node_tool("openclaw")
    module, name = _openclaw_projection()
    async with Client(_serve(_home(settings))) as client:
        result = await client.call_tool("list_nodes", {})
    wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    script = (
        f"const m = await import({json.dumps(str(module))}); let s = '';"
        "for await (const c of process.stdin) s += c;"
        f"console.log(JSON.stringify(m.{name}(JSON.parse(s)).content));"
    )
    proc = subprocess.run(
        [str(NODE_BIN / "node"), "--input-type=module", "-e", script], input=json.dumps(wire),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = [b["text"] for b in json.loads(proc.stdout)]
    head = "structuredContent:\n"
    assert (
        shown[0].startswith(head) and json.loads(shown[0][len(head) :]) == wire["structuredContent"]
    )
    assert shown[1:] == [_text(result)]  # the summary, once; no second copy of the data
    old = len(shown[0]) + len(json.dumps(wire["structuredContent"], separators=(",", ":")))
    assert sum(map(len, shown)) < old
    # The benchmark's copy of this projection counts what OpenClaw shows (0.0 is 0 in JS).
    ours = tokens.count(tokens.host_views(result)["openclaw"])
    assert abs(ours - tokens.count("\n".join(shown))) <= 2 * len(wire["structuredContent"]["nodes"])
