"""What the wrapper promises real programs, through the installed ``clawpoint`` command and
real CRIU: termination stops the workload (saving a checkpoint first when enabled), later
starts do not need the launch directory, a killed payload is recorded as killed, input
piped into ``run`` is not silently dropped, and the payload's output is kept apart from the
wrapper's lines and rotated, with no line lost or repeated across a checkpoint and restore.

The workload here installs no signal handlers at all (unlike the counter workload): as PID 1
of its namespace it ignores SIGTERM, which is what the termination contract must overcome.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.model import WorkloadState
from core.wrapper.spec import output_files
from tests.restore.conftest import CLAWPOINT, PLAIN, Cli

pytestmark = [pytest.mark.criu, pytest.mark.timeout(600)]


def _config(cli: Cli, text: str) -> None:
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.toml").write_text(text)


def _start(cli: Cli, name: str, *args: str, cwd: Path | None = None) -> None:
    cli.names.append(name)
    done = subprocess.run(  # noqa: S603 (our own console script, fixed argv)
        [str(CLAWPOINT), "run", "--detach", "--name", name, "--node", "node-a",
         "--engine", "criu", "--", sys.executable, "-c", PLAIN, *args],
        capture_output=True, text=True, env=cli.env(), cwd=cwd or Path.cwd(),
        stdin=subprocess.DEVNULL, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _listed(cli: Cli, name: str) -> dict[str, object]:
    rows = cli.json("workloads")
    return next(w for w in rows if w["id"] == f"local:{name}")


def _terminate(cli: Cli, name: str, budget_s: float) -> int:
    """SIGTERM the wrapper; the payload and the wrapper are gone within the budget (+ the
    kill grace and some slack for a loaded machine). Returns the last step it wrote."""
    rec = cli.record(name)
    assert rec.wrapper_pid is not None and rec.pid is not None
    os.kill(rec.wrapper_pid, signal.SIGTERM)
    assert _gone(rec.pid, budget_s + 15), f"payload still running:\n{cli.log(name)}"
    assert _gone(rec.wrapper_pid, 30), f"wrapper still running:\n{cli.log(name)}"
    return cli.step(name)


def test_sigterm_saves_a_checkpoint_then_stops_and_resume_goes_on(cli: Cli) -> None:
    _config(cli, "[wrapper]\nterm_grace_s = 20\n")
    _start(cli, "t")
    cli.wait_step("t", 20)
    last = _terminate(cli, "t", 20)
    ckpts = cli.checkpoints("t")
    assert len(ckpts) == 1
    saved = ckpts[0]
    assert not saved.leave_running
    row = _listed(cli, "t")
    assert row["state"] == "stopped"
    assert row["message"] == f"terminated, checkpoint {saved.id} saved"
    assert row["exit_status"] == "terminated by SIGTERM"
    assert "wrapper.terminated" in cli.log("t")
    audit = cli.json("audit")
    assert any(e["kind"] == "terminated" and e["subject"] == "local:t" for e in audit), audit
    # It stopped where the checkpoint was taken, and resume continues from there.
    at = int(saved.extra["progress"]["step"])
    assert at >= 20 and last >= at
    done = cli.run("resume", "local:t", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr + cli.log("t")
    assert cli.wait_step("t", last) > last
    assert cli.record("t").state is WorkloadState.RUNNING


def test_sigterm_without_checkpoint_stops_and_says_so(cli: Cli) -> None:
    _config(cli, "[wrapper]\nterm_checkpoint = false\nterm_grace_s = 20\n")
    _start(cli, "n")
    cli.wait_step("n", 10)
    _terminate(cli, "n", 20)
    assert cli.checkpoints("n") == []
    row = _listed(cli, "n")
    assert row["state"] == "stopped"
    assert str(row["message"]).startswith("terminated without checkpoint: ")
    assert "term_checkpoint = false" in str(row["message"])


def test_a_checkpoint_that_cannot_fit_the_budget_is_not_started(cli: Cli) -> None:
    """The last checkpoint's duration says it will not fit: stop without one, say why."""
    _config(cli, "[wrapper]\nterm_grace_s = 0.001\n")
    _start(cli, "b")
    cli.wait_step("b", 10)
    assert cli.json("checkpoint", "local:b")["status"] == "executed"
    _terminate(cli, "b", 1)
    assert len(cli.checkpoints("b")) == 1  # only the one taken on request
    row = _listed(cli, "b")
    assert row["state"] == "stopped"
    assert str(row["message"]).startswith("terminated without checkpoint: ")


