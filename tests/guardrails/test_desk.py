"""The people's desk: pending requests grouped by workload, the soonest deadline first, paged.

The 20,000-request test is also the benchmark in docs/benchmarks.md: it prints the first
page's render time (in-process, through the page's routes) and asserts only the size and
the paging, since timings depend on the machine.
"""

from __future__ import annotations

import re
import secrets
import time
from datetime import timedelta

from starlette.applications import Starlette
from starlette.testclient import TestClient

from core.guardrails.approval_queue import insert_pending
from core.guardrails.approvals import ApprovalStore, ApprovalView
from core.guardrails.desk import PAGE_SIZE, Outcome, desk_page
from core.guardrails.evidence import NOTICE_GRACE_S, Evidence
from core.model import Action, Execution, ExecutionStatus, StepRecord, utcnow
from mcp_server.approval_page import approval_routes
from tests.guardrails.conftest import AGENT, make_plan
from tests.guardrails.test_approval_page import APPROVER_TOKEN, StoreDesk, login


def test_urgent_workloads_first_then_grouped(approvals: ApprovalStore) -> None:
    for target in ("local:a", "local:a", "local:b", "local:c", "local:d"):
        approvals.create(make_plan(target=target), AGENT, "x")
    now = utcnow()
    soon, later = now + timedelta(seconds=110), now + timedelta(seconds=900)
    notice = Evidence(
        id="evd-1", trigger="spot-interruption", subject="local:c", source="aws-imds",
        first_seen=now, observed_at=now, expires_at=soon + timedelta(seconds=NOTICE_GRACE_S),
        detail=f"aws terminate at {soon:%H:%M:%S} UTC",
    )  # fmt: skip
    page = desk_page(approvals, live=[notice], deadlines={"local:c": soon, "local:d": later})
    assert [g.target for g in page.groups] == ["local:c", "local:d", "local:a", "local:b"]
    urgent = page.groups[0]
    assert urgent.deadline_at == soon and "is reclaimed in 1 min 50 s" in urgent.deadline
    assert page.groups[2].waiting == 2 and len(page.groups[2].requests) == 2
    assert page.total == 5 and page.pages == 1


def test_an_sla_deadline_is_urgent_too(approvals: ApprovalStore) -> None:
    """A workload whose SLA deadline is near comes before the ones without a deadline, in
    deadline order with the noticed ones, and its group says which deadline."""
    for target in ("local:a", "local:b", "local:c"):
        approvals.create(make_plan(target=target), AGENT, "x")
    now = utcnow()
    notice_at, sla_at = now + timedelta(seconds=600), now + timedelta(seconds=300)
    page = desk_page(approvals, deadlines={"local:c": notice_at}, sla={"local:b": sla_at})
    assert [g.target for g in page.groups] == ["local:b", "local:c", "local:a"]
    assert page.groups[0].deadline_at == sla_at
    assert page.groups[0].deadline.startswith("SLA deadline "), page.groups[0].deadline
    assert page.groups[2].deadline == ""  # nothing urgent observed for a


def _flood(approvals: ApprovalStore, count: int) -> None:
    """``count`` pending requests over 500 workloads, written in one transaction."""
    plans = [make_plan(target=f"local:w{i:03d}") for i in range(500)]
    expires = utcnow() + timedelta(minutes=15)
    with approvals.db.write() as conn:
        for i in range(count):
            insert_pending(
                conn, f"apr-{secrets.token_hex(8)}", plans[i % 500], AGENT, reason="flood",
                code_hash="x", expires_at=expires, needs="any", identity=AGENT.id,
            )  # fmt: skip


