"""The desk's read views over a real service: each logged in only, paged, and saying what
the service says (workloads' last good checkpoint, nodes' notices and drains, executions'
results, the audit trail with ``audit verify``'s verdict on top)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from core.guardrails.evidence import NOTICE_GRACE_S
from core.model import (
    CheckpointInfo,
    CheckpointStatus,
    ExecutionStatus,
    NodeInfo,
    WorkloadInfo,
    WorkloadState,
    utcnow,
)
from core.service.desk_views import VIEW_PAGE_SIZE
from core.service.facade import Service
from mcp_server.approval_page import approval_routes
from mcp_server.http_app import ServiceDesk
from tests.guardrails.conftest import make_plan
from tests.guardrails.test_approval_page import APPROVER_TOKEN, login

COUNT = VIEW_PAGE_SIZE + 5  # two pages of each


class ManyBackend:
    """A backend with ``COUNT`` nodes and workloads; every third workload has checkpoints."""

    name = "fake"

    def __init__(self) -> None:
        self.now = utcnow()
        # w07 must finish within the hour (its SLA deadline label)
        self.sla_at = (self.now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def nodes(self) -> list[NodeInfo]:
        return [
            NodeInfo(id=f"fake:n{i:02d}", backend="fake", name=f"n{i:02d}",
                     schedulable=i != 1, reason="kernel upgrade" if i == 1 else "")
            for i in range(COUNT)
        ]  # fmt: skip

    def workloads(self) -> list[WorkloadInfo]:
        return [
            WorkloadInfo(id=f"fake:w{i:02d}", backend="fake", name=f"w{i:02d}",
                         state=WorkloadState.RUNNING, node="n00", labels={"team": "ml"} | (
                             {"clawpoint.io/deadline": self.sla_at} if i == 7 else {}))
            for i in range(COUNT)
        ]  # fmt: skip

    def get_workload(self, name: str) -> WorkloadInfo:
        return next(w for w in self.workloads() if w.name == name)

    def checkpoints(self, name: str | None) -> list[CheckpointInfo]:
        if name is None or int(name[1:]) % 3:
            return []
        return [
            CheckpointInfo(id=f"fake:{name}/{s}", lineage=name, seq=s, engine="criu",
                           created_at=self.now - timedelta(minutes=10 - s), size_bytes=1,
                           status=CheckpointStatus.GOOD)
            for s in (1, 2)
        ]  # fmt: skip


@pytest.fixture
def client(service: Service) -> TestClient:
    service.backends["fake"] = ManyBackend()  # type: ignore[assignment]
    desk = ServiceDesk(service)
    routes = approval_routes(desk, approver_token_ok=lambda t: t == APPROVER_TOKEN, views=desk)
    return TestClient(Starlette(routes=routes))


def _pages(client: TestClient, view: str) -> tuple[str, str]:
    first = client.get(f"/approvals/{view}")
    assert first.status_code == 200, first.text
    assert f'href="/approvals/{view}" aria-current="page"' in first.text  # navigation
    for other in ("workloads", "nodes", "executions", "audit"):
        assert f'href="/approvals/{other}"' in first.text
    assert f'rel="next" href="/approvals/{view}?page=2"' in first.text
    second = client.get(f"/approvals/{view}?page=2")
    assert (
        second.status_code == 200 and f'rel="prev" href="/approvals/{view}?page=1"' in second.text
    )
    assert 'rel="next"' not in second.text and "page 2 of 2" in second.text
    for bad in ("0", "x", "<b>"):
        assert client.get(f"/approvals/{view}", params={"page": bad}).status_code == 400
    return first.text, second.text


@pytest.mark.parametrize("view", ["workloads", "nodes", "executions", "audit"])
def test_views_refuse_without_login(client: TestClient, view: str) -> None:
    r = client.get(f"/approvals/{view}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/approvals"
    shown = client.get(f"/approvals/{view}").text
    assert "<h1>Approver login</h1>" in shown and "<table" not in shown
    r = client.get(f"/approvals/{view}", headers={"Authorization": "Bearer x"})
    assert r.status_code == 403  # agent credentials never open the desk


def test_workloads_view(client: TestClient) -> None:
    login(client)
    first, second = _pages(client, "workloads")
    assert "fake:w00" in first and "fake:w29" in second and "fake:w29" not in first
    # w00 has checkpoints: the newest good one and its age; w01 has none.
    assert "fake:w00/2</td>" not in first and "fake:w00/2<br><small>8 min ago" in first
    row = re.search(r"fake:w01</td>.*?</tr>", first)
    assert row is not None and '<span class="bad">none</span>' in row.group(0)
    assert "team=ml" in first


def test_nodes_view_shows_notices_and_drains(client: TestClient, service: Service) -> None:
    soon = utcnow() + timedelta(seconds=110)
    service.guard.grants.evidence.record(
        "spot-interruption", "fake:n00", source="aws-imds",
        expires_at=soon + timedelta(seconds=NOTICE_GRACE_S),
        detail=f"aws terminate at {soon:%H:%M:%S} UTC",
    )  # fmt: skip
    login(client)
    first, _ = _pages(client, "nodes")
    assert re.search(r"spot-interruption \(aws-imds\): reclaimed in 1 min (49|50) s", first)
    assert "drained: kernel upgrade" in first and 'http-equiv="refresh"' in first


def test_executions_view(client: TestClient, service: Service) -> None:
    for i in range(COUNT):
        plan = make_plan(target=f"local:job{i:02d}")
        service.journal.save_plan(plan)
        ex = service.journal.start(plan, "agent-1")
        failed = i == COUNT - 1
        service.journal.finish(
            ex.id, status=ExecutionStatus.FAILED if failed else ExecutionStatus.SUCCEEDED,
            result={}, error="node-b refused the restore" if failed else None,
        )  # fmt: skip
    login(client)
    first, _ = _pages(client, "executions")
    assert "local:job29" in first  # newest first
    assert '<b class="bad">failed</b>' in first and "node-b refused the restore" in first
    assert '<b class="ok">succeeded</b>' in first and f"{COUNT} executions" in first


def test_audit_view_with_its_verdict(client: TestClient, service: Service) -> None:
    for i in range(COUNT):
        service.audit.append("note", principal="tester", subject=f"s{i}", data={"i": i})
    login(client)
    first, _ = _pages(client, "audit")
    assert first.index("Chain verified") < first.index("<table")
    with service.db.write() as conn:  # someone edits an entry behind clawpoint's back
        conn.execute("UPDATE audit SET data='{\"i\": 99}' WHERE subject='s3'")
    broken = client.get("/approvals/audit").text
    assert "Chain broken" in broken and "was modified" in broken


@pytest.mark.parametrize("view", ["", "/workloads", "/nodes", "/executions", "/audit"])
def test_every_desk_page_works_with_javascript_off(client: TestClient, view: str) -> None:
    """No page carries a script, and the CSP forbids any: what a person sees and submits is
    plain HTML (reloads are meta refreshes), so it works with JavaScript off."""
    login(client)
    r = client.get(f"/approvals{view}")
    assert r.status_code == 200, r.text
    assert "<script" not in r.text.lower()
    assert "default-src 'none'" in r.headers["content-security-policy"]
    assert "script-src" not in r.headers["content-security-policy"]


def test_the_desk_puts_a_workload_with_an_sla_deadline_first(
    client: TestClient, service: Service
) -> None:
    """The service reads the SLA deadlines of the pending requests' workloads (their
    ``clawpoint.io/deadline`` labels) and the desk lists that workload first, saying so."""
    from tests.guardrails.conftest import AGENT

    for target in ("fake:w03", "fake:w07", "fake:w11"):
        service.guard.approvals.create(make_plan(target=target), AGENT, "x")
    page = service.desk_page()
    assert page.groups[0].target == "fake:w07", [g.target for g in page.groups]
    assert page.groups[0].deadline.startswith("SLA deadline "), page.groups[0].deadline
