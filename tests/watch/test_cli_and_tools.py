"""`clawpoint watch --once` exit codes and the read-only insight tools' registration."""

from __future__ import annotations

import anyio
from mcp.server import MCPServer
from typer.testing import CliRunner

from core.service.facade import Service
from core.watch.loop import EXIT_NOTHING
from mcp_server import tools_insights


def test_watch_once_is_quiet_and_exits_zero_when_nothing_happens(service: Service) -> None:
    from core.cli.watch import app

    result = CliRunner().invoke(app, ["--once"])
    assert result.exit_code == EXIT_NOTHING, result.output
    assert result.stdout == ""  # logs go to stderr; stdout stays empty
    bad = CliRunner().invoke(app, ["--every", "soon"])
    assert bad.exit_code == 1 and "not a duration" in bad.output


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
