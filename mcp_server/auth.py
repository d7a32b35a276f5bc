"""Bearer-token auth for the streamable HTTP transport.

Tokens are compared in constant time. A token maps to a principal kind by scope: the agent
token gets scope ``agent``; approver tokens (people) get ``approver``. Requests without a
valid token get 401 from the SDK's middleware before any tool runs.
"""

from __future__ import annotations

import hmac

from mcp.server.auth.provider import AccessToken


class StaticTokenVerifier:
    """Verifies bearer tokens against configured secrets (agent and approver tokens)."""

    def __init__(
        self, *, agent_tokens: list[str], approver_tokens: list[str] | None = None
    ) -> None:
        self._agent = [t.encode() for t in agent_tokens if t]
        self._approver = [t.encode() for t in (approver_tokens or []) if t]

    @staticmethod
    def _match(candidate: bytes, secrets: list[bytes]) -> bool:
        # Compare against every secret so timing does not reveal which one matched.
        found = False
        for secret in secrets:
            found |= hmac.compare_digest(candidate, secret)
        return found

    def scope_of(self, token: str) -> str | None:
        raw = token.encode()
        if self._match(raw, self._approver):
            return "approver"
        if self._match(raw, self._agent):
            return "agent"
        return None

    async def verify_token(self, token: str) -> AccessToken | None:
        scope = self.scope_of(token)
        if scope is None:
            return None
        return AccessToken(token=token, client_id=f"clawpoint-{scope}", scopes=[scope])
