"""The tool list stays cheap for an agent's context, and docs/mcp-tools.md matches it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from core.service.facade import Service
from mcp_server.server import build_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_tool_schemas_fit_in_8000_tokens(service: Service) -> None:
    async with Client(build_server(service)) as client:
        tools = (await client.list_tools()).tools
    chars = sum(
        len(t.name)
        + len(t.description or "")
        + len(json.dumps(t.input_schema))
        + len(json.dumps(t.output_schema or {}))
        for t in tools
    )
    assert len(tools) >= 20
    assert chars / 4 < 8000, f"tool list costs ~{chars // 4} tokens"


def test_mcp_tools_doc_is_current() -> None:
    fresh = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-mcp-docs.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    committed = (ROOT / "docs" / "mcp-tools.md").read_text()
    assert fresh == committed, "docs/mcp-tools.md is stale: run 'make docs'"
