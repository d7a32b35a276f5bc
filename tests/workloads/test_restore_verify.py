"""A restoring action is done only when the restored program holds up.

Through the installed CLI and real CRIU: a program that fails its own check a second after
it is restored makes migrate and failover fail (exit 8), naming what was seen, and leaves
its checkpoints untouched; a program that goes back behind the checkpoint's progress makes
resume fail the same way; a healthy program is migrated and failed over as before, with
what the watch saw in the step's output.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.workloads.conftest import PROGRAMS, Cli

pytestmark = pytest.mark.criu


def start(cli: Cli, name: str, mode: str) -> None:
    cli("run", "--name", name, "--node", "node-a", "--detach", "--", sys.executable,
        str(PROGRAMS / "restore_canary.py"), mode)  # fmt: skip
    cli.wait_progress(name, 10)


def checkpoint_ids(cli: Cli, name: str) -> list[str]:
    return sorted(c["id"] for c in json.loads(cli("checkpoints", f"local:{name}", "--json").stdout))


def test_restored_program_that_fails_its_check_fails_migrate_and_failover(cli: Cli) -> None:
    start(cli, "canary", "crash")
    proc = cli("migrate", "local:canary", "--to", "node-b", "--yes", "--json", ok=False)
    assert proc.returncode == 8, proc.stdout + proc.stderr
    assert "did not stay up" in proc.stdout and "exit 3" in proc.stdout, proc.stdout
    assert "FAIL canary" in cli.log("canary")  # the program's own verdict, seconds later
    w = cli.workload("canary")
    assert w["state"] == "failed"  # restorable: failover brings it back from the checkpoint
    kept = checkpoint_ids(cli, "canary")
    assert kept

    proc = cli("failover", "local:canary", "--yes", "--json", ok=False)
    assert proc.returncode == 8, proc.stdout + proc.stderr
    assert "did not stay up" in proc.stdout, proc.stdout
    assert "'clawpoint restore ID'" in proc.stdout  # the way to an older checkpoint
    assert checkpoint_ids(cli, "canary") == kept  # the checkpoint is untouched
    assert cli.workload("canary")["state"] == "failed"


def test_a_restore_that_fails_at_once_points_to_an_older_checkpoint(cli: Cli) -> None:
    """Restoring the same checkpoint again would fail the same way: whether the wrapper
    saw its program die before it counted as running or the restore's watch saw it, the
    answer names the way to an older checkpoint."""
    start(cli, "brittle", "at-once")
    cli("checkpoint", "local:brittle", "--yes")
    cli.kill_payload("brittle")
    proc = cli("failover", "local:brittle", "--yes", "--json", ok=False)
    assert proc.returncode != 0, proc.stdout
    assert "'clawpoint restore ID'" in proc.stdout, proc.stdout
    assert "FAIL canary: restored state rejected at once" in cli.log("brittle")


def test_restored_program_behind_its_checkpoint_fails_resume(cli: Cli) -> None:
    start(cli, "regress", "regress")
    cli("preempt", "local:regress", "--yes")
    kept = checkpoint_ids(cli, "regress")
    proc = cli("resume", "local:regress", "--yes", "--json", ok=False)
    assert proc.returncode == 8, proc.stdout + proc.stderr
    assert "behind the checkpoint's" in proc.stdout, proc.stdout
    assert cli.workload("regress")["state"] == "failed"  # stopped again, not left running
    assert checkpoint_ids(cli, "regress") == kept


def test_healthy_program_is_migrated_and_failed_over(cli: Cli) -> None:
    start(cli, "healthy", "healthy")
    out = cli("migrate", "local:healthy", "--to", "node-b", "--yes", "--json").stdout
    assert '"verified"' in out, out  # the watch ran and its findings are reported
    cli.wait_progress("healthy", cli.progress("healthy"))
    cli.kill_payload("healthy")
    cli("failover", "local:healthy", "--yes")
    assert cli.workload("healthy")["state"] == "running"
    cli.wait_progress("healthy", cli.progress("healthy"))
    assert "FAIL" not in cli.log("healthy")
