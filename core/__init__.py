"""clawpoint core: model, service facade, guardrails, engines, store, state and backends.

Nothing in core (outside ``core.cli``) imports an interface library (mcp, typer, rich):
the MCP server and the CLI are thin translators over ``core.service``.
"""

__version__ = "0.1.0"
