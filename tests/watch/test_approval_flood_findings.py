"""``clawpoint watch --once`` with a flood of pending approvals: a page of findings, not all.

Each pass reports the newest ``APPROVAL_FINDINGS`` pending requests one by one and the rest
in one finding that says how to list them, so a pass stays quick and its report short
however many requests wait; a second pass has nothing new to say.
"""

from __future__ import annotations

import json

from core.watch.report import APPROVAL_FINDINGS
from tests.cli.conftest import ROOT, Cli
from tests.cli.test_approval_list_pages import _seed


def test_a_pass_reports_a_page_of_pending_approvals(cli: Cli) -> None:
    cli.extra_env["PYTHONPATH"] = str(ROOT)  # this checkout's code, not the installed one
    ids = _seed(cli, 200)
    r = cli("watch", "--once", "--json")
    assert r.code == 20, str(r)
    report = json.loads(r.stdout)
    approvals = [f for f in report["findings"] if f["kind"] == "approval"]
    assert len(approvals) == APPROVAL_FINDINGS + 1
    assert [f["approval_id"] for f in approvals[:-1]] == ids[:APPROVAL_FINDINGS]
    more = approvals[-1]
    assert more["approval_id"] is None
    assert f"{200 - APPROVAL_FINDINGS} more approvals waiting (200 in all" in more["message"]
    assert f"--cursor {ids[APPROVAL_FINDINGS - 1]}" in more["message"]
    assert report["still_pending"] == ids[:APPROVAL_FINDINGS]
    assert report["pending_total"] == 200
    # Nothing changed: the next pass prints nothing, and still says someone is needed.
    again = cli("watch", "--once")
    assert again.code == 20 and again.stdout == "", str(again)
