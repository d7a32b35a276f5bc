"""Agent and approver credentials of the HTTP server never open each other's doors."""

from __future__ import annotations

import os

import httpx2
import pytest

from core.guardrails.approvals import ApprovalStatus
from tests.adversarial.conftest import Lab, agent_session, approval_id_of

pytestmark = [pytest.mark.anyio, pytest.mark.criu]

MCP_BODY = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


async def test_agent_token_never_reaches_the_approval_page(lab: Lab, need_criu: None) -> None:
    approver = "approver-" + os.urandom(16).hex()
    server = lab.http_server(approver_token=approver)
    workload = lab.start("tokens")
    async with agent_session(lab, "http", server=server) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload})
        approval_id = approval_id_of(out)
        assert any(p["kind"] == "page" for p in out["approval"]["how_to_approve"])
    page = f"{server.url}/approvals"
    agent_token = server.agent_token
    with httpx2.Client(follow_redirects=False, timeout=30) as http:
        # As an Authorization header, on every page route and verb: refused outright.
        for method, url in [
            ("GET", page),
            ("GET", f"{page}/{approval_id}"),
            ("POST", f"{page}/{approval_id}/approve"),
            ("POST", f"{page}/login"),
        ]:
            for scheme in ("Bearer", "Basic", ""):
                auth = f"{scheme} {agent_token}".strip()
                r = http.request(method, url, headers={"Authorization": auth}, data={})
                assert r.status_code == 403, (method, url, scheme, r.status_code)
        # Even the approver token is refused in a header: the page only takes logins.
        r = http.get(page, headers={"Authorization": f"Bearer {approver}"})
        assert r.status_code == 403
        # As the session cookie: not a session, so the login form and no approval content.
        cookies = {"Cookie": f"clawpoint_approver={agent_token}"}
        r = http.get(page, headers=cookies)
        assert r.status_code == 200 and "Approver login" in r.text and approval_id not in r.text
        r = http.get(f"{page}/{approval_id}", headers=cookies)
        assert r.status_code == 303 and r.headers["location"].endswith("/approvals")
        r = http.post(f"{page}/{approval_id}/approve", headers=cookies, data={"csrf": ""})
        assert r.status_code == 401
        # As the login token, with and without a name: wrong token, no session cookie.
        for form in ({"token": agent_token}, {"token": agent_token, "name": "alice"}):
            r = http.post(f"{page}/login", data=form)
            assert r.status_code == 401 and "Wrong token" in r.text
            assert "set-cookie" not in {k.lower() for k in r.headers}
        # Control: the approver token does log in (so the refusals above are meaningful).
        r = http.post(f"{page}/login", data={"token": approver, "name": "alice"})
        assert r.status_code == 303 and "clawpoint_approver" in r.headers["set-cookie"]
    assert lab.service.get_approval(approval_id).status is ApprovalStatus.PENDING
    assert lab.executions() == []


def test_approver_token_cannot_call_mcp(lab: Lab) -> None:
    approver = "approver-" + os.urandom(16).hex()
    server = lab.http_server(approver_token=approver)
    with httpx2.Client(timeout=30) as http:
        for token in (approver, approver.upper(), f"{approver}x"):
            headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
            r = http.post(server.mcp_url, json=MCP_BODY, headers=headers)
            assert r.status_code == 401, (token, r.status_code)
            assert "www-authenticate" in {k.lower() for k in r.headers}
        # The approver's page session cookie is no MCP credential either.
        login = http.post(f"{server.url}/approvals/login", data={"token": approver})
        assert login.status_code == 303
        sid = login.cookies.get("clawpoint_approver")
        assert sid
        http.cookies.clear()
        cookie = {"Cookie": f"clawpoint_approver={sid}"}
        r = http.post(server.mcp_url, json=MCP_BODY, headers={**MCP_HEADERS, **cookie})
        assert r.status_code == 401
        # Control: the agent token does work on /mcp.
        headers = {**MCP_HEADERS, "Authorization": f"Bearer {server.agent_token}"}
        body = {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "probe", "version": "0"}},
        }  # fmt: skip
        assert http.post(server.mcp_url, json=body, headers=headers).status_code == 200
