"""A SIGTERM that nothing would see is not waited for: the payload is the init of its own PID
namespace, which the kernel shields from every signal it has no handler for, so a program
that never installed one (most scripts) used to sit out the whole grace period of a kill
(30 s) or a termination (``term_kill_after_s``) before its SIGKILL, where without clawpoint
the same SIGTERM would have ended it at once.

Through the installed ``clawpoint`` command and real PID namespaces: which programs count as
such (``core.checkpoint.engine.sigterm_is_lost``), that a kill of one is a SIGKILL at once,
and that a program which does handle SIGTERM still gets it and its grace.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.checkpoint.engine import sigterm_is_lost
from core.model import WorkloadState
from tests.restore.conftest import CLAWPOINT, PLAIN, Cli

pytestmark = [pytest.mark.criu, pytest.mark.timeout(300)]

# Sets up what the variant (argv[1]) does with SIGTERM, then runs the handler-less
# counting loop of the wrapper-contract tests.
SETUP = """
import signal, subprocess, sys
variant, marker = sys.argv[1], sys.argv[2]
def on_term(signum, frame):
    open(marker, "w").close()
    sys.exit(0)
if variant == "handler":
    signal.signal(signal.SIGTERM, on_term)
elif variant == "ignored":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
elif variant == "blocked":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
elif variant == "child":
    child = subprocess.Popen(["sleep", "600"])
"""
PROGRAM = SETUP + PLAIN


def _program(variant: str, marker: Path) -> list[str]:
    return [sys.executable, "-c", PROGRAM, variant, str(marker)]


def _start(cli: Cli, name: str, variant: str, marker: Path, *, script: bool = False) -> int:
    """Run the program as a workload (``script``: as the command of a bash script, which is
    then the namespace's init); its payload's pid once it has set itself up."""
    cli.names.append(name)
    argv = _program(variant, marker)
    if script:
        argv = ["bash", "-c", f"{shlex.join(argv)}; echo ended"]
    done = subprocess.run(  # noqa: S603 (our own console script, fixed argv)
        [str(CLAWPOINT), "run", "--detach", "--name", name, "--node", "node-a",
         "--engine", "criu", "--", *argv],
        capture_output=True, text=True, env=cli.env(), stdin=subprocess.DEVNULL,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    cli.wait_step(name, 2)  # past its setup: the handler, the mask, the child are in place
    pid = cli.record(name).pid
    assert pid is not None
    return pid


@pytest.mark.parametrize(
    ("variant", "lost"),
    [("plain", True), ("handler", False), ("ignored", False), ("blocked", False),
     ("child", False)],
)  # fmt: skip
def test_only_a_lone_init_without_a_sigterm_handler_loses_it(
    cli: Cli, tmp_path: Path, variant: str, lost: bool
) -> None:
    pid = _start(cli, variant, variant, tmp_path / "saw-sigterm")
    try:
        assert sigterm_is_lost(pid) is lost
    finally:
        os.kill(pid, signal.SIGKILL)  # not the cleanup's kill: "ignored" would sit out its grace


def test_no_process_outside_a_pid_namespace_loses_it() -> None:
    assert sigterm_is_lost(os.getpid()) is False  # a handler-less process of the host's
    assert sigterm_is_lost(2**22 + 1) is False  # no such process: in doubt, never lost


def test_a_kill_is_a_sigkill_at_once_where_nothing_sees_the_sigterm(
    cli: Cli, tmp_path: Path
) -> None:
    """The plain program is ended without waiting the kill's 30 s grace; the one with a
    handler still gets its SIGTERM (it leaves a marker and exits by itself)."""
    plain_saw, handler_saw = tmp_path / "plain-saw", tmp_path / "handler-saw"
    _start(cli, "plain", "plain", plain_saw)
    _start(cli, "handler", "handler", handler_saw)
    for name in ("plain", "handler"):
        done = cli.run("kill", f"local:{name}", "--yes", "--json")
        assert done.returncode == 0, done.stdout + done.stderr + cli.log(name)
        rec = cli.record(name)
        assert rec.state is WorkloadState.FAILED and rec.exit_status == "killed", rec
    assert "payload.sigkill_for_lost_sigterm" in cli.log("plain")
    assert "payload.sigkill_after_grace" not in cli.log("plain")
    assert not plain_saw.exists()
    assert handler_saw.exists(), cli.log("handler")  # its handler ran: no SIGKILL first
    assert "payload.sigkill_for_lost_sigterm" not in cli.log("handler")


def test_a_kill_reaches_the_command_a_script_runs(cli: Cli, tmp_path: Path) -> None:
    """bash, the namespace's init, drops the kill's SIGTERM; the command it runs, in the same
    process group, does not: it ends, then the script, long before the 30 s grace (the
    SIGTERM once went to the init alone and the kill always waited it out)."""
    _start(cli, "script", "plain", tmp_path / "saw", script=True)
    done = cli.run("kill", "local:script", "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr + cli.log("script")
    rec = cli.record("script")
    assert rec.state is WorkloadState.FAILED and rec.exit_status == "killed", rec
    said = cli.log("script")
    assert "payload.sigkill_after_grace" not in said, said
    assert "payload.sigkill_for_lost_sigterm" not in said, said  # bash had a child: it waited
    assert "ended" in said, said  # the script went on past its command, then ended


def test_a_terminated_wrapper_ends_a_handlerless_payload_at_once(cli: Cli, tmp_path: Path) -> None:
    """SIGTERM to the wrapper (scancel, a pod's end) without a checkpoint: the payload is
    SIGKILLed at once instead of after ``term_kill_after_s``, and the stop is recorded as
    before."""
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "config.toml").write_text(
        "[wrapper]\nterm_checkpoint = false\nterm_kill_after_s = 60\n"
    )
    pid = _start(cli, "t", "plain", tmp_path / "saw")
    wrapper = cli.record("t").wrapper_pid
    assert wrapper is not None
    os.kill(wrapper, signal.SIGTERM)
    # Well inside the 60 s the old path waited before its SIGKILL.
    rec = cli.wait_state("t", WorkloadState.STOPPED, timeout_s=30)
    assert rec.exit_status == "terminated by SIGTERM", rec
    assert "payload.sigkill_for_lost_sigterm" in cli.log("t")
    assert not Path(f"/proc/{pid}").exists()
