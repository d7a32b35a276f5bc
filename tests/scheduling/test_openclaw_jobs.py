"""The OpenClaw recipes of docs/scheduling.md, run in a real OpenClaw gateway on loopback.

How the tests see a job ran: the gateway's own records. `openclaw cron runs ID` lists each
payload run (status, the command's output as `summary`, delivery); a condition trigger that
answers fire:false leaves no run, only `triggerEvalCount` in `openclaw cron get ID`. No
model is configured, so a fired agent turn ends with an auth error: the run is still
recorded, which is what "the agent was woken" means here.

Jobs are added (and run) with the recipes' `openclaw cron` commands; the records are read
through the gateway's admin HTTP RPC (`cron.get`, `cron.runs`: the same gateway methods and
JSON, without a Node start per read: see tests/scheduling/conftest.py). OpenClaw's own 30 s
minimum trigger interval sets this module's time. Where the workloads are, is read
in-process (tests/service_reads.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.scheduling.conftest import CLAWPOINT, Gateway, Site, render_trigger, wait_for
from tests.service_reads import workload_rows

pytestmark = pytest.mark.node

# The exact command of the quiet command job in docs/scheduling.md (absolute path).
QUIET_COMMAND = f"{CLAWPOINT} watch --once; case $? in 0|20|21) exit 0;; *) exit $?;; esac"
WAKE_MESSAGE = (
    "clawpoint watch found something that needs you (below). Look with the clawpoint tools "
    "(list_approvals, get_approval, list_runs); tell the person which approval to decide. "
    "If nothing needs doing, reply NO_REPLY."
)
STREAM_MATCH = "^(attention|error): "


def _latest_run(gw: Gateway, job: str, after: int) -> dict[str, Any] | None:
    runs = [r for r in gw.runs(job) if r.get("action") == "finished"]
    return runs[0] if len(runs) > after else None


def test_quiet_command_job_reports_only_news_and_never_fails_on_20_or_21(
    gateway: Gateway, site: Site
) -> None:
    site.start_workload()
    job = gateway.add(
        "--name", "clawpoint-watch", "--every", "5m", "--command", QUIET_COMMAND,
        "--command-env", f"CLAWPOINT_HOME={site.home}", "--announce",
    )  # fmt: skip
    try:
        gateway.run(job)
        quiet = wait_for("the quiet run", lambda: _latest_run(gateway, job, 0), every=2)
        assert quiet["status"] == "ok", quiet
        assert not quiet.get("summary")  # nothing printed: nothing to announce
        assert quiet.get("deliveryError") is None and quiet.get("delivered") is False

        site.imds.mark_instance_action("terminate", in_seconds=120)
        gateway.run(job)
        news = wait_for("the run after the notice", lambda: _latest_run(gateway, job, 1), every=2)
        # watch exited 20 (a person must approve): a success for the scheduler, not an error.
        assert news["status"] == "ok", news
        summary = news["summary"]
        assert summary.startswith("attention: approval ") and "local:counter" in summary
        assert not summary.lstrip().startswith("{")  # a line for people, not the JSON report
        pending = json.loads(site.cli("approvals", "list", "--json").stdout)["approvals"]
        assert any(a["status"] == "pending" for a in pending)
    finally:
        gateway.remove(job)


def test_trigger_job_wakes_the_agent_once_and_only_when_needed(
    gateway: Gateway, site: Site, tmp_path: Path
) -> None:
    site.start_workload()
    script = render_trigger(tmp_path / "clawpoint-trigger.js", site.home)
    job = gateway.add(
        "--name", "clawpoint-trigger", "--every", "30s", "--trigger-script", str(script),
        "--message", WAKE_MESSAGE, "--session", "isolated", "--no-deliver",
    )  # fmt: skip
    try:

        def evals() -> int:
            return int(gateway.job(job).get("state", {}).get("triggerEvalCount", 0))

        wait_for("a quiet evaluation", lambda: evals() >= 1, timeout=150, every=2)
        assert gateway.runs(job) == []  # fire:false: no agent turn, no run history

        site.imds.mark_instance_action("terminate", in_seconds=120)
        woke = wait_for("the wake-up", lambda: _latest_run(gateway, job, 0), timeout=150, every=2)
        assert woke.get("sessionKey"), woke  # an agent turn was started for it
        seen = evals()
        wait_for("two more evaluations", lambda: evals() >= seen + 2, timeout=300, every=2)
        assert len([r for r in gateway.runs(job) if r.get("action") == "finished"]) == 1
    finally:
        gateway.remove(job)


def _stream_job(gateway: Gateway, site: Site) -> str:
    argv = ["/usr/bin/env", f"CLAWPOINT_HOME={site.home}", str(CLAWPOINT), "watch", "--every", "5s"]
    return gateway.add(
        "--name", "clawpoint-stream", "--stream-command", json.dumps(argv),
        "--stream-mode", "match", "--stream-match", STREAM_MATCH, "--stream-batch-ms", "1000",
        "--message", WAKE_MESSAGE, "--session", "isolated", "--no-deliver",
    )  # fmt: skip


def test_stream_job_wakes_the_agent_on_a_line_that_needs_it(gateway: Gateway, site: Site) -> None:
    site.start_workload()
    job = _stream_job(gateway, site)
    try:
        time.sleep(12)  # let the source make passes while all is quiet
        assert gateway.runs(job) == []
        site.imds.mark_instance_action("terminate", in_seconds=120)
        woke = wait_for("the wake-up", lambda: _latest_run(gateway, job, 0), timeout=120, every=1)
        assert woke.get("sessionKey"), woke
    finally:
        gateway.remove(job)


def test_stream_job_does_not_wake_for_what_watch_settled(gateway: Gateway, site: Site) -> None:
    site.start_workload()
    site.grant_spot_moves()
    added = time.monotonic()
    job = _stream_job(gateway, site)
    try:
        time.sleep(6)
        site.imds.mark_instance_action("terminate", in_seconds=120)

        def moved() -> bool:
            got = workload_rows(site.home)
            return [(w["node"], w["state"]) for w in got] == [("node-a", "running")]

        wait_for("watch to move the workload under the grant", moved, timeout=120)
        # A matching line would fire at once: the gateway's 30 s minimum interval between
        # stream fires counts from the job's last run, and a new job has none. Still wait a
        # full interval from the job's start (the move took part of it), and at least a few
        # seconds after the move for watch's "acted" line and its 1 s batch.
        time.sleep(max(added + 35 - time.monotonic(), 5))
        assert gateway.runs(job) == []  # "acted: ..." does not match: nobody is woken
    finally:
        gateway.remove(job)
