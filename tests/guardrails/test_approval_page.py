"""The approval page through starlette's TestClient: login, CSRF, approve, deny, escaping."""

from __future__ import annotations

import re

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from core.guardrails.approvals import ApprovalStatus, ApprovalStore, ApprovalView
from core.guardrails.desk import DeskPage, Outcome, desk_page
from core.guardrails.request_facts import RequestFacts, request_facts
from core.model import Principal, PrincipalKind
from mcp_server.approval_page import COOKIE, approval_routes
from tests.guardrails.conftest import AGENT, make_plan

APPROVER_TOKEN = "approver-secret-token"
AGENT_TOKEN = "agent-mcp-token"


class StoreDesk:
    """What the service will provide; here straight over the store."""

    def __init__(self, store: ApprovalStore) -> None:
        self.store = store

    def desk_page(self, page: int, size: int) -> DeskPage:
        return desk_page(self.store, page=page, size=size)

    def facts(self, view: ApprovalView) -> RequestFacts:
        return request_facts(view)

    def outcome(self, view: ApprovalView) -> Outcome:
        return Outcome()

    def get(self, approval_id: str) -> ApprovalView:
        return self.store.get(approval_id)

    def approve(self, approval_id: str, principal: Principal) -> ApprovalView:
        return self.store.approve(approval_id, principal, via="page")

    def deny(self, approval_id: str, principal: Principal, why: str) -> ApprovalView:
        return self.store.deny(approval_id, principal, why, via="page")

    def reveal_code(self, approval_id: str) -> str:
        page = Principal(id="approval-page", kind=PrincipalKind.PERSON)
        return self.store.reveal_code(approval_id, principal=page)


@pytest.fixture
def client(approvals: ApprovalStore) -> TestClient:
    routes = approval_routes(StoreDesk(approvals), approver_token_ok=lambda t: t == APPROVER_TOKEN)
    return TestClient(Starlette(routes=routes))


def login(client: TestClient, name: str = "alice") -> None:
    r = client.post(
        "/approvals/login",
        data={"token": APPROVER_TOKEN, "name": name},
        follow_redirects=False,
    )
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/approvals" in cookie


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match
    return match.group(1)


def test_login_required_and_wrong_tokens_refused(client: TestClient) -> None:
    r = client.get("/approvals")
    assert (
        r.status_code == 200
        and "Approver login" in r.text
        and COOKIE not in r.headers.get("set-cookie", "")
    )
    assert "default-src 'none'" in r.headers["content-security-policy"]
    for token in ("", "wrong", AGENT_TOKEN):
        r = client.post("/approvals/login", data={"token": token}, follow_redirects=False)
        assert r.status_code == 401
    assert client.get("/approvals/apr-anything").status_code in (303, 200)
    assert "Approver login" in client.get("/approvals/apr-anything").text


def test_agent_credentials_never_reach_the_page(
    client: TestClient, approvals: ApprovalStore
) -> None:
    login(client)
    view = approvals.create(make_plan(), AGENT, "x")
    headers = {"Authorization": f"Bearer {AGENT_TOKEN}"}
    assert client.get("/approvals", headers=headers).status_code == 403
    r = client.post(
        "/approvals/login",
        data={"token": APPROVER_TOKEN},
        headers={"Authorization": f"Bearer {APPROVER_TOKEN}"},
    )
    assert r.status_code == 403
    assert client.get(f"/approvals/{view.id}", headers=headers).status_code == 403


def test_approve_needs_the_sessions_csrf_token(
    client: TestClient, approvals: ApprovalStore
) -> None:
    plan = make_plan()
    view = approvals.create(plan, AGENT, "node-a is being reclaimed")
    login(client)
    listing = client.get("/approvals")
    assert view.id in listing.text and "by agent-1" in listing.text
    page = client.get(f"/approvals/{view.id}")
    assert page.status_code == 200
    code = approvals.reveal_code(view.id, principal=Principal(id="p", kind=PrincipalKind.PERSON))
    assert f"{code[:4]}-{code[4:]}" in page.text
    for text in ("node-a is being reclaimed", "about 40 s", "Restore it on node-b"):
        assert text in page.text
    token = csrf_of(page.text)

    assert client.post(f"/approvals/{view.id}/approve", data={}).status_code == 403
    assert client.post(f"/approvals/{view.id}/approve", data={"csrf": "x" * 43}).status_code == 403
    cross = client.post(
        f"/approvals/{view.id}/approve",
        data={"csrf": token},
        headers={"Origin": "https://evil.example"},
    )
    assert cross.status_code == 403
    assert approvals.get(view.id).status is ApprovalStatus.PENDING

    done = client.post(f"/approvals/{view.id}/approve", data={"csrf": token})
    assert done.status_code == 200 and "approved" in done.text
    after = approvals.get(view.id)
    assert (after.status, after.decided_by, after.decided_via) == (
        ApprovalStatus.APPROVED,
        "page:alice",
        "page",
    )
    again = client.post(f"/approvals/{view.id}/approve", data={"csrf": token})
    assert again.status_code == 409


def test_csrf_token_of_another_session_is_refused(
    client: TestClient, approvals: ApprovalStore
) -> None:
    view = approvals.create(make_plan(), AGENT, "x")
    other = TestClient(client.app)
    login(other, "bob")
    foreign = csrf_of(other.get(f"/approvals/{view.id}").text)
    login(client)
    r = client.post(f"/approvals/{view.id}/approve", data={"csrf": foreign})
    assert r.status_code == 403


def test_deny_with_reason_and_self_approval_refused(
    client: TestClient, approvals: ApprovalStore
) -> None:
    view = approvals.create(make_plan(), AGENT, "x")
    mine = approvals.create(make_plan(), Principal(id="page:carol", kind=PrincipalKind.PERSON), "y")
    login(client, "carol")
    token = csrf_of(client.get(f"/approvals/{view.id}").text)
    r = client.post(f"/approvals/{mine.id}/approve", data={"csrf": token})
    assert r.status_code == 403 and "cannot decide" in r.text
    r = client.post(f"/approvals/{view.id}/deny", data={"csrf": token, "why": "not now"})
    assert r.status_code == 200
    assert approvals.get(view.id).status is ApprovalStatus.DENIED
    assert approvals.get(view.id).note == "not now"


def test_plan_text_is_escaped(client: TestClient, approvals: ApprovalStore) -> None:
    plan = make_plan().model_copy(update={"summary": "<script>alert(1)</script>"}).sealed()
    view = approvals.create(plan, AGENT, "<img src=x onerror=alert(1)>")
    login(client)
    page = client.get(f"/approvals/{view.id}").text
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert "<img" not in page


def test_logout_ends_the_session(client: TestClient) -> None:
    login(client)
    token = csrf_of(client.get("/approvals").text)
    client.post("/approvals/logout", data={"csrf": token})
    assert "Approver login" in client.get("/approvals").text
