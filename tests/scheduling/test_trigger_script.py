"""scripts/openclaw-trigger.js, evaluated with Node against the installed clawpoint: it
fires only for new findings that need someone, with a short message (never the JSON report),
and once per finding. tests/scheduling/test_openclaw.py runs the same script in a real
gateway; this file checks what it answers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.scheduling.conftest import NODE_BIN, Site, need_node_tools, render_trigger

HARNESS = Path(__file__).with_name("trigger_harness.mjs")


def evaluate(script: Path, state: Any = None) -> dict[str, Any]:
    proc = subprocess.run(
        [str(NODE_BIN / "node"), str(HARNESS), str(script), json.dumps(state)],
        capture_output=True, text=True, timeout=300, check=False,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert isinstance(answer, dict)
    return answer


@pytest.mark.node
def test_fires_once_per_new_finding_with_the_finding_as_message(site: Site, tmp_path: Path) -> None:
    need_node_tools()
    script = render_trigger(tmp_path / "trigger.js", site.home)
    site.start_workload()

    quiet = evaluate(script)
    assert quiet["fire"] is False  # nothing needs anyone: no wake-up

    site.imds.mark_instance_action("terminate", in_seconds=120)
    woke = evaluate(script)
    assert woke["fire"] is True, woke
    message = woke["message"]
    # The pass asked a person (no standing approval): the message says which approval.
    assert message.startswith("attention: approval "), message
    assert "waiting" in message and "local:counter" in message
    assert "{" not in message and len(message) <= 2000  # a line for people, not the report

    again = evaluate(script)  # same notice, same pending approval: nothing new
    assert again["fire"] is False, again


@pytest.mark.node
def test_what_watch_settles_alone_wakes_no_one(site: Site, tmp_path: Path) -> None:
    need_node_tools()
    script = render_trigger(tmp_path / "trigger.js", site.home)
    site.start_workload()
    site.grant_spot_moves()
    site.imds.mark_instance_action("terminate", in_seconds=120)
    answer = evaluate(script)
    assert answer["fire"] is False, answer
    moved = json.loads(site.cli("workloads", "--json").stdout)
    assert [(w["node"], w["state"]) for w in moved] == [("node-a", "running")]


@pytest.mark.node
def test_a_watch_that_cannot_run_fires_once(site: Site, tmp_path: Path) -> None:
    need_node_tools()
    script = render_trigger(tmp_path / "trigger.js", site.home)
    broken = tmp_path / "broken.js"
    broken.write_text(
        script.read_text().replace('const CLAWPOINT = "', 'const CLAWPOINT = "/nonexistent', 1)
    )
    first = evaluate(broken)
    assert first["fire"] is True and "gave no report" in first["message"]
    assert evaluate(broken, first["state"])["fire"] is False  # not again every 30 s
