"""Every row of the exit-code table in docs/cli.md, measured from the installed command.

Each outcome is provoked the way a user meets it (a policy file that denies, a disruptive
action with nobody at a terminal, a Slurm controller that is not there, a corrupt image, a
missing CRIU binary, a name already running, Ctrl-C), never by calling the app in-process:
the tests once passed while the installed script exited 0 for every one of them.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.conftest import CLAWPOINT, ROOT, Cli, interrupt


def _documented_codes() -> dict[int, str]:
    """The exit-code table of docs/cli.md: code -> meaning."""
    text = (ROOT / "docs" / "cli.md").read_text()
    section = text.split("## Exit codes", 1)[1]
    return {
        int(m.group(1)): m.group(2).strip()
        for m in re.finditer(r"^\| (\d+) \| ([^|]*) \|", section, re.M)
    }


def test_the_table_lists_exactly_the_codes_measured_here() -> None:
    measured = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 130}  # one test below for each
    assert set(_documented_codes()) == measured


# --------------------------------------------------------------------------- usage errors
@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--bogus"], "No such option: --bogus"),
        (["frob"], "No such command 'frob'"),
        (["nodes", "--bogus"], "No such option: --bogus"),
        (["approvals", "frob"], "No such command 'frob'"),
        (["checkpoint"], "Missing argument"),
        (["restore", "--to"], "requires an argument"),
        (["demo", "--state-mb", "lots"], "Invalid value for '--state-mb'"),
    ],
)
def test_usage_errors_print_usage_and_exit_2(cli: Cli, args: list[str], complaint: str) -> None:
    r = cli(*args)
    assert r.code == 2, str(r)
    assert f"Error: {complaint}" in r.stderr or ("Error: " in r.stderr and complaint in r.stderr)
    if args != ["restore", "--to"]:  # click knows no command context for this one
        assert "Usage: clawpoint" in r.stderr, str(r)
    assert r.stdout == ""


def test_help_exits_0(cli: Cli) -> None:
    r = cli("checkpoint", "--help")
    assert r.code == 0 and "Usage: clawpoint checkpoint" in r.stdout, str(r)


# --------------------------------------------------------------------------- 0 .. 10
def test_0_success(cli: Cli) -> None:
    r = cli("nodes", "--json")
    assert r.code == 0, str(r)
    assert {n["id"] for n in r.json()} == {"local:node-a", "local:node-b"}


def test_1_foreground_run_whose_payload_failed(cli: Cli) -> None:
    r = cli("run", "--engine", "cooperative", "--", "false")
    assert r.code == 1, str(r)


def test_1_failed_runbook(cli: Cli) -> None:
    # A step that fails at run time (an unknown partition) fails the run: exit 1.
    r = cli("runbook", "run", "queue-backlog", "--param", "partition=no-such-partition", "--json")
    assert r.code == 1, str(r)
    assert r.json()["status"] == "failed"
    assert "no-such-partition" in r.stdout


def test_2_invalid_input(cli: Cli) -> None:
    r = cli("checkpoint", "local:../etc")
    assert r.code == 2 and "error (invalid-input)" in r.stderr, str(r)
    j = cli("checkpoint", "local:../etc", "--json")
    assert j.code == 2 and j.json()["exit_code"] == 2, str(j)


def test_2_config_check_with_errors(cli: Cli) -> None:
    cli.config("[checkpoint]\ndefault_engin = 'criu'\n")
    r = cli("config", "check")
    assert r.code == 2, str(r)
    assert "default_engin" in r.stdout + r.stderr


def test_2_runbook_check_of_a_bad_runbook(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "runbooks" / "sla-rescue.yaml").read_text().replace("sla_risk", "x"))
    r = cli("runbook", "check", str(bad), "--json")
    assert r.code == 2, str(r)
    assert r.json()["ok"] is False


def test_3_not_found(cli: Cli) -> None:
    r = cli("checkpoint", "local:nope")
    assert r.code == 3 and "error (not-found)" in r.stderr, str(r)


def test_4_not_supported_by_the_backend(cli: Cli) -> None:
    r = cli("slurm", "submit", "--name", "job", "--", "true")  # Slurm is not enabled
    assert r.code == 4 and "not-supported" in r.stderr, str(r)


def test_5_denied_by_policy(cli: Cli) -> None:
    cli.config(
        '[[policy.rules]]\nid = "no-drain"\noutcome = "deny"\nactions = ["drain_node"]\n'
        'reason = "nodes are drained by the ops team"\n'
    )
    r = cli("drain", "local:node-a", "--yes")
    assert r.code == 5 and "nodes are drained by the ops team" in r.stdout, str(r)
    node = next(n for n in cli("nodes", "--json").json() if n["id"] == "local:node-a")
    assert node["schedulable"] is True


def test_6_approval_required_without_yes_and_without_a_terminal(cli: Cli) -> None:
    r = cli("drain", "local:node-b")  # stdin is not a terminal, no --yes
    assert r.code == 6 and "error (approval-required)" in r.stderr, str(r)
    node = next(n for n in cli("nodes", "--json").json() if n["id"] == "local:node-b")
    assert node["schedulable"] is True


def test_7_backend_unavailable(cli: Cli) -> None:
    # A Slurm cluster whose controller is not there: a closed loopback port.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = cli.home / "slurm.conf"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(
        f"ClusterName=gone\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={port}\n"
        "AuthType=auth/none\nNodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1\n"
    )
    cli.config(
        f'[slurm]\nenabled = true\nslurm_conf = "{conf}"\nrest_socket = "{cli.home}/no.sock"\n'
        "retry_total_s = 0\ncommand_timeout_s = 3\n"
    )
    r = cli("nodes", "--backend", "slurm")
    assert r.code == 7 and "error (backend-unavailable)" in r.stderr, str(r)
    if shutil.which("squeue") is None:  # no client at all is the same outcome
        assert "not installed" in r.stderr


def test_8_restore_of_a_corrupt_checkpoint(cli: Cli) -> None:
    ref = cli.start_counter("c8")
    assert cli("preempt", ref, "--yes").code == 0
    [ckpt] = [c for c in cli("checkpoints", ref, "--json").json()]
    seq = ckpt["id"].rsplit("@", 1)[1]
    image = cli.home / "checkpoints" / "c8" / f"{int(seq):08d}" / "images" / "state.json"
    image.write_text('{"tampered": true}')
    r = cli("restore", ckpt["id"], "--yes")
    assert r.code == 8 and "corrupt" in r.stderr, str(r)
    assert cli.workload(ref)["state"] == "stopped"


def test_9_engine_unavailable(cli: Cli) -> None:
    cli.config('[checkpoint]\ncriu_path = "/nonexistent/criu"\n')
    r = cli("run", "--engine", "criu", "--", "true")
    assert r.code == 9 and "error (engine-unavailable)" in r.stderr, str(r)


def test_10_conflict(cli: Cli) -> None:
    cli.start_counter("c10")
    r = cli("run", "--engine", "cooperative", "--name", "c10", "--detach", "--", "true")
    assert r.code == 10 and "error (conflict)" in r.stderr, str(r)


def test_130_interrupted(cli: Cli) -> None:
    proc = cli.popen("watch", "--every", "1s")
    code, err = interrupt(proc, cli.home / "state.db")  # the loop has started
    assert code == 130 and "Traceback" not in err, err


def test_sigquit_prints_the_stacks_and_the_command_goes_on(cli: Cli, tmp_path: Path) -> None:
    """``kill -QUIT`` on a command that seems stuck: every thread's stack on stderr, and the
    command runs on (here: the watch loop, ended by Ctrl-C as usual)."""
    log = tmp_path / "stderr"
    with log.open("w") as err_file:
        proc = subprocess.Popen(
            [str(CLAWPOINT), "watch", "--every", "1s"], env=cli.env(), stdout=subprocess.PIPE,
            stderr=err_file, stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not (cli.home / "state.db").exists():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            proc.send_signal(signal.SIGQUIT)
            while "watch" not in log.read_text():  # the loop's frames, once written
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            assert "most recent call first" in log.read_text()
            time.sleep(0.5)
            assert proc.poll() is None  # it goes on
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) == 130
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


# --------------------------------------------------------------------------- other outcomes
def test_audit_verify_on_a_tampered_log(cli: Cli) -> None:
    granted = cli("approvals", "grant", "--action", "checkpoint", "--expires", "1h")
    assert granted.code == 0, str(granted)  # an audited event
    assert cli("audit", "verify").code == 0
    with sqlite3.connect(cli.home / "state.db") as db:
        db.execute("UPDATE audit SET principal = 'mallory' WHERE seq = 1")
    r = cli("audit", "verify")
    assert r.code == 5 and "audit log tampered" in r.stderr, str(r)


def _spot_config(cli: Cli, base_url: str) -> None:
    cli.config(
        f'[signals]\nnode = "local:node-b"\n[signals.nvml]\nenabled = false\n'
        f'[signals.aws]\nenabled = true\nbase_url = "{base_url}"\n'
    )


def test_watch_once_0_then_20_while_a_person_must_approve(cli: Cli) -> None:
    from tests.signals.fakes import FakeAwsImds

    with FakeAwsImds() as imds:
        _spot_config(cli, imds.url)
        ref = cli.start_counter("spotty", node="node-b")
        assert cli("watch", "--once").code == 0  # nothing new
        imds.mark_instance_action("terminate", in_seconds=120)
        asked = cli("watch", "--once", "--json")
        assert asked.code == 20, str(asked)  # nobody may move it without a person
        assert cli.workload(ref)["node"] == "node-b"
        assert cli("watch", "--once").code == 20  # still waiting


def test_watch_once_21_when_it_acted(cli: Cli) -> None:
    from tests.signals.fakes import FakeAwsImds

    with FakeAwsImds() as imds:
        _spot_config(cli, imds.url)
        ref = cli.start_counter("spotty", node="node-b")
        granted = cli("approvals", "grant", "--action", "migrate", "--scope",
                      "trigger=spot-interruption", "--max", "5/h", "--expires", "1h")  # fmt: skip
        assert granted.code == 0, str(granted)
        imds.mark_instance_action("terminate", in_seconds=120)
        moved = cli("watch", "--once", "--json")
        assert moved.code == 21, str(moved)
        assert cli.workload(ref)["node"] == "node-a"


def test_watch_once_1_when_an_action_failed(cli: Cli) -> None:
    from tests.signals.fakes import FakeAwsImds

    with FakeAwsImds() as imds:
        _spot_config(cli, imds.url)
        with (cli.home / "config.toml").open("a") as f:  # a checkpoint that cannot finish
            f.write("[checkpoint]\ncooperative_timeout_s = 1\n")
        deaf = "trap '' USR1; while :; do sleep 1; done"
        cli.start("deaf", "sh", "-c", deaf, node="node-b")
        granted = cli("approvals", "grant", "--action", "migrate", "--scope",
                      "trigger=spot-interruption", "--max", "5/h", "--expires", "1h")  # fmt: skip
        assert granted.code == 0, str(granted)
        imds.mark_instance_action("terminate", in_seconds=120)
        r = cli("watch", "--once", "--json")
        assert r.code == 1, str(r)
        assert [a["status"] for a in r.json()["actions"]] == ["failed"]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
