"""A checkpoint says when it could not keep a program's queued inotify events.

CRIU dumps inotify watches but not the events queued on them (criu/fsnotify.c,
``dump_one_inotify``: "The 0xID inotify events will be dropped"; checkpoint-restore/criu#48):
a restore gives the program none of them. Through the installed CLI and real CRIU, a
checkpoint of a program with an unread event counts it in its timings
(``inotify_queues_dropped``, what ``clawpoint checkpoints --json`` shows) and its wrapper
logs why; one whose queue was empty says nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.workloads.conftest import PROGRAMS, Cli

pytestmark = pytest.mark.criu


def _checkpoint_timings(cli: Cli, name: str, mode: str, watched: Path) -> dict[str, float]:
    watched.mkdir()
    cli("run", "--name", name, "--node", "node-a", "--detach", "--", sys.executable,
        str(PROGRAMS / "inotify_backlog.py"), mode, str(watched))  # fmt: skip
    cli.wait_progress(name, 10)
    cli("checkpoint", f"local:{name}", "--yes")
    [saved] = json.loads(cli("checkpoints", f"local:{name}", "--json").stdout)
    return dict(saved["timings"])


def test_a_checkpoint_counts_the_inotify_queue_it_could_not_keep(cli: Cli, tmp_path: Path) -> None:
    timings = _checkpoint_timings(cli, "backlog", "backlog", tmp_path / "watched")
    assert timings.get("inotify_queues_dropped") == 1, timings
    assert "criu.inotify_events_dropped" in cli.log("backlog")


def test_an_empty_queue_is_not_reported(cli: Cli, tmp_path: Path) -> None:
    timings = _checkpoint_timings(cli, "drained", "drained", tmp_path / "watched")
    assert "inotify_queues_dropped" not in timings, timings
    assert "criu.inotify_events_dropped" not in cli.log("drained")
