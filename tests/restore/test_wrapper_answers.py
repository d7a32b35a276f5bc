"""A wrapper that is going away answers every request it took, instead of leaving the caller
to wait for an answer that never comes (or to read a closed connection as a failure)."""

from __future__ import annotations

import queue
import sys
from pathlib import Path
from typing import Any

from core.config import load_settings
from core.specs import RunSpec
from core.wrapper.desk import Job
from core.wrapper.supervisor import Supervisor


def _supervisor(tmp_path: Path) -> Supervisor:
    settings = load_settings(tmp_path / "home")
    spec = RunSpec(name="w", command=[sys.executable, "-c", "pass"], home=str(settings.home))
    return Supervisor(settings, spec)


def test_queued_checkpoints_are_refused_when_the_loop_ends(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path)
    reply: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
    sup.desk.jobs.put(Job("checkpoint", stop=True, reply=reply))
    sup.desk.refuse_pending()
    answer = reply.get_nowait()
    assert answer["error"]["error"] == "conflict"
    assert "ended before the checkpoint" in answer["error"]["message"]


def test_a_request_after_the_end_is_answered_at_once(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path)
    sup.desk.refuse_pending()
    sent: list[dict[str, Any]] = []
    sup.desk.dispatch({"op": "checkpoint", "stop": False}, sent.append)
    assert sent and sent[0]["error"]["error"] == "conflict"
    assert sup.desk.jobs.empty()  # nothing queued that nobody would run
    sup.desk.wait_for_answers(timeout_s=1)  # and nothing left unanswered
