"""``clawpoint approvals list`` pages: the installed script, many pending requests.

A flood of requests must not make the approver's list slow or endless: ``--limit`` and
``--cursor`` walk it newest first, ``--json`` carries ``next_cursor`` (null on the last
page) and the total, and a cursor that names no request is a usage error (exit 2).
"""

from __future__ import annotations

from core.config import load_settings
from core.guardrails.approvals import ApprovalsConfig
from core.model import Principal, PrincipalKind
from core.service.facade import bootstrap
from tests.cli.conftest import ROOT, Cli
from tests.guardrails.conftest import make_plan

AGENTS = [Principal(id=f"mcp:agent-{i}", kind=PrincipalKind.AGENT) for i in range(3)]


def _seed(cli: Cli, count: int) -> list[str]:
    """``count`` pending requests from three agents; their ids, newest first."""
    cli.config("")
    service = bootstrap(load_settings(cli.home))
    store = service.guard.approvals
    store.config = ApprovalsConfig(max_pending_per_principal=count)
    ids = [
        store.create(make_plan(target=f"local:job-{i}"), AGENTS[i % 3], "flood").id
        for i in range(count)
    ]
    return ids[::-1]


def test_the_list_pages_newest_first_to_the_end(cli: Cli) -> None:
    cli.extra_env["PYTHONPATH"] = str(ROOT)  # this checkout's code, not the installed one
    ids = _seed(cli, 120)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        args = ["approvals", "list", "--json", "--limit", "50"]
        r = cli(*args, *(["--cursor", cursor] if cursor else []))
        assert r.code == 0, str(r)
        body = r.json()
        assert body["total"] == 120
        assert len(body["approvals"]) <= 50
        seen += [a["id"] for a in body["approvals"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and seen == ids  # each once, newest first
    # The table shows the first page and how to get the next.
    r = cli("approvals", "list", "--limit", "5")
    assert r.code == 0, str(r)
    assert "5 of 120" in r.stdout and f"--cursor {ids[4]}" in r.stdout
    assert ids[5] not in r.stdout


def test_bad_paging_options_are_usage_errors(cli: Cli) -> None:
    cli.extra_env["PYTHONPATH"] = str(ROOT)
    _seed(cli, 3)
    r = cli("approvals", "list", "--json", "--cursor", "apr-0000000000")
    assert r.code == 2 and "names no approval request" in r.stdout + r.stderr, str(r)
    for bad in ("0", "501", "many"):
        r = cli("approvals", "list", "--limit", bad)
        assert r.code == 2, str(r)
