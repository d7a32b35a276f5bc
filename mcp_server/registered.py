"""The tools an MCP server holds, read back: the one place that reaches into the SDK.

The server registers its tools through the SDK's public API (``MCPServer.tool``,
``remove_tool``), but to make arguments strict, hide redirected arguments and sort tools into
toolsets it must read back what registration built (each tool's argument model and published
schema), and mcp 2.3.0 offers no public way to: ``MCPServer.list_tools`` is async and returns
the wire form, without the argument model. So this module reads the server's private
``_tool_manager``, and nothing else in clawpoint does (a test pins both): when the SDK
changes it, the failure is here, named, not scattered over the server.

Limits: written against mcp 2.3.0 (``mcp.server.mcpserver.tools.ToolManager``); the lock
file pins that version.
"""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver.tools import Tool, ToolManager

__all__ = ["Tool", "every", "find"]


def _manager(mcp: MCPServer[Any]) -> ToolManager:
    manager = getattr(mcp, "_tool_manager", None)
    if not isinstance(manager, ToolManager):  # the SDK moved it: say so, do not guess
        raise RuntimeError(
            "this mcp SDK keeps its tools elsewhere than MCPServer._tool_manager: "
            "mcp_server/registered.py must be updated for it"
        )
    return manager


def every(mcp: MCPServer[Any]) -> list[Tool]:
    """Every tool registered so far, in registration order."""
    return _manager(mcp).list_tools()


def find(mcp: MCPServer[Any], name: str) -> Tool | None:
    """The tool registered as ``name``, if any."""
    return _manager(mcp).get_tool(name)
