"""How strong a bearer or approver token must be before clawpoint serves anything with it.

The HTTP server's tokens (the agents' ``CLAWPOINT_MCP_TOKEN`` and ``[mcp] agent_tokens``,
the people's ``CLAWPOINT_APPROVER_TOKEN``) are the only thing between the network and the
actions or approvals behind them, so a short or repetitive one is refused at start-up and
reported as an error by ``clawpoint config check``. Limits: a heuristic (length and variety
of characters); it cannot tell a random string from a long phrase that happens to vary, so
generate tokens rather than invent them.
"""

from __future__ import annotations

MIN_TOKEN_CHARS = 32
MIN_DISTINCT_CHARS = 10
GENERATE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def token_problem(token: str) -> str | None:
    """Why ``token`` is too weak to guard an HTTP endpoint, or None when it is fine."""
    if len(token) < MIN_TOKEN_CHARS:
        return f"it has {len(token)} characters; at least {MIN_TOKEN_CHARS} are required"
    if token != token.strip():
        return "it starts or ends with whitespace"
    distinct = len(set(token))
    if distinct < MIN_DISTINCT_CHARS:
        return (
            f"it uses only {distinct} different characters; a random token uses at least "
            f"{MIN_DISTINCT_CHARS}"
        )
    return None


def weak_token_hint() -> str:
    return f"generate a random token with: {GENERATE}"
