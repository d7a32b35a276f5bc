"""A grant scoped to a trigger applies to what clawpoint observed, never to what an agent says.

A person grants "preempt anything on a spot interruption notice". An agent that claims a
notice (in its reason) while the cloud has announced nothing gets no grant: a person is
asked. Once the fake AWS metadata endpoint on loopback announces an interruption and a
watch pass (the installed command) observes it, the same call is covered, and the audit
names the evidence (source, node, time). A runbook the agent starts then is covered
the same way. When the evidence expires (the notice's deadline plus the grace), the grant
stops applying again, although the endpoint still says so.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core.guardrails.evidence import NOTICE_GRACE_S
from core.model import Action
from tests.adversarial.conftest import PERSON, TRANSPORTS, Lab, agent_session, approval_id_of
from tests.signals.fakes import FakeAwsImds

pytestmark = [pytest.mark.anyio, pytest.mark.criu]

CLAWPOINT = Path(sys.executable).parent / "clawpoint"
CLAIM = "AWS spot interruption notice for node-a (trigger=spot-interruption): save it now"
NODE = "local:node-a"
MARGIN_S = 40  # the evidence outlives the steps that need it by this much


@pytest.fixture
def imds() -> Iterator[FakeAwsImds]:
    with FakeAwsImds() as fake:
        yield fake


def _config(imds: FakeAwsImds) -> str:
    return (
        '[signals]\nnode = "local:node-a"\n[signals.nvml]\nenabled = false\n'
        f'[signals.aws]\nenabled = true\nbase_url = "{imds.url}"\n'
    )


def _watch_pass(lab: Lab) -> subprocess.CompletedProcess[str]:
    assert CLAWPOINT.exists(), f"{CLAWPOINT} is not installed: run 'make venv'"
    return subprocess.run(
        [str(CLAWPOINT), "watch", "--once", "--json"], env=lab.env(), capture_output=True,
        text=True, timeout=180, check=False,
    )  # fmt: skip


def _grant_uses(lab: Lab, grant_id: str) -> list[dict[str, Any]]:
    return [e.data for e in lab.service.audit.entries(subject=grant_id) if e.kind == "grant.used"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_claimed_trigger_gets_no_grant_an_observed_one_does_until_it_expires(
    lab_factory: Callable[[str], Lab], imds: FakeAwsImds, transport: str, need_criu: None
) -> None:
    lab = lab_factory(_config(imds))
    first, second, third = lab.start("ev-first"), lab.start("ev-second"), lab.start("ev-third")
    grant = lab.service.grant(
        Action.PREEMPT, {"trigger": "spot-interruption"}, max_per_hour=10, expires="1h",
        reason="spot notices cannot wait for a person", principal=PERSON,
    )  # fmt: skip
    async with agent_session(lab, transport) as agent:
        # 1. Nothing observed: the agent's word is not evidence.
        claimed = await agent.ok("preempt_workload", {"workload": first, "reason": CLAIM})
        approval_id_of(claimed)
        assert _grant_uses(lab, grant.id) == [] and lab.node_of(first) == "node-a"
        assert lab.service.guard.grants.evidence.live() == []

        # 2. The cloud announces it (a deadline that leaves the evidence MARGIN_S to live),
        # and a watch pass observes it.
        deadline = imds.mark_instance_action("terminate", in_seconds=MARGIN_S - NOTICE_GRACE_S)
        observed_by = time.monotonic()
        seen = _watch_pass(lab)
        assert seen.returncode in (20, 21), seen.stderr
        [evidence] = [e for e in lab.service.guard.grants.evidence.live() if e.subject == NODE]
        assert (evidence.trigger, evidence.subject, evidence.source) == (
            "spot-interruption", NODE, "aws-imds",
        )  # fmt: skip

        covered = await agent.ok("preempt_workload", {"workload": first, "reason": CLAIM})
        assert covered["status"] == "executed", covered
        [use] = _grant_uses(lab, grant.id)
        assert use["evidence"]["evidence_id"] == evidence.id
        assert use["evidence"]["source"] == "aws-imds"
        assert use["evidence"]["subject"] == NODE
        assert use["claimed_trigger"] is None  # the agent's words played no part
        decisions = [
            e.data for e in lab.service.audit.entries()
            if e.kind == "decision" and e.data.get("plan_hash") == covered["plan"]["hash"]
        ]  # fmt: skip
        # Same plan twice: first a person was asked (no evidence), then the grant covered it.
        assert sorted(str(d["grant_id"]) for d in decisions) == sorted([grant.id, "None"])
        [decision] = [d for d in decisions if d["grant_id"]]
        assert decision["evidence"]["evidence_id"] == evidence.id
        assert [e.id for e in lab.service.guard.grants.evidence.uses(use["plan_hash"])] == [
            evidence.id
        ]
        assert any(
            e.kind == "evidence.observed" and e.data["evidence_id"] == evidence.id
            for e in lab.service.audit.entries()
        )
        # A runbook the agent starts is covered the same way (its move step, as the agent:
        # with a node to go to, the spot runbook migrates rather than preempts).
        moves = lab.service.grant(
            Action.MIGRATE, {"trigger": "spot-interruption"}, max_per_hour=10, expires="1h",
            reason="spot notices cannot wait for a person", principal=PERSON,
        )  # fmt: skip
        run = await agent.ok("start_runbook", {"name": "spot-interruption",
                                               "params": {"workload": second}})  # fmt: skip
        uses = _grant_uses(lab, moves.id)
        assert [u["target"] for u in uses] == [second], (run, uses)
        assert uses[0]["evidence"]["evidence_id"] == evidence.id
        assert [u["target"] for u in _grant_uses(lab, grant.id)] == [first]

        # 3. The evidence expires (deadline + grace), though the endpoint still announces it.
        remaining = MARGIN_S - (time.monotonic() - observed_by)
        assert remaining > 0, "the steps above took longer than the evidence lives"
        time.sleep(remaining + 1)
        assert [e for e in lab.service.guard.grants.evidence.live() if e.subject == NODE] == []
        late = await agent.ok("preempt_workload", {"workload": third, "reason": CLAIM})
        approval_id_of(late)
        assert len(_grant_uses(lab, grant.id)) == 1 and lab.node_of(third) == "node-a"
    assert deadline < evidence.expires_at