def test_twenty_thousand_pending_first_page_is_small_and_paged(approvals: ApprovalStore) -> None:
    _flood(approvals, 20_000)
    routes = approval_routes(StoreDesk(approvals), approver_token_ok=lambda t: t == APPROVER_TOKEN)
    client = TestClient(Starlette(routes=routes))
    login(client)
    client.get("/approvals")  # warm: the first call builds the app's routes
    started = time.perf_counter()
    first = client.get("/approvals")
    took_ms = (time.perf_counter() - started) * 1000
    print(f"\n20,000 pending: first page {took_ms:.0f} ms, {len(first.content)} bytes")
    assert first.status_code == 200 and "Pending approvals (20000)" in first.text
    assert len(first.content) < 100_000
    shown = re.findall(r'href="/approvals/(apr-[0-9a-f]+)"', first.text)
    assert len(shown) == PAGE_SIZE
    assert 'rel="next" href="/approvals?page=2"' in first.text and 'rel="prev"' not in first.text
    assert f"page 1 of {20_000 // PAGE_SIZE}" in first.text
    second = client.get("/approvals?page=2")
    again = re.findall(r'href="/approvals/(apr-[0-9a-f]+)"', second.text)
    assert len(again) == PAGE_SIZE and not set(again) & set(shown)
    assert 'rel="prev" href="/approvals?page=1"' in second.text
    # Grouped: 40 requests per workload, so the first page is one workload's group.
    assert "local:w000" in first.text and "40 waiting" in first.text
    last = client.get(f"/approvals?page={20_000 // PAGE_SIZE}")
    assert 'rel="next"' not in last.text
    for bad in ("0", "-1", "x", "<script>", "99999999"):
        assert client.get("/approvals", params={"page": bad}).status_code == 400, bad


class RunDesk(StoreDesk):
    """The store's desk with an execution the test sets (what the journal would say)."""

    result = Outcome()

    def outcome(self, view: ApprovalView) -> Outcome:
        return self.result


def test_after_approval_the_page_follows_the_execution(approvals: ApprovalStore) -> None:
    view = approvals.create(make_plan(), AGENT, "spot notice on node-a")
    desk = RunDesk(approvals)
    routes = approval_routes(desk, approver_token_ok=lambda t: t == APPROVER_TOKEN)
    client = TestClient(Starlette(routes=routes))
    login(client)
    page = client.get(f"/approvals/{view.id}")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None and 'http-equiv="refresh"' not in page.text  # nothing urgent
    done = client.post(f"/approvals/{view.id}/approve", data={"csrf": csrf.group(1)})
    assert "is now <b>approved</b>" in done.text and "waiting for the agent" in done.text
    # The answer to the POST reloads the request's own page, not the form's address.
    assert f'content="2;url=/approvals/{view.id}"' in done.text
    started = utcnow()
    desk.result = Outcome(execution=Execution(
        id="exe-1", plan_hash=view.plan_hash, action=Action.MIGRATE, target="local:train-1",
        status=ExecutionStatus.RUNNING, principal="agent-1", started_at=started,
        steps=[StepRecord(name="checkpoint", status="done", started_at=started,
                          finished_at=started + timedelta(seconds=0.4)),
               StepRecord(name="start", status="started", started_at=started)],
    ))  # fmt: skip
    running = client.get(f"/approvals/{view.id}").text
    assert "<b>running</b>" in running and "checkpoint: <b>done</b> (0.4 s)" in running
    assert 'http-equiv="refresh" content="2;' in running
    finished = desk.result.execution
    assert finished is not None
    desk.result = Outcome(
        execution=finished.model_copy(update={
            "status": ExecutionStatus.SUCCEEDED, "finished_at": started + timedelta(seconds=3),
            "steps": [s.model_copy(update={"status": "done"}) for s in finished.steps]}),
        workload_now="local:train-1 is running on node-b; newest good checkpoint "
        "local:train-1/4, taken 2 s ago",
    )  # fmt: skip
    settled = client.get(f"/approvals/{view.id}").text
    assert '<b class="ok">succeeded</b> in 3 s' in settled
    assert "running on node-b" in settled and 'http-equiv="refresh"' not in settled
