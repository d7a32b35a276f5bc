"""A person approves an agent's migration in a real browser; the agent then runs it once.

Headless Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
JSON messages on fds 3 and 4, NUL-terminated), so no driver or extra package is needed. The
approver logs in with the approver token, opens the request, reads its details and clicks
Approve with real mouse events; a screenshot of the detail page is kept in the test's tmp dir.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from core.guardrails.approvals import ApprovalStatus
from tests.adversarial.conftest import Lab, agent_session, approval_id_of

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAGE_HOST = "127.0.0.1"  # where the tests' servers listen (tests/adversarial/conftest.py)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.criu,
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
    ),
]


class Browser:
    """Just enough of the DevTools protocol: navigate, evaluate, click, screenshot."""

    def __init__(self, profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        assert CHROMIUM is not None
        argv = [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={profile}",
            # Tests talk only to loopback. The switches above still left Chromium 156 looking
            # up content-autofill.googleapis.com (a page with a form), accounts.google.com,
            # update.googleapis.com and clients2.google.com: its resolver answers every name
            # but the page's address with "not found", so no lookup leaves the machine.
            f"--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE {PAGE_HOST}",
            "--remote-debugging-pipe", "--window-size=900,1100", "about:blank",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),  # the child sees its ends there (set up just before exec)
            preexec_fn=_fds_to_3_and_4(to_browser_r, from_browser_w),
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._next = 0
        self.session = ""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        self.session = attached["sessionId"]
        self.send("Page.enable")

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buf:
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise AssertionError("chromium closed the DevTools pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return dict(json.loads(raw))

    def wait_event(self, name: str) -> None:
        while self._read().get("method") != name:
            pass

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        out = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return out["result"].get("value")

    def text(self) -> str:
        return str(self.js("document.body.innerText"))

    def click(self, selector: str, *, navigates: bool = True) -> None:
        """A real mouse click in the middle of the element (scrolled into view first)."""
        box = self.js(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            " el.scrollIntoView({block: 'center'}); const r = el.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1},
            )
        if navigates:
            self.wait_event("Page.loadEventFired")

    def type_into(self, selector: str, value: str) -> None:
        self.js(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", {"text": value})

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(data["data"]))

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (AssertionError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


def _fds_to_3_and_4(read_end: int, write_end: int) -> Any:
    def move() -> None:  # runs in the child between fork and exec
        r, w = os.dup(read_end), os.dup(write_end)
        os.dup2(r, 3)
        os.dup2(w, 4)

    return move


async def test_person_approves_in_chromium_and_the_agent_executes_once(
    lab: Lab, tmp_path: Path, need_criu: None
) -> None:
    approver = "approver-" + os.urandom(16).hex()
    server = lab.http_server(approver_token=approver)
    workload = lab.start("browser-w")
    async with agent_session(lab, "http", server=server) as agent:
        out = await agent.ok(
            "migrate_workload", {"workload": workload, "reason": "node-b is 70% cheaper"}
        )
        approval_id = approval_id_of(out)
        page_path = next(p for p in out["approval"]["how_to_approve"] if p["kind"] == "page")
        assert f"/approvals/{approval_id}" in page_path["how"]

        browser = Browser(Path(tempfile.mkdtemp(prefix="chromium-", dir=tmp_path)))
        try:
            browser.goto(f"{server.url}/approvals")
            assert "Approver login" in browser.text()
            browser.type_into("input[name=token]", approver)
            browser.type_into("input[name=name]", "alice")
            browser.click("form[action='/approvals/login'] button")
            listing = browser.text()
            assert "Pending approvals (1)" in listing and "Move local:browser-w" in listing
            browser.click(f"a[href='/approvals/{approval_id}']")
            detail = browser.text()
            for expected in (
                "Move local:browser-w from node-a to node-b",  # summary
                "node-b is 70% cheaper",  # the agent's reason
                "disruptive",  # risk
                "checkpoint local:browser-w and stop it on node-a",  # steps
                "restore it on node-b from that checkpoint",
                "mcp:clawpoint-agent",  # who asked
                "One-time code",
            ):
                assert expected in detail, expected
            browser.screenshot(tmp_path / "approval-detail.png")
            browser.click(f"form[action='/approvals/{approval_id}/approve'] button")
            assert "is now approved" in browser.text()
        finally:
            browser.close()

        view = lab.service.get_approval(approval_id)
        assert view.status is ApprovalStatus.APPROVED
        assert view.decided_by == "page:alice" and view.decided_via == "page"
        assert lab.executions() == []  # approving runs nothing by itself

        done = await agent.ok("execute_approved", {"approval_id": approval_id})
        assert done["status"] == "executed", done
        again = await agent.error("execute_approved", {"approval_id": approval_id})
        assert "used" in again
    assert len(lab.executions(out["plan"]["hash"])) == 1
    assert lab.node_of(workload) == "node-b"
    png = (tmp_path / "approval-detail.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
