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


async def _tools() -> list[Any]:
    from mcp import Client

    from core.config import load_settings
    from core.service.facade import bootstrap
    from mcp_server.server import build_server

    with tempfile.TemporaryDirectory() as home:
        server = build_server(bootstrap(load_settings(Path(home))))
        async with Client(server) as client:
            return list((await client.list_tools()).tools)


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


def render(tools: list[Any]) -> str:
    lines = [
        "# MCP tools",
        "",
        "Generated from the server's own schemas by `make docs` (scripts/gen-mcp-docs.py); a",
        "test fails when this file is stale. Records inside outputs are open objects: their",
        "fields are the pydantic models in `core/model.py` and `core/guardrails/approvals.py`.",
        "",
        "| tool | hints | what |",
        "|---|---|---|",
    ]
    for t in sorted(tools, key=lambda t: t.name):
        first = (t.description or "").strip().splitlines()[0] if t.description else ""
        lines.append(f"| `{t.name}` | {_hints(t)} | {first} |")
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
        if t.output_schema:
            lines += [
                "Output schema:",
                "",
                "```json",
                json.dumps(t.output_schema, indent=2, sort_keys=True),
                "```",
                "",
            ]
    return "\n".join(lines)


def main() -> None:
    sys.stdout.write(render(anyio.run(_tools)))


if __name__ == "__main__":
    main()
