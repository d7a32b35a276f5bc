"""The read-only insight tools' registration (the command itself: test_heartbeat.py)."""

from __future__ import annotations

import anyio
from mcp.server import MCPServer

from core.service.facade import Service
from mcp_server import tools_insights


def test_insight_tools_are_registered_read_only_and_answer(service: Service) -> None:
    mcp: MCPServer[object] = MCPServer("t")
    tools_insights.register(mcp, service)

    async def go() -> None:
        tools = {t.name: t for t in await mcp.list_tools()}
        names = {"queue_depth", "sla_risk", "spot_market", "cluster_health", "plan_actions"}
        assert names <= set(tools)
        for name in names:
            ann = tools[name].annotations
            assert ann is not None and ann.read_only_hint and not ann.destructive_hint
            assert ann.idempotent_hint
        out = await mcp.call_tool("queue_depth", {})
        assert "local" in str(out)

    anyio.run(go)
