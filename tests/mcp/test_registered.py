"""The SDK's private tool manager is read in one place (``mcp_server.registered``), and what
it reads back is exactly what a client lists."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from core.service.facade import Service
from mcp_server import registered
from mcp_server.server import build_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_only_one_module_reaches_into_the_sdk() -> None:
    reaching = [
        str(p.relative_to(ROOT))
        for d in ("core", "mcp_server", "bench")
        for p in (ROOT / d).rglob("*.py")
        if "_tool_manager" in p.read_text() and p.name != "registered.py"
    ]
    assert reaching == []


@pytest.mark.anyio
async def test_the_tools_read_back_are_the_ones_a_client_lists(service: Service) -> None:
    server = build_server(service)
    held = registered.every(server)
    async with Client(server) as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in held] == [t.name for t in listed]
    for tool in held:
        assert registered.find(server, tool.name) is tool
    assert registered.find(server, "no_such_tool") is None
