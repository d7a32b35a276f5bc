"""clawpoint's MCP server: thin tools over ``core.service`` (stdio and streamable HTTP)."""
