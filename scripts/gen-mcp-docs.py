"""Write docs/mcp-tools.md from the server's own tool list, so the doc cannot drift.

Run with `make docs`; `tests/mcp/test_tool_docs.py` fails when the committed file differs
from what this script produces.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


async def _tools() -> tuple[list[Any], dict[str, Any], dict[str, str]]:
    """The tools as clients list them, the output schema of each (lean, as the server's own
    models declare it; not published on the wire), and each tool's toolset."""
    from mcp import Client

    from core.config import load_settings
    from core.service.facade import bootstrap
    from mcp_server.lean import lean_output_schema
    from mcp_server.server import TOOLSETS, build_server

    with tempfile.TemporaryDirectory() as home:
        service = bootstrap(load_settings(Path(home)))
        server = build_server(service, toolsets=TOOLSETS)  # capacity too: it is documented
        internal = {t.name: t for t in server._tool_manager.list_tools()}
        async with Client(server) as client:
            tools = list((await client.list_tools()).tools)
        sets: dict[str, str] = {}
        for toolset in TOOLSETS:
            only = build_server(service, toolsets=[toolset])
            for t in only._tool_manager.list_tools():
                sets[t.name] = toolset
    outputs = {name: lean_output_schema(t.output_schema) for name, t in internal.items()}
    return tools, outputs, sets


def _hints(tool: Any) -> str:
    a = tool.annotations
    if a is None:
        return ""
    flags = [
        name
        for name, on in (
            ("read-only", a.read_only_hint),
            ("destructive", a.destructive_hint),
            ("idempotent", a.idempotent_hint),
        )
        if on
    ]
    return ", ".join(flags) or "writes"


def render(tools: list[Any], outputs: dict[str, Any], sets: dict[str, str]) -> str:
    lines = [
        "# MCP tools",
        "",
        "Generated from the server's own schemas by `make docs` (scripts/gen-mcp-docs.py); a",
        "test fails when this file is stale. Input schemas are as `tools/list` publishes them",
        "(lean: see `mcp_server/lean.py`). Output schemas are not published on the wire (they",
        "would cost an agent about as much again on every turn); they are shown here as the",
        "server's models declare them. Results leave out null fields; list records are",
        "concise (`core/service/views.py`) and full with `detail: true`; lists page with",
        "`limit` and `cursor` (pass the previous page's `next_cursor`). Toolsets: see",
        "docs/agents.md.",
        "",
        "Arguments are strict (`mcp_server/arguments.py`): an argument a tool does not list is",
        'refused, a boolean is JSON `true` or `false` only (never `"yes"`, `"true"` or `1`),',
        "and every filter is an enum (`backend` lists the backends configured: here only",
        "`local`). Any argument error is one tool error, `TOOL: PROBLEM; ... (error:",
        "invalid-input) Next step: TOOL takes: ARGS`. Hints name tools, e.g. `Next step: see the",
        "existing ids with list_workloads`.",
        "",
        "| tool | toolset | hints | what |",
        "|---|---|---|---|",
    ]
    for t in sorted(tools, key=lambda t: t.name):
        what = (t.description or "").replace("|", "\\|")
        lines.append(f"| `{t.name}` | {sets.get(t.name, '')} | {_hints(t)} | {what} |")
    lines.append("")
    for t in sorted(tools, key=lambda t: t.name):
        lines += [
            f"## `{t.name}`",
            "",
            (t.description or "").strip(),
            "",
            "Input schema:",
            "",
            "```json",
            json.dumps(t.input_schema, indent=2, sort_keys=True),
            "```",
            "",
        ]
        if outputs.get(t.name):
            lines += [
                "Output schema:",
                "",
                "```json",
                json.dumps(outputs[t.name], indent=2, sort_keys=True),
                "```",
                "",
            ]
    return "\n".join(lines)


def main() -> None:
    sys.stdout.write(render(*anyio.run(_tools)))


if __name__ == "__main__":
    main()
