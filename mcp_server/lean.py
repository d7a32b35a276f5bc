"""A lean tool list and compact tool results: what every agent pays for on every turn.

``LeanServer`` is the SDK's server with two changes, made once for every tool rather than
tool by tool:

- ``list_tools`` publishes lean schemas (``lean_tool``): no pydantic ``title`` on schemas
  or properties, an optional argument as its plain type (``{"type": "string"}``, not
  ``anyOf`` with ``null``, which some clients show as ``unknown``), no default that is
  null, false or empty (leaving an optional argument out says as much), no ``maxLength``
  (the tool's model still enforces it, and its error names the limit), no tool ``title``
  (hosts show the name; the model reads the name and description), descriptions on one
  line, only the annotation hints that say something (``idempotentHint`` means nothing on a
  read-only tool; a false ``readOnlyHint`` or ``idempotentHint`` is the protocol's
  default), and no output schemas: they cost
  about as much as the input schemas, hosts do not show them to models, and each tool's
  description and docs/mcp-tools.md name its output fields (``lean_output_schema`` is
  what the docs show);
- ``call_tool`` drops null fields from structured results (an absent field is null; the
  lean output schemas make such fields optional) and makes the text content a one-line
  summary of them (``mcp_server.result_text``: hosts show the structured content, so a
  full copy in the text is paid twice or never read), or the whole data as compact JSON,
  never pretty-printed, for a client whose protocol has no structured content or when
  ``result_text="json"``.

Limits: only the published schemas change; arguments are still validated by each tool's
own pydantic model (an explicit ``null`` for an optional argument is still accepted).
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server import MCPServer
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations

from mcp_server.result_text import ResultText, needs_full_text, summary

__all__ = [
    "LeanServer",
    "compact_json",
    "drop_none",
    "lean_output_schema",
    "lean_schema",
    "lean_tool",
]

_NULL = {"type": "null"}


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def drop_none(value: Any) -> Any:
    """``value`` without the null fields of its mappings (recursively; list items stay)."""
    if isinstance(value, dict):
        return {k: drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_none(v) for v in value]
    return value


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _plain(node: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """(node with ``anyOf: [X, null]`` folded into X, whether it was nullable)."""
    options = node.get("anyOf")
    if not isinstance(options, list) or _NULL not in options:
        return node, False
    rest = [o for o in options if o != _NULL]
    out = {k: v for k, v in node.items() if k != "anyOf"}
    if len(rest) == 1 and isinstance(rest[0], dict):
        out = {**rest[0], **out}
    elif rest:
        out["anyOf"] = rest
    return out, True


def lean_schema(node: Any, *, output: bool = False) -> Any:
    """A JSON schema without the noise (see the module docstring). ``output``: a nullable
    property also leaves ``required`` (results omit null fields)."""
    if not isinstance(node, dict):
        return node
    node, _ = _plain(node)
    out: dict[str, Any] = {}
    nullable: set[str] = set()
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key == "default" and (value is None or value is False or value == ""):
            continue  # an optional argument's absence says as much
        if key == "maxLength" and not output:
            continue  # the tool's own model enforces it, with an error naming the limit
        if key == "additionalProperties" and value is True:
            continue  # the default: says nothing
        if key == "description" and isinstance(value, str):
            out[key] = _one_line(value)
        elif key in ("properties", "$defs") and isinstance(value, dict):
            props = {}
            for name, sub in value.items():
                if key == "properties" and isinstance(sub, dict) and _plain(sub)[1]:
                    nullable.add(name)
                props[name] = lean_schema(sub, output=output)
            out[key] = props
        elif key in ("items", "additionalProperties", "not"):
            out[key] = lean_schema(value, output=output)
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            out[key] = [lean_schema(v, output=output) for v in value]
        else:
            out[key] = value
    if output and nullable and isinstance(out.get("required"), list):
        out["required"] = [r for r in out["required"] if r not in nullable]
        if not out["required"]:
            del out["required"]
    return out


def _says_something(schema: dict[str, Any] | None) -> bool:
    """An output schema worth publishing: one that names at least one property."""
    return bool(schema and (schema.get("properties") or schema.get("$defs")))


def _lean_annotations(a: ToolAnnotations | None) -> ToolAnnotations | None:
    if a is None:
        return None
    if a.read_only_hint:  # idempotent means nothing for a tool that never writes; an explicit
        # destructiveHint=false stays (its default is true, and some hosts ask before those)
        return ToolAnnotations(
            read_only_hint=True,
            destructive_hint=False,
            open_world_hint=a.open_world_hint,
        )
    # readOnlyHint false and idempotentHint false are the protocol's defaults; a true
    # destructiveHint (also the default) stays, for hosts that look for it to warn.
    return ToolAnnotations(
        destructive_hint=a.destructive_hint,
        idempotent_hint=a.idempotent_hint or None,
        open_world_hint=a.open_world_hint,
    )


def lean_output_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The output schema without noise, or None when it declares nothing (an open object)."""
    output = lean_schema(schema, output=True) if schema else None
    return output if _says_something(output) else None


def lean_tool(tool: Tool) -> Tool:
    return tool.model_copy(
        update={
            "title": None,
            "description": _one_line(tool.description or ""),
            "input_schema": lean_schema(tool.input_schema),
            "output_schema": None,
            "annotations": _lean_annotations(tool.annotations),
        }
    )


class LeanServer(MCPServer[Any]):
    """The SDK's server with lean tool schemas and compact results (module docstring);
    ``result_text``: the text copy of a structured result, a ``summary`` or the ``json``."""

    def __init__(self, *args: Any, result_text: ResultText = "summary", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.result_text: ResultText = result_text

    async def list_tools(self) -> list[Tool]:
        return [lean_tool(t) for t in await super().list_tools()]

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        result = await super().call_tool(name, arguments, context)
        if isinstance(result, CallToolResult) and result.structured_content is not None:
            data = drop_none(result.structured_content)
            version = getattr(context, "protocol_version", None)
            full = self.result_text == "json" or needs_full_text(version)
            text = compact_json(data) if full else summary(data)
            return result.model_copy(
                update={
                    "structured_content": data,
                    "content": [TextContent(type="text", text=text)],
                }
            )
        return result
