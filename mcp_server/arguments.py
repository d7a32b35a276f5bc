"""Tool arguments as the MCP tools accept them, and one error for arguments that do not fit.

The SDK builds each tool's argument model from its signature and validates in pydantic's lax
mode, ignoring arguments it does not know. ``strict_arguments`` tightens every model once
the tools are registered:

- an argument the tool does not declare (``approved=true``, ``confirmed``) is refused: an
  agent that invents one would otherwise see its call succeed and believe it took effect;
- a boolean is a JSON ``true`` or ``false`` only: lax mode reads ``"yes"``, ``"on"``,
  ``"true"`` and ``1`` as true, so ``fresh="yes"`` or ``dry_run="no"`` would mean something
  the caller may not have meant;
- a filter is an enum: an argument named in ``choices`` (``backend``, or ``TOOL.ARG`` such
  as ``list_workloads.state``) accepts only the listed values, and the published schema
  lists them, so ``state="runing"`` is refused instead of matching nothing.

``ArgumentChecks`` (mixed into the server) turns a failed validation into
``core.errors.argument_error``: ``TOOL: PROBLEM`` with the hint ``TOOL takes: ARGS`` (the
arguments the tool publishes), the same shape the service gives an action's parameters.

Limits: resolver parameters are not arguments (the SDK never validates them from the
caller); arguments accepted but hidden from the schema (``checkpoint_workload``'s
``stop``) are checked like the others but not listed as valid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import Strict, ValidationError

from core import errors
from mcp_server import registered
from mcp_server.common import tool_error

__all__ = ["ArgumentChecks", "strict_arguments"]

_BOOLS: tuple[Any, ...] = (bool, bool | None)
_STRINGS: tuple[Any, ...] = (str, str | None)


def strict_arguments(mcp: MCPServer[Any], choices: Mapping[str, Sequence[str]]) -> None:
    """Make every registered tool's arguments strict (see the module docstring).

    ``choices`` maps an argument name (every tool's argument of that name) or ``TOOL.ARG``
    (that tool's only; it wins) to the values it accepts."""
    for tool in registered.every(mcp):
        model = tool.fn_metadata.arg_model
        props = tool.parameters.setdefault("properties", {})
        changed: list[str] = []
        for name, field in model.model_fields.items():
            allowed = choices.get(f"{tool.name}.{name}", choices.get(name))
            if field.annotation in _BOOLS:
                field.metadata.append(Strict())
            elif allowed is not None and field.annotation in _STRINGS:
                one_of: Any = Literal.__getitem__(tuple(allowed))
                field.annotation = one_of if field.annotation is str else one_of | None
                changed.append(name)
        model.model_config["extra"] = "forbid"
        model.model_rebuild(force=True)
        schema = model.model_json_schema(by_alias=True)["properties"]
        for name in changed:
            alias = model.model_fields[name].alias or name
            if alias in props:  # a hidden argument stays hidden
                props[alias] = _enum(schema[alias])
        tool.parameters["additionalProperties"] = False


def _enum(node: Any) -> Any:
    """A choice of one value as ``enum`` too (pydantic writes ``const``), so every filter
    reads the same whatever the configuration offers."""
    if isinstance(node, dict):
        out = {k: _enum(v) for k, v in node.items() if k != "const"}
        if "const" in node:
            out["enum"] = [node["const"]]
        return out
    if isinstance(node, list):
        return [_enum(v) for v in node]
    return node


class ArgumentChecks(MCPServer[Any]):
    """Arguments that fail validation get ``core.errors.argument_error``, not pydantic's text."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            tool = registered.find(self, name)
            # Only the arguments' own validation: a tool body that fails to build its result
            # is a bug (UnexpectedToolError), reported as the SDK reports it.
            if (isinstance(exc, UnexpectedToolError) or tool is None
                    or not isinstance(cause, ValidationError)
                    or cause.title != tool.fn_metadata.arg_model.__name__):  # fmt: skip
                raise
            valid = list(tool.parameters.get("properties") or {})
            problems = cause.errors(include_url=False)
            raise tool_error(errors.argument_error(name, problems, valid)) from None
