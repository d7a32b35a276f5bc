"""Bad input from an agent, through the SDK's client and the installed ``clawpoint serve``:
a tool error that names the problem and the valid choices, never an internal error."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

CLAWPOINT = Path(sys.executable).parent / "clawpoint"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.anyio
async def test_unknown_approval_status_and_non_ascii_ids_are_clear_tool_errors(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env["CLAWPOINT_HOME"] = str(tmp_path / "home")
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])  # this checkout's code
    params = StdioServerParameters(command=str(CLAWPOINT), args=["serve"], env=env)
    async with Client(params) as client:
        bad = await client.call_tool("list_approvals", {"status": "x"})
        assert bad.is_error
        text = _text(bad)
        assert "status must be one of" in text and "(got 'x')" in text, text
        for status in ("pending", "approved", "denied", "expired", "used", "locked"):
            assert status in text
        good = await client.call_tool("list_approvals", {"status": "pending"})
        assert not good.is_error, _text(good)
        for ref in ("local:x\u0663", "local:tr\u0430in"):  # Arabic-Indic 3, Cyrillic a
            res = await client.call_tool("list_checkpoints", {"workload": ref})
            assert res.is_error and "malformed" in _text(res), _text(res)
