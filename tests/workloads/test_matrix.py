"""The compatibility matrix: one self-checking program per shape, through the installed CLI
and real CRIU, each taken through checkpoint -> migrate -> preempt/resume -> SIGKILL +
failover in one sequence, its own log checked after each step (it made progress past the
step and printed no FAIL).

Rows (docs/checkpointing.md, "Compatibility matrix"): threads, a multiprocessing pool, a
deleted-but-open file, eventfd/timerfd/inotify, stdin from /dev/null and from a pipe inside
the workload, stderr pointed at /dev/null (a daemon's habit), heavy stdout, a numpy job with periodic checkpoints, a program run from a
venv, Unix-domain sockets (path and abstract). The TCP server row is
tests/checkpoint/test_sockets_criu.py; shared memory and files written without O_APPEND are
covered with the file-state contract.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.service_reads import checkpoint_rows
from tests.workloads.conftest import PROGRAMS, Cli

pytestmark = pytest.mark.criu


LIVE = ("running", "checkpointing")  # a periodic checkpoint may be under way


def cycle(cli: Cli, name: str, argv: list[str], *, every: float | None = None) -> None:
    """Start ``argv`` as ``name`` and take it through the four operations."""
    extra = ["--checkpoint-every", str(every)] if every else []
    cli("run", "--name", name, "--node", "node-a", "--detach", *extra, "--", *argv)
    ref = f"local:{name}"
    seen = cli.wait_progress(name, 5)

    cli("checkpoint", ref, "--yes")
    assert cli.workload(name)["state"] in LIVE
    seen = cli.wait_progress(name, seen)

    cli("migrate", ref, "--to", "node-b", "--yes")
    assert cli.workload(name)["node"] == "node-b"
    seen = cli.wait_progress(name, seen)

    cli("preempt", ref, "--yes")
    assert cli.workload(name)["state"] == "stopped"
    cli("resume", ref, "--yes")
    seen = cli.wait_progress(name, seen)

    cli.kill_payload(name)
    cli("failover", ref, "--yes")
    assert cli.workload(name)["state"] in LIVE
    cli.wait_progress(name, seen)  # past everything it printed before the kill
    assert "FAIL " not in cli.log(name)


def program(name: str) -> str:
    return str(PROGRAMS / name)


SHAPES = {
    "threads": lambda tmp: [sys.executable, program("threads.py")],
    "mp-pool": lambda tmp: [sys.executable, program("mp_pool.py")],
    "deleted-file": lambda tmp: [sys.executable, program("deleted_file.py"), str(tmp)],
    "event-fds": lambda tmp: [sys.executable, program("event_fds.py"), str(tmp)],
    "stdin-devnull": lambda tmp: [sys.executable, program("stdin_reader.py"), "devnull"],
    "stdin-pipe": lambda tmp: [sys.executable, program("stdin_reader.py"), "pipe"],
    "unix-path": lambda tmp: [sys.executable, program("unix_echo.py"), "path", str(tmp)],
    "unix-abstract": lambda tmp: [sys.executable, program("unix_echo.py"), "abstract"],
    "quiet-stderr": lambda tmp: [sys.executable, program("quiet_stderr.py")],
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_program_shape_survives_every_operation(cli: Cli, tmp_path: Path, shape: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    cycle(cli, shape, SHAPES[shape](work))


def test_program_run_from_a_venv(cli: Cli, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # noqa: S603
    python = venv / "bin" / "python"
    cycle(cli, "venv", [str(python), program("venv_program.py")])
    maps = Path(f"/proc/{cli.workload('venv')['pid']}/maps").read_text()
    libs = {line.split()[-1] for line in maps.splitlines() if ".so" in line.split()[-1]}
    assert len(libs) >= 20, sorted(libs)  # the restored process maps its many libraries


_LINE = re.compile(r"^line (\d+) x+$", re.M)


def test_heavy_stdout_loses_and_repeats_nothing(cli: Cli) -> None:
    cycle(cli, "flood", [sys.executable, program("stdout_flood.py")])
    numbers = [int(n) for n in _LINE.findall(cli.log("flood"))]
    assert numbers and numbers[0] == 0
    rewinds = []
    for prev, cur in itertools.pairwise(numbers):
        assert cur <= prev + 1, f"lines lost: {prev} then {cur}"
        if cur != prev + 1:
            rewinds.append((prev, cur))
    # The only repeat is the failover's replay of what was printed after its checkpoint.
    assert len(rewinds) <= 1, rewinds


def test_numpy_job_with_periodic_checkpoints(cli: Cli) -> None:
    name, ref = "numpy", "local:numpy"
    cycle(cli, name, [sys.executable, program("numpy_job.py"), "150"], every=5.0)

    def newest() -> dict[str, Any]:
        # Read in-process: this polls (an interpreter per poll otherwise); the command
        # itself is tested in tests/cli.
        rows = checkpoint_rows(cli.home, ref)
        return max(rows, key=lambda c: str(c["created_at"]))

    # A failover loses under one interval: once the next periodic checkpoint is published,
    # kill the payload; the failover restores that checkpoint, not an older one.
    before = newest()["id"]
    deadline = time.monotonic() + 120
    while (latest := newest())["id"] == before:
        assert time.monotonic() < deadline, "no periodic checkpoint was published"
        time.sleep(0.3)
    cli.kill_payload(name)
    # Where it really was: the progress file (every step), not the log (every 5th step), which
    # can trail a checkpoint taken a moment before the kill.
    killed_at = json.loads((cli.home / "run" / f"{name}.progress.json").read_text())["step"]
    out = cli("failover", ref, "--yes", "--json").stdout
    assert latest["id"].split(":", 1)[-1] in out, out  # restored from the newest one
    assert latest["extra"]["progress"]["step"] <= killed_at
    cli.wait_progress(name, killed_at)
    assert "FAIL " not in cli.log(name)