def test_a_sigkilled_fresh_payload_is_recorded_as_killed(cli: Cli) -> None:
    _start(cli, "k")
    cli.wait_step("k", 5)
    pid = cli.record("k").pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    rec = cli.wait_state("k", WorkloadState.FAILED, timeout_s=60)
    assert rec.exit_status == "signal SIGKILL", rec


def test_later_starts_do_not_need_the_launch_directory(cli: Cli, tmp_path: Path) -> None:
    launch = tmp_path / "workspace"
    launch.mkdir()
    _start(cli, "d", "chdir", cwd=launch)
    cli.wait_step("d", 10)
    shutil.rmtree(launch)
    before = cli.wait_step("d", 20)
    done = cli.run("migrate", "local:d", "--to", "node-b", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr + cli.log("d")
    assert json.loads(done.stdout)["status"] == "executed"
    assert cli.record("d").node == "node-b"
    moved = cli.wait_step("d", before)
    assert cli.json("preempt", "local:d", "--yes")["status"] == "executed"
    done = cli.run("resume", "local:d", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr + cli.log("d")
    assert cli.wait_step("d", moved) > moved
    # Only a start from scratch needs it, and then it says so.
    assert cli.json("preempt", "local:d", "--yes")["status"] == "executed"
    fresh = cli.run("resume", "local:d", "--fresh", "--yes", "--json")
    assert fresh.returncode != 0
    assert "working directory" in fresh.stdout + fresh.stderr
    assert str(launch) in fresh.stdout + fresh.stderr


def test_input_piped_into_run_is_reported_not_silently_dropped(cli: Cli) -> None:
    cli.names.append("in")
    argv = [str(CLAWPOINT), "run", "--name", "in", "--engine", "criu", "--", "true"]
    piped = subprocess.run(  # noqa: S603 (our own console script, fixed argv)
        argv, input="some input\n", capture_output=True, text=True, env=cli.env(),
        timeout=120, check=False,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stdout + piped.stderr
    assert "stdin is /dev/null" in piped.stderr
    quiet = cli.run("run", "--name", "in", "--fresh", "--engine", "criu", "--", "true")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert "stdin is /dev/null" not in quiet.stderr


def test_payload_output_is_separate_rotated_and_whole_across_restores(cli: Cli) -> None:
    max_bytes = 10_240
    _config(cli, f"[wrapper]\nout_max_mib = {max_bytes / 2**20}\nout_keep = 100\n")
    _start(cli, "o", "loud")
    at = cli.wait_step("o", 100)
    assert cli.json("preempt", "local:o", "--yes")["status"] == "executed"
    stopped = cli.checkpoints("o")[0]
    saved = int(stopped.extra["progress"]["step"])
    done = cli.run("resume", "local:o", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr + cli.log("o")
    cli.wait_step("o", max(at, saved) + 100)
    assert cli.json("preempt", "local:o", "--yes")["status"] == "executed"

    files = output_files(cli.settings, "o")
    assert len(files) >= 3, files  # rotated at least twice
    assert files[-1].name == "o.out" and files[0].name.startswith("o.out.")
    steps: list[int] = []
    for f in files:
        data = f.read_bytes()
        # Cut between lines, never inside one: past the size only by the line it ended with.
        assert data.endswith(b"\n"), f
        assert len(data.rstrip(b"\n").rsplit(b"\n", 1)[0]) <= max_bytes, f
        for line in data.decode().splitlines():
            word, n, xs = line.split(" ")
            assert word == "step" and xs == "x" * 200, line
            steps.append(int(n))
    # Every line once, in order, from the first step through both checkpoints and the restore.
    assert steps == list(range(1, len(steps) + 1))
    assert steps[-1] > saved + 100
    wrapper_log = (cli.settings.log_dir / "o.log").read_text()
    assert "wrapper.started" in wrapper_log and "step 1 " not in wrapper_log
