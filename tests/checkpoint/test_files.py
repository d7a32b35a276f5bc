"""The file-state contract's pieces on a real process tree, without CRIU.

- ``writable_files`` finds what a child writes (with and without O_APPEND) and the /dev/shm
  file it maps shared, and skips what it only reads.
- ``save`` + ``put_back`` through a real store: the file goes back with its mode; a copy
  whose bytes changed is refused before anything is written; a file beyond the budget that
  changed size makes the restore fail naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import errors
from core.checkpoint import files
from tests.checkpoint import stores

CHILD = textwrap.dedent(
    """
    import mmap, os, sys, time
    d = sys.argv[1]
    rw = os.open(f"{d}/rw.txt", os.O_RDWR | os.O_CREAT, 0o640); os.write(rw, b"state 1")
    ap = os.open(f"{d}/log.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND); os.write(ap, b"l\\n")
    ro = os.open(f"{d}/ro.txt", os.O_RDONLY)
    shm = os.open(sys.argv[2], os.O_RDWR | os.O_CREAT, 0o600); os.ftruncate(shm, 1 << 16)
    m = mmap.mmap(shm, 1 << 16, mmap.MAP_SHARED); os.close(shm); m[:5] = b"hello"
    print("ready", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture
def child(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, Path]]:
    work = tmp_path / "work"
    work.mkdir()
    (work / "ro.txt").write_text("read only")
    seg = Path(f"/dev/shm/clawpoint-test-{os.getpid()}-{time.monotonic_ns()}")
    proc = subprocess.Popen(  # noqa: S603 (argv list)
        [sys.executable, "-c", CHILD, str(work), str(seg)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    yield proc, work, seg
    proc.kill()
    proc.wait()
    seg.unlink(missing_ok=True)


def test_writable_files_of_a_tree(child: tuple[subprocess.Popen[str], Path, Path]) -> None:
    proc, work, seg = child
    found = {f.path: f for f in files.writable_files(proc.pid)}
    assert set(found) == {str(work / "rw.txt"), str(work / "log.txt"), str(seg)}
    assert not found[str(work / "rw.txt")].append and found[str(work / "log.txt")].append
    assert found[str(seg)].shared_map and found[str(seg)].size == 1 << 16
    assert found[str(work / "rw.txt")].mode == 0o640
    covered, left = files.split_budget(list(found.values()), 100)
    assert [f.path for f in covered] == [str(work / "log.txt"), str(work / "rw.txt")]
    assert [f.path for f in left] == [str(seg)]


def test_save_and_put_back(child: tuple[subprocess.Popen[str], Path, Path], tmp_path: Path) -> None:
    proc, work, seg = child
    store = stores.keyed(tmp_path / "store")

    def checkpoint(budget: int) -> str:
        pending = store.begin("w", engine="criu", node=None)
        (pending.images_dir / "core-1.img").write_bytes(b"image")
        record = files.save(proc.pid, pending.images_dir, budget_bytes=budget)
        info = store.publish(
            pending, timings={}, leave_running=True, extra={files.FILES_KEY: record}
        )
        return info.id

    full = checkpoint(1 << 20)
    small = checkpoint(0)  # before any put_back: that replaces the files the child holds
    rw = work / "rw.txt"
    rw.write_text("state 2, longer")
    (seg).write_bytes(b"x" * 10)
    assert files.put_back(store.get(full), store.images_dir(full))
    assert rw.read_text() == "state 1" and rw.stat().st_mode & 0o777 == 0o640
    assert seg.read_bytes()[:5] == b"hello" and seg.stat().st_size == 1 << 16

    # A copy whose bytes changed is refused and nothing is written for it.
    rw.write_text("state 3")
    name = next(s["name"] for s in store.get(full).extra[files.FILES_KEY]["saved"])
    copy = store.images_dir(full) / name
    copy.write_bytes(b"X" * copy.stat().st_size)
    with pytest.raises(errors.CorruptCheckpoint):
        files.put_back(store.get(full), store.images_dir(full))
    assert rw.read_text() == "state 3"

    # Beyond the budget: nothing copied, and a changed size is named before CRIU would run.
    assert store.get(small).extra[files.FILES_KEY]["saved"] == []
    rw.write_text("state 4, which is longer")
    with pytest.raises(errors.CheckpointError, match=r"rw\.txt") as exc:
        files.put_back(store.get(small), store.images_dir(small))
    assert "file budget" in exc.value.message


def test_a_closed_side_file_is_carried_and_put_back_without_a_copy_aside(
    child: tuple[subprocess.Popen[str], Path, Path], tmp_path: Path
) -> None:
    """A temporary file the tree wrote and closed (the progress protocol's, renamed over the
    report next) goes with the checkpoint when named, comes back when it was renamed away,
    keeps no ``.after-`` copy, is not in the plan's text, and never blocks a restore."""
    proc, work, _ = child
    store = stores.keyed(tmp_path / "store")
    temp = work / ".w.progress.json.7.tmp"
    temp.write_text('{"step": 8}')
    rw = work / "rw.txt"  # held open by the child: carried once, as an open file

    def checkpoint(budget: int) -> str:
        pending = store.begin("w", engine="criu", node=None)
        (pending.images_dir / "core-1.img").write_bytes(b"image")
        record = files.save(proc.pid, pending.images_dir, budget_bytes=budget, closed=[temp, rw])
        return store.publish(
            pending, timings={}, leave_running=True, extra={files.FILES_KEY: record}
        ).id

    full, none = checkpoint(1 << 20), checkpoint(0)
    saved = store.get(full).extra[files.FILES_KEY]["saved"]
    assert [e["path"] for e in saved if e.get("closed")] == [str(temp)]
    assert [e["path"] for e in saved].count(str(rw)) == 1
    left = store.get(none).extra[files.FILES_KEY]["not_covered"]
    assert str(rw) in [e["path"] for e in left] and str(temp) not in [e["path"] for e in left]
    assert "rw.txt" in files.plan_note(store.get(full), {})
    assert temp.name not in files.plan_note(store.get(full), {})

    os.replace(temp, work / "w.progress.json")  # the program's later run renamed it away
    files.put_back(store.get(full), store.images_dir(full))
    assert temp.read_text() == '{"step": 8}'
    temp.write_text('{"step": 12}')  # a later temporary file of the same name
    report = files.put_back(store.get(full), store.images_dir(full))
    assert temp.read_text() == '{"step": 8}'
    assert str(temp) not in [r["path"] for r in report]
    assert not list(work.glob(f"{temp.name}{files.AFTER}*"))

    temp.unlink()  # not carried by the other checkpoint: its absence refuses nothing
    files.put_back(store.get(none), store.images_dir(none))
