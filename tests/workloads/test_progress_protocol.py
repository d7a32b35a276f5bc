"""The progress protocol survives its own window: a program checkpointed between writing
its temporary report and renaming it over the report, then run on (which renames the file
away), is restored from that checkpoint again and finds its temporary file.

Both ways a checkpoint is restored twice: a leave-running checkpoint restored by a failover
after the program ran on, and a stop checkpoint (preempt) resumed and later restored again
by a failover. Real CRIU, the installed CLI (docs/checkpointing.md, "Progress file
protocol"; ``core.wrapper.progress.ProgressFile.side_files``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.workloads.conftest import PROGRAMS, Cli

pytestmark = pytest.mark.criu

HOLD = 5  # the step at which the program waits between its write and its rename


def _wait_for(path: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.parametrize("take", ["checkpoint", "preempt"])
def test_a_restore_finds_the_report_it_was_about_to_rename(
    cli: Cli, tmp_path: Path, take: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    name, ref = "held", "local:held"
    argv = [sys.executable, str(PROGRAMS / "held_report.py"), str(work), str(HOLD)]
    cli("run", "--name", name, "--node", "node-a", "--detach", "--", *argv)
    _wait_for(work / "held")
    cli(take, ref, "--yes")  # frozen with the temporary report written, not yet renamed
    (work / "go").touch()
    if take == "preempt":
        assert cli.workload(name)["state"] == "stopped"
        cli("resume", ref, "--yes")  # the first restore: its rename finds the file on disk
    seen = cli.wait_progress(name, HOLD + 3)  # ran on: that temporary file is renamed away
    cli.kill_payload(name)
    cli("failover", ref, "--yes")  # the same checkpoint again, the held program's rename next
    cli.wait_progress(name, seen)
    assert "FAIL " not in cli.log(name)
