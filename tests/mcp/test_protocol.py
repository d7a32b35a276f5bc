"""What clawpoint claims of MCP revision 2026-07-28 (docs/agents.md), through the installed
``clawpoint serve``: both protocol eras are served, requests over HTTP are stateless (no
handshake, no session), the tool, prompt and resource lists are the same for every session
and carry a cache hint, and no deprecated feature (Logging) or task extension is declared.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters

from core.config import Settings
from mcp_server.server import LIST_TTL_MS
from tests.mcp.test_stdio_and_http import http_server  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
CLAWPOINT = Path(sys.executable).parent / "clawpoint"
MODERN = "2026-07-28"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _serve(settings: Settings) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update({"CLAWPOINT_HOME": str(settings.home), "PYTHONPATH": str(ROOT)})
    return StdioServerParameters(command=str(CLAWPOINT), args=["serve"], env=env)


def _wire(items: list[Any]) -> str:
    return json.dumps([i.model_dump(mode="json", by_alias=True, exclude_none=True) for i in items])


@pytest.mark.anyio
async def test_both_eras_and_lists_a_client_may_cache(settings: Settings) -> None:
    seen: list[tuple[str, str]] = []
    for mode in ("auto", "legacy", "auto"):  # three server processes, one session each
        async with Client(_serve(settings), mode=mode) as client:
            tools = await client.list_tools()
            prompts = await client.list_prompts()
            resources = await client.list_resources()
            again = await client.list_tools()
            assert _wire(again.tools) == _wire(tools.tools)
            caps = client.server_capabilities
            assert caps.logging is None and caps.tasks is None  # deprecated / an extension
            if mode == "auto":
                assert client.protocol_version == MODERN
                for listed in (tools, prompts, resources):
                    assert (listed.ttl_ms, listed.cache_scope) == (LIST_TTL_MS, "private")
            else:
                assert client.protocol_version == "2025-11-25"
            called = await client.call_tool("list_nodes", {})
            assert not called.is_error and called.structured_content
            seen.append((_wire(tools.tools), _wire(prompts.prompts)))
    assert seen[0] == seen[2]  # byte for byte, in the same order, in every modern session
    assert [json.loads(s) for s in seen[1]] == [json.loads(s) for s in seen[0]]  # and legacy
    names = [t["name"] for t in json.loads(seen[0][0])]
    assert len(names) >= 25 and len(set(names)) == len(names)


def _post(url: str, token: str, method: str, params: dict[str, Any], **headers: str) -> Any:
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip
    return httpx2.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}},
        headers={"Accept": "application/json, text/event-stream", "Mcp-Method": method,
                 "MCP-Protocol-Version": MODERN, "Authorization": f"Bearer {token}", **headers},
        timeout=60,
    )  # fmt: skip


def test_http_requests_are_stateless(http_server: tuple[str, str]) -> None:  # noqa: F811
    """Each POST stands alone: no initialize first, no session id given or needed."""
    url, token = http_server
    listed = _post(url, token, "tools/list", {})
    assert listed.status_code == 200, listed.text
    assert "mcp-session-id" not in {k.lower() for k in listed.headers}
    result = listed.json()["result"]
    assert (result["ttlMs"], result["cacheScope"]) == (LIST_TTL_MS, "private")
    called = _post(url, token, "tools/call", {"name": "list_nodes", "arguments": {}},
                   **{"Mcp-Name": "list_nodes"})  # fmt: skip
    assert called.status_code == 200, called.text
    assert called.json()["result"]["structuredContent"]["total"] == 2
    found = _post(url, token, "server/discover", {})
    assert found.status_code == 200 and MODERN in json.dumps(found.json()["result"])
