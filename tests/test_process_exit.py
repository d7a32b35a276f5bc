"""``core.process_exit``: ending a process at once keeps what Python's own exit would do
that matters (threads that are not daemons finish, exit handlers run, buffered output is
written) and its status."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core.process_exit import exit_code

SCRIPT = """
import atexit, sys, threading, time
from pathlib import Path
from core.process_exit import exit_now
out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
def late():
    time.sleep(0.3)
    (out / "thread").write_text("finished")
threading.Thread(target=late).start()  # not a daemon: the exit waits for it
sys.stdout.write("buffered, no newline")  # to a pipe: block-buffered until flushed
sys.stderr.write("to stderr")
exit_now(7)
"""


def test_exit_now_waits_for_threads_runs_handlers_and_flushes(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "buffered, no newline" and proc.stderr == "to stderr"
    assert (tmp_path / "thread").read_text() == "finished"
    assert (tmp_path / "atexit").read_text() == "ran"


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (3, 3), (256 + 5, 5)])
def test_exit_code_is_what_sys_exit_gives(code: object, status: int) -> None:
    assert exit_code(code) == status


def test_a_message_exits_1_and_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code("clawpoint: broken") == 1
    assert capsys.readouterr().err == "clawpoint: broken\n"
