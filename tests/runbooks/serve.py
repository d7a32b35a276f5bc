"""The stdio MCP server with the runbook tools, however far ``build_server`` wires them.

``clawpoint serve`` registers ``mcp_server.tools_runbooks`` once the server mounts it; this
entry point adds them when they are missing so the tests exercise the real tools either way.
"""

from __future__ import annotations

import anyio

from core import logs
from core.config import load_settings
from core.service.facade import bootstrap
from mcp_server import tools_runbooks
from mcp_server.server import build_server


def main() -> None:
    logs.configure()
    service = bootstrap(load_settings())
    service.recover()
    mcp = build_server(service)
    names = {t.name for t in anyio.run(mcp.list_tools)}
    if "start_runbook" not in names:
        tools_runbooks.register(mcp, service)
    mcp.run()


if __name__ == "__main__":
    main()
