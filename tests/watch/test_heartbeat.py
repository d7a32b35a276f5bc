"""`clawpoint watch` as the heartbeat, through the installed command.

--every is validated (exit 2) and streams one JSON line per pass until SIGTERM (exit 0);
--once prints one line per new finding and nothing when nothing changed, across runs; a
pending approval is reported with its id once, a person's approval is then carried out by
the next pass, a stale request is withdrawn, and an SLA nothing can rescue is reported.
"""

from __future__ import annotations

import json
import select
import signal
import sqlite3
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from core.backends.local import LocalBackend
from core.config import load_settings
from core.service.facade import bootstrap
from tests.cli.conftest import Cli
from tests.signals.fakes import FakeAwsImds


def _spot_config(cli: Cli, base_url: str) -> None:
    cli.config(
        f'[signals]\nnode = "local:node-b"\n[signals.nvml]\nenabled = false\n'
        f'[signals.aws]\nenabled = true\nbase_url = "{base_url}"\n'
    )


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_every_refuses_bad_intervals_with_exit_2(cli: Cli) -> None:
    for bad in ("soon", "0s", "0", "-5s", "48h", "5 parsecs"):
        r = cli("watch", "--every", bad)
        assert r.code == 2, (bad, str(r))
        assert "not a poll interval" in r.stderr and "5s" in r.stderr, str(r)
        assert r.stdout == ""
    both = cli("watch", "--once", "--every", "5s")
    assert both.code == 2 and "choose one" in both.stderr, str(both)


def test_every_streams_one_json_line_per_pass_and_stops_on_sigterm(cli: Cli) -> None:
    proc = cli.popen("watch", "--every", "1s", "--json")
    assert proc.stdout is not None
    got: list[dict[str, object]] = []
    deadline = time.monotonic() + 120
    while len(got) < 2:  # read while it runs: each pass's line is flushed on its own
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no JSON line per pass"
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            got.append(json.loads(proc.stdout.readline()))
    for report in got:
        assert report["exit_code"] == 0 and report["changed"] is False
        assert report["findings"] == [] and "observed_at" in report
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err, err


def test_every_without_json_prints_nothing_while_nothing_changes(cli: Cli) -> None:
    proc = cli.popen("watch", "--every", "1s")
    deadline = time.monotonic() + 120
    while not (cli.home / "state.db").exists() or time.monotonic() < deadline - 115:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out == ""


def test_a_pending_approval_is_reported_once_with_its_id_then_carried_out_once_approved(
    cli: Cli,
) -> None:
    with FakeAwsImds() as imds:
        _spot_config(cli, imds.url)
        ref = cli.start_counter("beat", node="node-b")
        quiet = cli("watch", "--once")
        assert (quiet.code, quiet.stdout) == (0, ""), str(quiet)
        imds.mark_instance_action("terminate", in_seconds=120)
        asked = cli("watch", "--once")
        assert asked.code == 20, str(asked)
        [line] = _lines(asked.stdout)
        assert line.startswith("attention: approval apr-") and ref in line, line
        approval_id = line.split()[2]
        assert cli("approvals", "show", approval_id).code == 0
        again = cli("watch", "--once")  # still waiting, already said: nothing printed
        assert (again.code, again.stdout) == (20, ""), str(again)
        as_json = cli("watch", "--once", "--json")
        assert as_json.json()["still_pending"] == [approval_id]
        assert as_json.json()["changed"] is False
        approved = cli("approvals", "approve", approval_id)
        assert approved.code == 0, str(approved)
        done = cli("watch", "--once")
        assert done.code == 21, str(done)
        [line] = _lines(done.stdout)
        assert line.startswith(f"acted: migrate {ref}"), line
        assert cli.workload(ref)["node"] == "node-a"


def test_a_stale_request_is_withdrawn_with_the_reason(cli: Cli) -> None:
    with FakeAwsImds() as imds:
        _spot_config(cli, imds.url)
        ref = cli.start_counter("stale", node="node-b")
        imds.mark_instance_action("terminate", in_seconds=120)
        asked = cli("watch", "--once")
        assert asked.code == 20, str(asked)
        approval_id = _lines(asked.stdout)[0].split()[2]
        saved = cli("preempt", ref, "--yes")  # a person dealt with it another way
        assert saved.code == 0, str(saved)
        r = cli("watch", "--once")
        assert r.code == 21, str(r)
        assert any(
            line.startswith(f"acted: withdrew approval {approval_id}") for line in _lines(r.stdout)
        ), r.stdout
        with sqlite3.connect(cli.home / "state.db") as db:
            status, via, note = db.execute(
                "SELECT status, decided_via, note FROM approvals WHERE id=?", (approval_id,)
            ).fetchone()
        assert (status, via) == ("denied", "withdrawn") and "withdrawn by watch" in note, note


def test_an_sla_nothing_can_rescue_is_reported_once(cli: Cli) -> None:
    deadline = (datetime.now(UTC) + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    r = cli("run", "--engine", "cooperative", "--name", "late", "--node", "node-b", "--detach",
            "--label", f"clawpoint.io/deadline={deadline}",
            "--label", "clawpoint.io/expected-duration=3h", "--",
            sys.executable, "-m", "core.workloads.counter", "--state-mb", "1")  # fmt: skip
    assert r.code == 0, str(r)
    first = cli("watch", "--once")
    assert first.code == 20, str(first)
    [line] = _lines(first.stdout)
    assert line.startswith("attention: local:late will miss its deadline"), line
    assert "no faster node" in line
    second = cli("watch", "--once")
    assert (second.code, second.stdout) == (20, ""), str(second)


def test_a_workload_dead_on_a_degraded_node_is_reported_and_a_down_node_is_evidence(
    cli: Cli,
) -> None:
    ref = cli.start("dies", "sh", "-c", "sleep 2; exit 3", node="node-b")
    deadline = time.monotonic() + 60
    while cli.workload(ref)["state"] != "failed":
        assert time.monotonic() < deadline, cli.workload(ref)
        time.sleep(0.2)
    local = bootstrap(load_settings(cli.home)).backend("local")
    assert isinstance(local, LocalBackend)
    local.set_node_state("node-b", health="degraded", reason="ECC errors")
    r = cli("watch", "--once")
    assert r.code == 20, str(r)
    [line] = _lines(r.stdout)
    assert line.startswith(f"attention: {ref} died on degraded node local:node-b"), line
    assert (cli("watch", "--once").stdout) == ""  # said once
    local.set_node_state("node-a", health="down", reason="not responding")
    seen = cli("watch", "--once", "--json").json()["evidence"]
    assert [(e["trigger"], e["subject"]) for e in seen] == [("node-down", "local:node-a")]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
