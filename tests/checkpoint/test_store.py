"""The checkpoint store without CRIU: ids, atomic publish, verification, retention, crashes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import struct
from pathlib import Path

import pytest

from core import errors
from core.checkpoint import stats
from core.model import CheckpointStatus
from core.store.store import CheckpointStore, parse_checkpoint_id
from tests.checkpoint import stores


def _make(store: CheckpointStore, lineage: str, payload: bytes = b"x" * 5000) -> str:
    pending = store.begin(lineage, engine="test", node="n1")
    (pending.images_dir / "pages-1.img").write_bytes(payload)
    (pending.images_dir / "core.img").write_bytes(b"core")
    return store.publish(pending, timings={"dump_s": 0.1}, leave_running=True).id


def test_publish_list_get_verify(tmp_path: Path) -> None:
    store = stores.keyed(tmp_path, keep=5)
    first = _make(store, "w1")
    second = _make(store, "w1", b"y" * 10)
    assert [i.id for i in store.list("w1")] == [second, first]
    info = store.get(second)
    assert info.parent == first and info.seq == 2 and info.engine == "test"
    assert info.size_bytes == 14 and {f.name for f in info.files} == {"pages-1.img", "core.img"}
    assert all(f.digest.startswith("sha256t16m:") for f in info.files)
    assert "publish_s" in info.timings
    assert store.verify(second).status is CheckpointStatus.GOOD
    assert (store.images_dir(first) / "pages-1.img").read_bytes() == b"x" * 5000


@pytest.mark.parametrize(
    "bad", ["", "w1", "w1@", "w1@0", "../w1@1", "w1@1/..", "w1@-1", "w 1@1", "w1@123456789"]
)
def test_bad_ids_are_refused(tmp_path: Path, bad: str) -> None:
    store = stores.keyed(tmp_path)
    with pytest.raises(errors.InvalidInput):
        store.get(bad)
    assert not any(tmp_path.iterdir())


def test_bad_lineage_changes_nothing(tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidInput):
        stores.keyed(tmp_path).begin("../escape", engine="t", node=None)
    assert not any(tmp_path.iterdir())


def test_unknown_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(errors.NotFound):
        stores.keyed(tmp_path).get("w1@7")
    assert parse_checkpoint_id("w1@7") == ("w1", 7)


@pytest.mark.parametrize("damage", ["truncate", "flip", "remove", "extra"])
def test_corruption_is_detected_and_older_good_used(tmp_path: Path, damage: str) -> None:
    store = stores.keyed(tmp_path)
    good = _make(store, "w1")
    bad = _make(store, "w1")
    pages = store.images_dir(bad) / "pages-1.img"
    if damage == "truncate":
        os.truncate(pages, 100)
    elif damage == "flip":
        data = bytearray(pages.read_bytes())
        data[2500] ^= 1
        pages.write_bytes(bytes(data))
    elif damage == "remove":
        pages.unlink()
    else:
        (pages.parent / "intruder.img").write_bytes(b"?")
    with pytest.raises(errors.CorruptCheckpoint) as exc:
        store.verify(bad)
    assert bad in exc.value.message and exc.value.hint
    assert store.get(bad).status is CheckpointStatus.CORRUPT
    newest = store.newest_good("w1")
    assert newest is not None and newest.id == good


def test_retention_keeps_newest_good(tmp_path: Path) -> None:
    store = stores.keyed(tmp_path, keep=2)
    ids = [_make(store, "w1") for _ in range(4)]
    deleted = store.apply_retention("w1")
    assert sorted(deleted) == sorted(ids[:2])
    assert [i.id for i in store.list("w1")] == [ids[3], ids[2]]
    # All kept ones corrupt except an older one: that one survives retention.
    store2 = stores.keyed(tmp_path / "b", keep=1)
    a = _make(store2, "w2")
    b = _make(store2, "w2")
    store2.mark_corrupt(b, "test")
    assert store2.apply_retention("w2") == []
    assert {i.id for i in store2.list("w2")} == {a, b}


def _killed_mid_publish(root: str) -> None:
    store = stores.keyed(Path(root))
    pending = store.begin("w1", engine="test", node=None)
    (pending.images_dir / "pages-1.img").write_bytes(b"z" * 100_000)

    def die(*args: object) -> None:  # the manifest is written; the rename never happens
        os.kill(os.getpid(), signal.SIGKILL)

    os.rename = die  # type: ignore[assignment]
    store.publish(pending, timings={}, leave_running=True)


def test_writer_killed_mid_publish_leaves_nothing_listed(tmp_path: Path) -> None:
    store = stores.keyed(tmp_path)
    good = _make(store, "w1")
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_killed_mid_publish, args=(str(tmp_path),))
    proc.start()
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    leftovers = [p for p in (tmp_path / "w1").iterdir() if p.name.startswith(".tmp-")]
    assert leftovers and (leftovers[0] / "manifest.json").exists()  # it really got that far
    assert [i.id for i in store.list("w1")] == [good]
    assert store.cleanup_partial() == [str(leftovers[0])]
    assert not [p for p in (tmp_path / "w1").iterdir() if p.name.startswith(".tmp-")]
    assert _make(store, "w1") == "w1@3"  # the killed writer's seq is never reused


def test_cleanup_spares_a_live_writer(tmp_path: Path) -> None:
    store = stores.keyed(tmp_path)
    pending = store.begin("w1", engine="test", node=None)
    assert store.cleanup_partial() == []
    assert pending.images_dir.is_dir()
    store.abort(pending)
    assert not pending.tmp_dir.exists()


def _allocate(root: str, q: multiprocessing.Queue[str]) -> None:
    store = stores.keyed(Path(root), keep=100)
    for _ in range(5):
        q.put(_make(store, "w1"))


def test_seq_allocation_is_safe_across_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    q: multiprocessing.Queue[str] = ctx.Queue()
    procs = [ctx.Process(target=_allocate, args=(str(tmp_path), q)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    ids = [q.get(timeout=5) for _ in range(15)]
    assert len(set(ids)) == 15
    assert len(stores.keyed(tmp_path).list("w1")) == 15


def test_stats_decoder() -> None:
    def varint(n: int) -> bytes:
        out = b""
        while True:
            b, n = n & 0x7F, n >> 7
            out += bytes([b | (0x80 if n else 0)])
            if not n:
                return out

    dump = varint(2 << 3) + varint(23_527) + varint(7 << 3) + varint(1719)
    entry = varint((1 << 3) | 2) + varint(len(dump)) + dump
    data = b"\x40\x59\x10\x55\x06\x33\x09\x57" + struct.pack("<I", len(entry)) + entry
    assert stats.decode(data) == {"frozen_s": 0.023527, "pages_written": 1719.0}
    assert stats.decode(b"garbage") == {}
