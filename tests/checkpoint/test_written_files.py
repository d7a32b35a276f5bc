"""What a CRIU image says the tree had open for writing (``criu.written_files``), read from
a real dump: the engine takes a leave-running checkpoint again, stopped, when the image
names such a file that its look before the freeze did not see (tests/reliability has the
race itself)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.checkpoint import criu

pytestmark = pytest.mark.criu

HOLDER = """
import sys, time
w = open(sys.argv[1] + "/written.log", "w"); w.write("x"); w.flush()
r = open(sys.argv[1] + "/read.txt")
a = open(sys.argv[1] + "/appended.log", "a")
print("ready", flush=True)
while True:
    time.sleep(1)
"""


def test_written_files_lists_what_the_tree_holds_open_for_writing(tmp_path: Path) -> None:
    (tmp_path / "read.txt").write_text("r")
    proc = subprocess.Popen(  # noqa: S603 (argv list)
        ["unshare", "--pid", "--fork", "setsid", sys.executable, "-c", HOLDER, str(tmp_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    kids: list[str] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        images = tmp_path / "images"
        images.mkdir()
        subprocess.run(  # noqa: S603 (argv list)
            [criu.require(), "dump", "-t", kids[0], "-D", str(images), "-o", "d.log",
             "--leave-running"], check=True, capture_output=True,
        )  # fmt: skip
        found = criu.written_files(images)
        assert str(tmp_path / "written.log") in found
        assert str(tmp_path / "appended.log") in found
        assert str(tmp_path / "read.txt") not in found
        assert all(not p.startswith("/dev/") for p in found)  # regular files only
    finally:
        for pid in kids:  # the holder (PID 1 of its namespace: SIGKILL)
            os.kill(int(pid), signal.SIGKILL)
        proc.kill()
        proc.wait()


def test_an_image_without_files_lists_nothing(tmp_path: Path) -> None:
    assert criu.written_files(tmp_path) == []
