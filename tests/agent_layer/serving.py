"""A real ``clawpoint serve`` for the agent-layer tests: the installed console script over
stdio, driven by the SDK's client, on a lab's CLAWPOINT_HOME.

``client(lab, gpus=...)`` also puts the fake pynvml of ``nvml_shim/`` in front of the real
one, describing this host's GPUs (``tests.signals.fake_nvml.FakeGpu`` keyword arguments), so
the server's NVML reads come from the fake and never from a real driver.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from tests.adversarial.conftest import Lab

ROOT = Path(__file__).resolve().parents[2]
SHIM = Path(__file__).resolve().parent / "nvml_shim"
CLAWPOINT = Path(sys.executable).parent / "clawpoint"
HEALTHY_AND_LOST: list[dict[str, Any]] = [
    {"uuid": "GPU-healthy"},
    {"uuid": "GPU-lost", "lost": True},
]


def server_env(lab: Lab, gpus: list[dict[str, Any]] = HEALTHY_AND_LOST) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(
        CLAWPOINT_HOME=str(lab.home),
        PYTHONPATH=f"{SHIM}{os.pathsep}{ROOT}",
        CLAWPOINT_FAKE_NVML_GPUS=json.dumps(gpus),
    )
    return env


@asynccontextmanager
async def client(
    lab: Lab, gpus: list[dict[str, Any]] = HEALTHY_AND_LOST, *, toolsets: str | None = None
) -> AsyncIterator[Client]:
    """``clawpoint serve`` over stdio (``toolsets``: its ``--toolsets``, else the default)."""
    args = ["serve", *(["--toolsets", toolsets] if toolsets else [])]
    params = StdioServerParameters(command=str(CLAWPOINT), args=args, env=server_env(lab, gpus))
    async with Client(params) as session:
        yield session


async def ok(session: Client, tool: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """Call a tool that must succeed; its structured content."""
    result = await session.call_tool(tool, args or {})
    text = " ".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, f"{tool}: {text}"
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def signals_config(provider: str, url: str, *, nvml: bool) -> str:
    """config.toml for a lab whose host is local:node-a on ``provider`` (its fake at ``url``)."""
    return (
        '[signals]\nnode = "local:node-a"\nconnect_timeout_s = 0.5\nread_timeout_s = 0.5\n'
        f'[signals.{provider}]\nenabled = true\nbase_url = "{url}"\n'
        f"[signals.nvml]\nenabled = {'true' if nvml else 'false'}\n"
    )
