"""Bearer-token auth for the streamable HTTP transport.

Tokens are compared in constant time. A token maps to a principal kind by scope: agent
tokens get scope ``agent`` and, as their client id, the name of the agent they were issued
to (``[mcp] agent_tokens``; the main token is ``clawpoint-agent``), which becomes the agent's
principal ``mcp:NAME``; approver tokens (people) get ``approver``. Requests without a valid
token get 401 from the SDK's middleware before any tool runs.
Limits: a token is the whole identity of an HTTP agent; whoever holds it is that agent.
"""

from __future__ import annotations

import hmac

from mcp.server.auth.provider import AccessToken


class StaticTokenVerifier:
    """Verifies bearer tokens against configured secrets (agent and approver tokens)."""

    def __init__(
        self, *, agent_tokens: dict[str, str], approver_tokens: list[str] | None = None
    ) -> None:
        self._agents = [(name, t.encode()) for name, t in agent_tokens.items() if t]
        self._approver = [t.encode() for t in (approver_tokens or []) if t]

    @staticmethod
    def _find(candidate: bytes, secrets: list[tuple[str, bytes]]) -> str | None:
        # Compare against every secret so timing does not reveal which one matched.
        found: str | None = None
        for name, secret in secrets:
            if hmac.compare_digest(candidate, secret):
                found = name
        return found

    def identify(self, token: str) -> tuple[str, str] | None:
        """(scope, client id) of a token, or None when it is no configured token."""
        raw = token.encode()
        if self._find(raw, [("clawpoint-approver", s) for s in self._approver]) is not None:
            return "approver", "clawpoint-approver"
        agent = self._find(raw, self._agents)
        return ("agent", agent) if agent is not None else None

    def scope_of(self, token: str) -> str | None:
        found = self.identify(token)
        return found[0] if found else None

    async def verify_token(self, token: str) -> AccessToken | None:
        found = self.identify(token)
        if found is None:
            return None
        scope, client_id = found
        return AccessToken(token=token, client_id=client_id, scopes=[scope])
