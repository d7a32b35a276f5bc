"""``clawpoint approvals show`` tells the spot-notice story's facts, as the page and the
webhook message do (one source: ``core.guardrails.request_facts``).

A notice reclaims the workload's node (evidence as the watch records it); the agent asks to
move it off. The installed command, run as a subprocess, shows the countdown, what doing
nothing costs, a pause in real units and an undo that does not lead back onto that node.
"""

from __future__ import annotations

from datetime import timedelta

from core.config import load_settings
from core.guardrails.evidence import NOTICE_GRACE_S
from core.model import Action, Principal, PrincipalKind, utcnow
from core.service.facade import bootstrap
from tests.cli.conftest import ROOT, Cli

AGENT = Principal(id="mcp:stdio/cafe0002", kind=PrincipalKind.AGENT)


def test_approvals_show_says_the_deadline_the_cost_and_a_possible_undo(cli: Cli) -> None:
    cli.extra_env["PYTHONPATH"] = str(ROOT)
    ref = cli.start_counter("spot", node="node-a")
    service = bootstrap(load_settings(cli.home))
    assert service.guard.situation is not None  # the webhook message reads the world too
    reclaim = utcnow() + timedelta(seconds=300)
    service.guard.grants.evidence.record(
        "spot-interruption", "local:node-a", source="aws-imds",
        expires_at=reclaim + timedelta(seconds=NOTICE_GRACE_S),
        detail=f"aws terminate at {reclaim:%H:%M:%S} UTC",
    )  # fmt: skip
    asked = service.act(Action.MIGRATE, ref, {"to": "node-b"}, principal=AGENT, reason="spot")
    assert asked.approval is not None, asked
    shown = cli("approvals", "show", str(asked.approval["id"]))
    assert shown.code == 0, str(shown)
    out = shown.stdout
    assert "Deadline: node-a is reclaimed in " in out and "aws-imds notice" in out, out
    assert "If nobody acts: node-a goes away and local:spot dies with it" in out, out
    assert "no way back to node-a" in out and "--to node-a" not in out, out
    assert "about 0 seconds" not in out and "after the deadline" in out, out
    as_json = cli("approvals", "show", str(asked.approval["id"]), "--json")
    assert as_json.code == 0 and "node-a is reclaimed in" in as_json.json()["text"], as_json
