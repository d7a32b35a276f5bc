"""Unit tests of the checkpoint store (no CRIU, no root)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core import errors
from core.checkpoint import stats
from core.model import CheckpointStatus
from core.store.digest import DirectoryFollower, file_digest
from core.store.store import CheckpointStore


def _write(store: CheckpointStore, lineage: str, payload: bytes = b"x" * 1000) -> str:
    p = store.begin(lineage, engine="cooperative", node="node-a")
    (p.images_dir / "state.bin").write_bytes(payload)
    (p.images_dir / "sub").mkdir()
    (p.images_dir / "sub" / "meta").write_text("m")
    return store.publish(p, timings={"t": 1.0}, leave_running=True).id


def test_publish_list_get_verify(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=5)
    a = _write(store, "w1")
    b = _write(store, "w1", b"y" * 10)
    assert (a, b) == ("w1@1", "w1@2")
    listed = store.list("w1")
    assert [c.id for c in listed] == ["w1@2", "w1@1"]
    info = store.get("w1@2")
    assert info.parent == "w1@1" and info.node == "node-a" and info.size_bytes == 11
    assert {f.name for f in info.files} == {"state.bin", "sub/meta"}
    assert store.verify("w1@2").status is CheckpointStatus.GOOD
    assert (store.images_dir("w1@1") / "state.bin").read_bytes() == b"x" * 1000


def test_bad_ids_are_refused(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    for bad in ("w1", "w1@x", "../etc@1", "w1@0"):
        with pytest.raises(errors.InvalidInput):
            store.get(bad)
    with pytest.raises(errors.NotFound):
        store.get("w1@7")
    with pytest.raises(errors.InvalidInput):
        store.begin("../escape", engine="criu", node=None)
    assert list(tmp_path.iterdir()) == []


def test_truncated_and_flipped_images_fall_back(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=5)
    _write(store, "w1")
    _write(store, "w1")
    third = _write(store, "w1")
    img = store.images_dir(third) / "state.bin"
    img.write_bytes(b"x" * 999)  # truncated
    with pytest.raises(errors.CorruptCheckpoint, match="has 999 bytes"):
        store.verify(third)
    second = store.images_dir("w1@2") / "state.bin"
    second.write_bytes(b"z" + b"x" * 999)  # same size, one byte flipped
    with pytest.raises(errors.CorruptCheckpoint, match="digest"):
        store.verify("w1@2")
    good = store.newest_good("w1")
    assert good is not None and good.id == "w1@1"
    statuses = {c.id: c.status for c in store.list("w1")}
    assert statuses["w1@3"] is CheckpointStatus.CORRUPT
    assert statuses["w1@2"] is CheckpointStatus.CORRUPT


def test_retention_keeps_newest_good(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for _ in range(4):
        _write(store, "w1")
    assert sorted(store.apply_retention("w1")) == ["w1@1", "w1@2"]
    assert [c.id for c in store.list("w1")] == ["w1@4", "w1@3"]
    # the two newest are corrupt: the newest good one (none left but older) must survive
    store.mark_corrupt("w1@4", "test")
    store.mark_corrupt("w1@3", "test")
    _write(store, "w1")  # @5 good
    store.mark_corrupt("w1@5", "test")
    _write(store, "w1")  # @6 good
    store.apply_retention("w1")
    assert [c.id for c in store.list("w1")] == ["w1@6", "w1@5"]


def test_delete_and_abort(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    cid = _write(store, "w1")
    store.delete(cid)
    assert store.list("w1") == []
    with pytest.raises(errors.NotFound):
        store.delete(cid)
    p = store.begin("w1", engine="criu", node=None)
    store.abort(p)
    assert not p.tmp_dir.exists()


_KILLED_WRITER = textwrap.dedent(
    """
    import os, sys, signal
    from pathlib import Path
    from core.store import store as st
    s = st.CheckpointStore(Path(sys.argv[1]))
    p = s.begin("w1", engine="criu", node=None)
    (p.images_dir / "pages.img").write_bytes(b"p" * 100000)
    real_rename = os.rename
    def die(*a, **k):  # killed just before the atomic rename
        os.kill(os.getpid(), signal.SIGKILL)
    os.rename = die
    s.publish(p, timings={}, leave_running=True)
    """
)


def test_writer_killed_mid_publish_leaves_nothing_listed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(root)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    store = CheckpointStore(root)
    assert store.list() == []
    leftovers = [p for p in (root / "w1").iterdir() if p.name.startswith(".tmp-")]
    assert len(leftovers) == 1 and (leftovers[0] / "manifest.json").exists()
    live = store.begin("w1", engine="criu", node=None)  # a live writer is left alone
    assert live.seq == 2
    removed = store.cleanup_partial()
    assert removed == [str(leftovers[0])]
    assert live.tmp_dir.exists()
    store.abort(live)


def test_follower_matches_file_digest(tmp_path: Path) -> None:
    f = DirectoryFollower(tmp_path).start()
    with open(tmp_path / "grow.img", "wb") as out:
        for i in range(50):
            out.write(os.urandom(100_000) + bytes([i]))
            out.flush()
    got = f.finish()
    assert got["grow.img"] == file_digest(tmp_path / "grow.img")


def test_stats_decoder(tmp_path: Path) -> None:
    # A stats-dump written by CRIU 4.1.1 (frozen_time 811514 us, pages_written 67262).
    raw = bytes.fromhex(
        "4059105506330957280000000a26086110fac33118d4bd2f20d0822d28a28e04300038be8d04"
        "4000480050085808600068007000"
    )
    (tmp_path / "stats-dump").write_bytes(raw)
    got = stats.decode(tmp_path / "stats-dump")
    assert got["criu_frozen_time_s"] == pytest.approx(0.811514)
    assert got["criu_pages_written"] == 67262
    assert stats.decode(tmp_path / "missing") == {}
