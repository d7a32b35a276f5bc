"""What a request says, from one source: the spot-notice story's three wrong facts, fixed.

A spot notice reclaims node-a in 110 s and an agent asks to migrate the workload off it. The
person must read the countdown (not only the request's 15-minute expiry), a pause that is
not "about 0 seconds", an undo that does not send the workload back onto node-a, and what
doing nothing costs. The page, the webhook message and ``approvals show`` render the same
facts (``approval_text``/``build_payload`` here; the page and the CLI in their own tests).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from core.actions import undo_step
from core.config import load_settings
from core.guardrails.approvals import ApprovalStore, ApprovalView
from core.guardrails.evidence import NOTICE_GRACE_S, Evidence
from core.guardrails.notify import build_payload
from core.guardrails.prompts import approval_text
from core.guardrails.request_facts import (
    Notice,
    Situation,
    human_duration,
    notice_deadline,
    request_facts,
)
from core.model import Action, utcnow
from core.service.facade import bootstrap
from tests.guardrails.conftest import AGENT, make_plan


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(0.01, "under a second"), (0.4, "0.4 s"), (3, "3 s"), (40, "40 s"), (110, "1 min 50 s"),
     (120, "2 min"), (1500, "25 min"), (5400, "1.5 h"), (7200, "2 h")],
)  # fmt: skip
def test_durations_read_at_a_glance(seconds: float, said: str) -> None:
    assert human_duration(seconds) == said


# As a backend records it (a neutral step) and as plans made before that recorded it.
NEUTRAL_UNDO = f"migrate it back: {undo_step(Action.MIGRATE, 'local:train-1', to='node-a')}"
CLI_UNDO = "migrate it back: clawpoint migrate local:train-1 --to node-a"


def _spot_request(
    approvals: ApprovalStore, pause: float = 0.4, undo: str = NEUTRAL_UNDO
) -> ApprovalView:
    plan = make_plan(Action.MIGRATE).model_copy(
        update={
            "expected_pause_s": pause,
            "rollback": undo,
            "summary": "Move local:train-1 from node-a to node-b without losing progress",
        }
    )
    view, _ = approvals.request(plan.sealed(), AGENT, "spot notice on node-a")
    return view


def _spot_situation(left_s: float = 110, checkpoint_age_s: float = 720) -> Situation:
    now = utcnow()
    return Situation(
        now=now,
        notices=[
            Notice(
                trigger="spot-interruption",
                node="local:node-a",
                source="aws-imds",
                deadline=now + timedelta(seconds=left_s),
                detail="aws terminate",
            )
        ],
        workload="local:train-1",
        node="local:node-a",
        last_good_checkpoint="local:train-1/3",
        last_good_at=now - timedelta(seconds=checkpoint_age_s),
        unsafe_nodes={"local:node-a": "being reclaimed (aws-imds notice)"},
    )


@pytest.mark.parametrize("undo", [NEUTRAL_UNDO, CLI_UNDO])
def test_the_spot_notice_request_tells_the_truth(approvals: ApprovalStore, undo: str) -> None:
    facts = request_facts(_spot_request(approvals, undo=undo), _spot_situation())
    # The deadline is the node's reclaim time, not the request's expiry.
    assert facts.urgent and "node-a is reclaimed in 1 min 50 s" in facts.deadline
    assert "aws-imds notice" in facts.deadline
    assert "after the deadline" in facts.expires
    # A sub-second pause is not "about 0 seconds".
    assert facts.pause == "about 0.4 s"
    # No undo onto the node being reclaimed.
    assert "node-a" not in facts.undo.replace("no way back to node-a", "")
    assert "no way back to node-a" in facts.undo
    # Doing nothing: the node dies, failover loses the work since the last good checkpoint.
    assert "node-a goes away and local:train-1 dies with it" in facts.if_nothing
    assert "local:train-1/3 (taken 12 min ago)" in facts.if_nothing
    assert "12 min of work now, 14 min by the deadline" in facts.if_nothing


def test_without_a_notice_the_plan_words_stand(approvals: ApprovalStore) -> None:
    facts = request_facts(_spot_request(approvals, pause=0.0))
    assert not facts.urgent and facts.deadline.startswith("none observed")
    assert facts.pause == "none expected"
    # An approval message is read by a person beside the agent's tool call: the tool words.
    assert facts.undo == "migrate it back: migrate_workload(workload=local:train-1, to=node-a)"
    assert "after the deadline" not in facts.expires
    assert "no good checkpoint" in facts.if_nothing


def test_an_sla_deadline_gives_the_slack(approvals: ApprovalStore) -> None:
    now = utcnow()
    situation = Situation(now=now, sla_deadline=now + timedelta(hours=3), sla_slack_s=1500)
    facts = request_facts(_spot_request(approvals), situation)
    assert facts.urgent and "25 min of slack" in facts.deadline
    assert "SLA deadline may be missed" in facts.if_nothing


def test_three_renderings_say_the_same(approvals: ApprovalStore) -> None:
    view = _spot_request(approvals)
    situation = _spot_situation()
    facts = request_facts(view, situation)
    text = approval_text(view.plan, view, [], situation)
    said = text.as_text(code="ABCDEFGH")
    body = build_payload(view, text, "ABCDEFGH", [])
    for fact in (facts.deadline, facts.if_nothing, facts.pause, facts.undo):
        assert fact in said
        assert fact in body["text"] or fact.replace(">", "&gt;") in body["text"]
    assert body["clawpoint"]["deadline"] == facts.deadline
    assert body["clawpoint"]["if_nothing"] == facts.if_nothing
    assert body["clawpoint"]["undo"] == facts.undo


def test_a_notice_deadline_is_read_from_the_watch_evidence() -> None:
    now = utcnow()
    deadline = now + timedelta(seconds=110)
    seen = Evidence(
        id="evd-1", trigger="spot-interruption", subject="local:node-a", source="aws-imds",
        first_seen=now, observed_at=now,
        expires_at=deadline + timedelta(seconds=NOTICE_GRACE_S),
        detail=f"aws terminate at {deadline:%H:%M:%S} UTC",
    )  # fmt: skip
    assert notice_deadline(seen) == deadline
    undated = seen.model_copy(update={"detail": "aws terminate"})
    assert notice_deadline(undated) is None


def test_a_decided_request_no_longer_weighs_doing_nothing(approvals: ApprovalStore) -> None:
    from tests.guardrails.conftest import ALICE

    view = approvals.approve(_spot_request(approvals).id, ALICE, via="page")
    facts = request_facts(view, _spot_situation())
    assert facts.if_nothing == "not a choice any more: the request is approved"
    assert "after the deadline" not in facts.expires and facts.urgent


def test_an_unreadable_backend_leaves_the_plans_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = bootstrap(load_settings(tmp_path))

    def broken() -> list[object]:
        raise OSError("backend state unreadable")

    monkeypatch.setattr(service.backends["local"], "nodes", broken)
    plan = make_plan(target="local:train-1")
    assert service.situation(plan).notices == []  # no crash: the request stays readable
