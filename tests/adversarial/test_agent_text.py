"""An agent's words are data: markup in a reason reaches every person verbatim.

The agent asks for a migration with a reason full of Rich markup (``[/]`` would crash the
CLI, ``[conceal]`` would hide the lines after it), Slack control sequences (``<!channel>``,
a disguised link) and HTML. A person then reads the request on every people path: the
installed ``clawpoint approvals show`` (subprocess), the webhook message (the test receiver),
and the approval page (real HTTP on loopback). Each shows the reason as typed and still
shows the lines that matter (Risk, Could lose, Code).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.adversarial.conftest import ROOT, Lab, agent_session, approval_id_of
from tests.webhook import Receiver

pytestmark = [pytest.mark.anyio, pytest.mark.criu]

CLAWPOINT = ROOT / ".venv" / "bin" / "clawpoint"
HOSTILE = "[/] [conceal] <!channel> <http://127.0.0.1/x|click me> & <b>x</b> :x:"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def cli(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    env = lab.env(COLUMNS="400")
    return subprocess.run(
        [str(CLAWPOINT), *args], env=env, capture_output=True, text=True, timeout=120
    )


def mrkdwn_texts(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        if value.get("type") == "mrkdwn":
            yield value
        for v in value.values():
            yield from mrkdwn_texts(v)
    elif isinstance(value, list):
        for v in value:
            yield from mrkdwn_texts(v)


async def test_markup_in_a_reason_is_shown_verbatim_everywhere(
    lab_factory: Callable[[str], Lab], receiver: Receiver, need_criu: None
) -> None:
    lab = lab_factory(f'[notify]\nwebhook_url = "{receiver.url}"\n')
    approver = "approver-" + os.urandom(16).hex()
    server = lab.http_server(approver_token=approver)
    workload = lab.start("marked")
    async with agent_session(lab, "http", server=server) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload, "reason": HOSTILE})
        approval_id = approval_id_of(out)

    # The terminal: the installed command, as a person runs it.
    shown = cli(lab, "approvals", "show", approval_id)
    assert shown.returncode == 0, shown.stderr
    assert f"Why: {HOSTILE}" in shown.stdout
    for label in ("Risk: ", "Could lose: ", "Code: ", "Steps:"):
        assert label in shown.stdout, (label, shown.stdout)
    # Input quoted back in an error message is data too: a clean "not found", no traceback.
    missing = cli(lab, "approvals", "show", "apr-[/]x[conceal]")
    assert missing.returncode in (2, 3), missing.stderr
    assert "[/]x[conceal]" in missing.stderr and "Traceback" not in missing.stderr

    # The webhook: Slack's three control characters escaped, no mention, no disguised link.
    [body] = receiver.bodies
    texts = [body["text"], *(t["text"] for t in mrkdwn_texts(body["blocks"]))]
    assert all("<!channel>" not in t and "<http" not in t for t in texts)
    assert "&lt;!channel&gt; &lt;http://127.0.0.1/x|click me&gt; &amp; &lt;b&gt;" in body["text"]
    assert any("&lt;!channel&gt;" in t["text"] for t in mrkdwn_texts(body["blocks"]))
    assert all(t.get("verbatim") is True for t in mrkdwn_texts(body["blocks"]))
    assert body["clawpoint"]["reason"] == HOSTILE  # the raw value, as data

    # The approval page: HTML-escaped, shown as typed.
    with httpx2.Client(base_url=server.url, timeout=30) as http:
        login = http.post("/approvals/login", data={"token": approver, "name": "bob"})
        assert login.status_code == 303
        page = http.get(f"/approvals/{approval_id}")
    assert page.status_code == 200
    assert "[/] [conceal] &lt;!channel&gt; &lt;http://127.0.0.1/x|click me&gt;" in page.text
    assert "<b>x</b>" not in page.text and "&lt;b&gt;x&lt;/b&gt;" in page.text
    assert "Could lose" in page.text and "One-time code" in page.text


def test_agent_names_in_tables_are_not_markup(tmp_path: Path) -> None:
    """A label value with markup in ``clawpoint workloads`` is printed as it is."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(CLAWPOINT_HOME=str(home), PYTHONPATH=str(ROOT), COLUMNS="400")
    # An unknown workload whose name is refused: the message quotes it back, unparsed.
    r = subprocess.run(
        [str(CLAWPOINT), "checkpoints", "local:[bold]x[/]"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "[bold]x[/]" in r.stderr and "Traceback" not in r.stderr
