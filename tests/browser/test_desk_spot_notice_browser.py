"""The spot-notice story from the person's side, in a real browser at desktop and phone widths.

AWS reclaims node-a in 110 s (evidence as the watch records it) and the agent asks to move
the workload off it. The person logs in, sees the countdown on the desk and on the request
(not only the request's 15-minute expiry), reads what doing nothing costs, a pause in real
units and an undo that does not lead back onto node-a, approves, and watches the request's
page reload itself (no script) until the execution has succeeded and the workload runs on
node-b with a fresh checkpoint; then opens each read view (workloads, nodes, executions,
audit trail) from the desk's navigation. The screenshots in docs/img/ are written by this test
when ``CLAWPOINT_WRITE_SCREENSHOTS=1`` (``make screenshots``); otherwise they go to the test's
own directory, so that a run of the suite leaves the checkout as it was.
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest

from core.guardrails.evidence import NOTICE_GRACE_S
from core.model import Action, utcnow
from tests.adversarial.conftest import PERSON, Lab, agent_session, approval_id_of
from tests.browser.test_approval_page_browser import CHROMIUM, Browser

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
WRITE_DOCS = os.environ.get("CLAWPOINT_WRITE_SCREENSHOTS") == "1"
WIDTHS = {"desktop": (1280, 900, False), "phone": (390, 844, True)}
# Each read view, and what it must show once the workload has moved.
VIEWS = {
    "workloads": ("local:spot-w", "running", "node-b", "ago"),
    "nodes": ("local:node-a", "spot-interruption (aws-imds): reclaimed in ", "local:node-b"),
    "executions": ("migrate local:spot-w", "succeeded"),
    "audit": ("Chain verified", "execution"),
}

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.criu,
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
    ),
]


def _width(browser: Browser, name: str) -> None:
    width, height, mobile = WIDTHS[name]
    browser.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile},
    )


def _shoot(browser: Browser, url: str, name: str, shots: Path) -> None:
    """The page at ``url`` at both widths, into SHOTS/desk-NAME-WIDTH.png."""
    for width in WIDTHS:
        _width(browser, width)
        browser.goto(url)
        assert browser.js("document.documentElement.scrollWidth <= window.innerWidth + 1"), (
            f"{name} scrolls sideways at {width} width"
        )
        browser.screenshot(shots / f"desk-{name}-{width}.png")


async def test_spot_notice_countdown_approve_and_watch_it_finish(
    lab: Lab, tmp_path: Path, need_criu: None
) -> None:
    shots = DOCS_IMG if WRITE_DOCS else tmp_path
    approver = "approver-" + os.urandom(16).hex()
    server = lab.http_server(approver_token=approver)
    workload = lab.start("spot-w")
    lab.service.act(Action.CHECKPOINT, workload, {}, principal=PERSON, confirmed=True)
    # 110 s in the story; more here, so a slow machine still reads a countdown, not "ago".
    reclaim = utcnow() + timedelta(seconds=300)
    lab.service.guard.grants.evidence.record(
        "spot-interruption", "local:node-a", source="aws-imds",
        expires_at=reclaim + timedelta(seconds=NOTICE_GRACE_S),
        detail=f"aws terminate at {reclaim:%H:%M:%S} UTC",
    )  # fmt: skip
    async with agent_session(lab, "http", server=server) as agent:
        out = await agent.ok(
            "migrate_workload",
            {"workload": workload, "reason": "spot notice: node-a is reclaimed soon"},
        )
        approval_id = approval_id_of(out)
        browser = Browser(Path(tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)))
        try:
            browser.goto(f"{server.url}/approvals")
            browser.type_into("input[name=token]", approver)
            browser.type_into("input[name=name]", "alice")
            browser.click("form[action='/approvals/login'] button")
            listing = browser.text()
            assert "Pending approvals (1)" in listing and "local:spot-w" in listing
            assert "Deadline: node-a is reclaimed in " in listing, listing
            _shoot(browser, f"{server.url}/approvals", "list", shots)

            _width(browser, "desktop")
            browser.goto(f"{server.url}/approvals")
            browser.click(f"a[href='/approvals/{approval_id}']")
            detail = browser.text()
            for expected in (
                "node-a is reclaimed in ",  # the countdown, from the notice
                "aws-imds notice",
                "after the deadline: decide before the deadline",  # the expiry is not the clock
                "goes away and local:spot-w dies with it",  # the cost of doing nothing
                "losing the work since then",
                "no way back to node-a",  # the undo does not lead onto the reclaimed node
                "One-time code",
            ):
                assert expected in detail, (expected, detail)
            assert "about 0 seconds" not in detail and "--to node-a" not in detail
            _shoot(browser, f"{server.url}/approvals/{approval_id}", "request", shots)

            _width(browser, "desktop")
            browser.goto(f"{server.url}/approvals/{approval_id}")
            browser.click(f"form[action='/approvals/{approval_id}/approve'] button")
            assert "is now approved" in browser.text()
            assert "waiting for the agent" in browser.text()

            done = await agent.ok("execute_approved", {"approval_id": approval_id})
            assert done["status"] == "executed", done
            # The page reloads itself every 2 s (a meta refresh): wait for it to settle.
            for _ in range(15):
                browser.wait_event("Page.loadEventFired")
                if "succeeded" in browser.text():
                    break
            after = browser.text()
            assert "succeeded" in after, after
            assert "local:spot-w is running on node-b" in after, after
            assert "newest good checkpoint" in after and "taken" in after
            _shoot(browser, f"{server.url}/approvals/{approval_id}", "outcome", shots)

            # The read views, reached by the desk's navigation (links, no script).
            for view, wanted in VIEWS.items():
                _width(browser, "desktop")
                browser.goto(f"{server.url}/approvals")
                browser.click(f"nav a[href='/approvals/{view}']")
                shown = browser.text()
                for text in wanted:
                    assert text in shown, (view, text, shown)
                _shoot(browser, f"{server.url}/approvals/{view}", view, shots)
        finally:
            browser.close()
    assert lab.node_of(workload) == "node-b"
    for name in ("list", "request", "outcome", *VIEWS):
        for width in WIDTHS:
            png = (shots / f"desk-{name}-{width}.png").read_bytes()
            assert png.startswith(b"\x89PNG") and len(png) > 10_000
