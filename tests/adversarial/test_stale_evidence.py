"""Evidence ends when the world contradicts it; a grant can be kept for the watch loop alone.

A person grants "migrate on node-down". Node-b goes down and a watch pass (the installed
command) records it; then node-b comes back. Before the fix the sighting counted for ten
more minutes, and an agent's migrate off the now healthy node ran under the grant with no
person. Now:

- between watch passes, the claim reads the node's health again: the sighting ends
  (``evidence.ended`` by ``system:claim``) and the agent is sent to a person;
- the next watch pass that sees the node up ends the sighting itself (``ended`` in its
  report);
- a grant limited with ``principals=scheduler`` covers the watch loop's plans only: an agent
  acting on the same live evidence is sent to a person, the scheduler is not; a misspelt
  kind is refused by ``clawpoint approvals grant`` (exit 2).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.backends.local.backend import LocalBackend
from core.model import Action
from core.watch.loop import SCHEDULER
from tests.adversarial.conftest import PERSON, Lab, agent_session, approval_id_of
from tests.service.conftest import counter, wait_step

pytestmark = [pytest.mark.anyio]

CLAWPOINT = Path(sys.executable).parent / "clawpoint"
NODE = "local:node-b"


def _cli(lab: Lab, *args: str) -> subprocess.CompletedProcess[str]:
    assert CLAWPOINT.exists(), f"{CLAWPOINT} is not installed: run 'make venv'"
    return subprocess.run(
        [str(CLAWPOINT), *args], env=lab.env(), capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip


def _watch(lab: Lab) -> dict[str, Any]:
    done = _cli(lab, "watch", "--once", "--json")
    assert done.returncode in (0, 20, 21), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _set(lab: Lab, health: str) -> None:
    local = lab.service.backend("local")
    assert isinstance(local, LocalBackend)
    local.set_node_state("node-b", health=health, reason="test")


def _live(lab: Lab) -> list[str]:
    return [e.trigger for e in lab.service.guard.grants.evidence.live() if e.subject == NODE]


def _start(lab: Lab, name: str) -> str:
    # The cooperative engine: a migrate needs no CRIU, and none runs unless a grant covers it.
    spec = counter(lab.settings, name, mb=1, node="node-b", engine="cooperative")
    lab.service.run_workload(spec, detach=True, principal=PERSON)
    wait_step(lab.settings, name, 2)
    return f"local:{name}"


async def test_a_node_back_up_ends_its_down_evidence_at_claim_and_at_the_next_pass(
    lab: Lab,
) -> None:
    ref = _start(lab, "stale")
    grant = lab.service.grant(
        Action.MIGRATE, {"trigger": "node-down"}, max_per_hour=10, expires="1h",
        reason="a down node cannot wait", principal=PERSON,
    )  # fmt: skip
    _set(lab, "down")
    _watch(lab)
    assert _live(lab) == ["node-down"]
    _set(lab, "healthy")  # back up; no watch pass since
    async with agent_session(lab, "stdio") as agent:
        asked = await agent.ok("migrate_workload", {"workload": ref, "to": "node-a"})
        approval_id_of(asked)  # a person is asked: the sighting no longer holds
        assert lab.node_of(ref) == "node-b" and _live(lab) == []
        ended = [e for e in lab.service.audit.entries(subject=NODE) if e.kind == "evidence.ended"]
        assert [e.principal for e in ended] == ["system:claim"], ended
        assert "healthy again" in ended[0].data["reason"]
        assert not [
            e for e in lab.service.audit.entries(subject=grant.id) if e.kind == "grant.used"
        ]

        # Down again, seen; back up, seen by the next pass: that pass ends it.
        _set(lab, "down")
        assert _watch(lab)["evidence"] and _live(lab) == ["node-down"]
        _set(lab, "healthy")
        report = _watch(lab)
        assert [(e["trigger"], e["subject"]) for e in report["ended"]] == [("node-down", NODE)]
        assert _live(lab) == []


async def test_a_grant_kept_for_the_scheduler_does_not_cover_an_agent(lab: Lab) -> None:
    refused = _cli(lab, "approvals", "grant", "--action", "migrate", "--scope",
                   "trigger=node-down", "--scope", "principals=schedular", "--reason", "typo")  # fmt: skip
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert "schedular" in refused.stderr + refused.stdout
    ok = _cli(lab, "approvals", "grant", "--action", "migrate", "--scope", "trigger=node-down",
              "--scope", "principals=scheduler", "--reason", "watch may move off down nodes")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    ref = _start(lab, "kept")
    _set(lab, "down")
    _watch(lab)
    assert _live(lab) == ["node-down"]
    async with agent_session(lab, "stdio") as agent:
        asked = await agent.ok("migrate_workload", {"workload": ref, "to": "node-a"})
        approval_id_of(asked)  # the same live evidence, but the grant is not the agent's
    assert lab.node_of(ref) == "node-b"
    done = lab.service.act(Action.MIGRATE, ref, {"to": "node-a"}, principal=SCHEDULER,
                           reason="node-b is down")  # fmt: skip
    assert done.status == "executed", done.message
    assert lab.node_of(ref) == "node-a"
