"""The checkpoint store without CRIU: ids, atomic publish, verification, retention, crashes."""

from __future__ import annotations

import grp
import json
import multiprocessing
import os
import shutil
import signal
import stat
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import errors
from core.checkpoint import stats
from core.model import CheckpointStatus
from core.store import digest
from core.store import seal as seal_mod
from core.store.disk import parse_checkpoint_id
from core.store.store import CheckpointStore
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


@pytest.mark.parametrize("all_lineages", [False, True])
def test_a_checkpoint_pruned_while_listed_is_left_out_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, all_lineages: bool
) -> None:
    """Retention (another process's publish) deletes a checkpoint between the listing of its
    lineage and the read of its directory: the listing goes on without it. Before, the
    authenticity check's lstat raised FileNotFoundError and `clawpoint checkpoints` showed a
    traceback (met by an ordinary user's listing beside a 2 s periodic checkpoint)."""
    from core.store import perms

    store = stores.keyed(tmp_path, keep=5)
    old, new = _make(store, "w1"), _make(store, "w1")
    old_dir = store.path_of(old)
    assert old_dir is not None
    read = perms.read_nofollow

    def read_then_prune(path: Path) -> bytes | None:
        raw = read(path)
        if path.parent == old_dir and old_dir.exists():
            shutil.rmtree(old_dir)  # what apply_retention does, right after the manifest read
        return raw

    monkeypatch.setattr(perms, "read_nofollow", read_then_prune)
    listed = store.list(None if all_lineages else "w1")
    assert [i.id for i in listed] == [new] and listed[0].status is CheckpointStatus.GOOD
    with pytest.raises(errors.NotFound):  # one checkpoint asked for by id: it is gone, said so
        store.get(old)


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


# -- confidentiality and authenticity (issue 20) -------------------------------------------


def _modes_under(top: Path) -> dict[str, tuple[str, int]]:
    """Relative path -> (kind, mode) of everything under ``top`` (links not followed)."""
    found: dict[str, tuple[str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
            found[str(path.relative_to(top))] = (kind, stat.S_IMODE(st.st_mode))
    return found


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)  # the usual umask, under which CRIU's images come out 0644
    try:
        yield
    finally:
        os.umask(old)


def test_everything_created_is_private_whatever_the_umask(tmp_path: Path, umask_022: None) -> None:
    store = stores.keyed(tmp_path / "store")
    pending = store.begin("w1", engine="test", node=None)
    assert stat.S_IMODE(os.stat(pending.tmp_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(pending.images_dir).st_mode) == 0o700
    (pending.images_dir / "pages-1.img").write_bytes(b"secret" * 100)  # 0644, as CRIU's
    (pending.work_dir / "dump.log").write_text("engine log")
    assert stat.S_IMODE(os.stat(pending.images_dir / "pages-1.img").st_mode) == 0o644
    cid = store.publish(pending, timings={}, leave_running=True).id
    store.mark_corrupt(cid, "to see the marker's mode too")
    found = _modes_under(tmp_path / "store" / "w1")
    names = {Path(p).name for p in found}
    assert {".lock", ".seq", "manifest.json", "manifest.mac", "pages-1.img", "CORRUPT"} <= names
    assert {p: m for p, (k, m) in found.items() if k == "dir" and m != 0o700} == {}
    assert {p: m for p, (k, m) in found.items() if k == "file" and m != 0o600} == {}
    assert stat.S_IMODE(os.stat(tmp_path / "store" / "w1").st_mode) == 0o700
    key = stores.key_for(tmp_path / "store")
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600 and key.stat().st_size == 32
    assert stat.S_IMODE(os.stat(key.parent).st_mode) == 0o700


def test_group_mode(tmp_path: Path, umask_022: None) -> None:
    group = grp.getgrnam("daemon")  # any group: root may hand its files to it
    store = stores.keyed(tmp_path / "store", group="daemon")
    cid = _make(store, "w1")
    top = tmp_path / "store" / "w1"
    for rel, (kind, mode) in _modes_under(top).items():
        assert mode == (0o2750 if kind == "dir" else 0o640), rel
        assert os.lstat(top / rel).st_gid == group.gr_gid, rel
    assert store.verify(cid).status is CheckpointStatus.GOOD
    with pytest.raises(errors.InvalidInput, match="no-such-group"):
        stores.keyed(tmp_path / "other", group="no-such-group").begin("w", engine="t", node=None)


@pytest.mark.parametrize("problem", ["readable", "foreign", "link", "short", "in-store"])
def test_key_file_is_refused(tmp_path: Path, problem: str) -> None:
    root = tmp_path / "store"
    key = stores.key_for(root)
    _make(stores.keyed(root), "w1")  # creates the key
    if problem == "readable":
        key.chmod(0o640)
    elif problem == "foreign":
        os.chown(key, 65534, 65534)
    elif problem == "link":
        real = tmp_path / "elsewhere.key"
        key.rename(real)
        key.symlink_to(real)
    elif problem == "short":
        key.write_bytes(b"k" * 16)
    if problem == "in-store":
        store = CheckpointStore(root, key=root / "keys" / "store.key")
    else:
        store = stores.keyed(root)
    with pytest.raises(errors.CheckpointError) as exc:
        store.begin("w1", engine="test", node=None)
    assert exc.value.code == "store-key-refused" and exc.value.exit_code == 8
    assert str(key if problem != "in-store" else root) in exc.value.message and exc.value.hint
    assert not [p for p in (root / "w1").iterdir() if p.name.startswith(".tmp-")]


def _refused(store: CheckpointStore, cid: str) -> errors.UntrustedCheckpoint:
    with pytest.raises(errors.UntrustedCheckpoint) as exc:
        store.verify(cid, digests=False, restore=True)
    assert isinstance(exc.value, errors.CorruptCheckpoint) and exc.value.exit_code == 8
    assert cid in exc.value.message and exc.value.hint
    return exc.value


def test_tampered_manifest_is_untrusted_never_restored_marked_or_deleted(tmp_path: Path) -> None:
    store = stores.keyed(tmp_path, keep=1)
    good = _make(store, "w1")
    bad = _make(store, "w1")
    manifest = store.images_dir(bad).parent / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["files"][0]["digest"] = doc["files"][0]["digest"][:-4] + "0000"  # one digest flipped
    manifest.write_text(json.dumps(doc, indent=1))
    info = store.get(bad)
    assert info.status is CheckpointStatus.UNTRUSTED
    assert "changed after it was signed" in info.extra["untrusted_reason"]
    assert "changed after it was signed" in _refused(store, bad).message
    assert not (manifest.parent / "CORRUPT").exists()
    assert [i.id for i in store.candidates("w1")] == [good]
    newest = store.newest_good("w1")
    assert newest is not None and newest.id == good
    assert store.apply_retention("w1") == []  # keep=1: the untrusted one neither goes nor counts
    assert {i.id: i.status for i in store.list("w1")} == {
        bad: CheckpointStatus.UNTRUSTED,
        good: CheckpointStatus.GOOD,
    }


@pytest.mark.parametrize("seal", ["kept", "removed", "other-key"])
def test_planted_checkpoint_with_recomputed_digests_is_refused(tmp_path: Path, seal: str) -> None:
    """Copy a checkpoint, patch 4 KiB of its pages, recompute the digest, rewrite the
    manifest as the next one: everything a digest could check is consistent."""
    store = stores.keyed(tmp_path / "store")
    original = _make(store, "w1", b"p" * 20_000)
    src = store.images_dir(original).parent
    planted = src.parent / "00000002"
    shutil.copytree(src, planted)
    pages = planted / "images" / "pages-1.img"
    data = bytearray(pages.read_bytes())
    data[4096:8192] = b"\xcc" * 4096
    pages.write_bytes(bytes(data))
    doc = json.loads((planted / "manifest.json").read_text())
    doc.update(id="w1@2", seq=2, parent=original)
    for f in doc["files"]:
        f["size"], f["digest"] = digest.file_digest(planted / "images" / f["name"])
    raw = json.dumps(doc, indent=1).encode()
    (planted / "manifest.json").write_bytes(raw)
    if seal == "removed":
        (planted / "manifest.mac").unlink()
    elif seal == "other-key":  # signed properly, by someone else's clawpoint
        other = seal_mod.StoreKey(tmp_path / "mallory" / "store.key")
        (planted / "manifest.mac").write_bytes(other.seal(raw))
    why = {
        "kept": "changed after it was signed",
        "removed": "not signed",
        "other-key": "signed with another key",
    }[seal]
    assert why in store.get("w1@2").extra["untrusted_reason"]
    assert why in _refused(store, "w1@2").message
    newest = store.newest_good("w1")
    assert newest is not None and newest.id == original


def test_relabelled_checkpoint_is_untrusted(tmp_path: Path) -> None:
    """A genuine older checkpoint moved to a newer sequence number (a rollback) is refused."""
    store = stores.keyed(tmp_path)
    first = _make(store, "w1")
    os.rename(store.images_dir(first).parent, tmp_path / "w1" / "00000009")
    assert "lies at w1@9" in store.get("w1@9").extra["untrusted_reason"]
    _refused(store, "w1@9")


def test_symlinked_lineage_is_refused_by_name(tmp_path: Path) -> None:
    elsewhere = stores.keyed(tmp_path / "elsewhere")
    _make(elsewhere, "w1")
    root = tmp_path / "store"
    root.mkdir()
    (root / "w1").symlink_to(tmp_path / "elsewhere" / "w1")
    store = stores.keyed(tmp_path / "elsewhere")  # same key: only the link is wrong
    store.root = root
    for attempt in (
        lambda: store.list("w1"),
        lambda: store.get("w1@1"),
        lambda: store.begin("w1", engine="test", node=None),
    ):
        with pytest.raises(errors.UntrustedCheckpoint, match="symbolic link") as exc:
            attempt()
        assert str(root / "w1") in exc.value.message and exc.value.exit_code == 8
    assert store.list() == []
    assert (tmp_path / "elsewhere" / "w1" / "00000001" / "manifest.json").exists()


def test_lineage_of_another_uid(tmp_path: Path) -> None:
    """Root reads another user's lineage as unverified, writes nothing into it, restores
    nothing from it; a checkpoint dir of another uid inside our own lineage is untrusted."""
    store = stores.keyed(tmp_path)
    cid = _make(store, "w1")
    for dirpath, dirnames, filenames in os.walk(tmp_path / "w1"):
        for name in [".", *dirnames, *filenames]:
            os.chown(Path(dirpath) / name, 65534, 65534)
    # Handed to another uid, but its manifest names us as the owner: not theirs either.
    assert "records owner uid 0" in store.get(cid).extra["untrusted_reason"]
    manifest = tmp_path / "w1" / "00000001" / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["extra"]["owner_uid"] = 65534  # as that user's own wrapper would have written it
    manifest.write_text(json.dumps(doc))
    (info,) = store.list("w1")
    assert info.status is CheckpointStatus.UNVERIFIED
    assert "uid 65534" in info.extra["unverified_reason"]
    assert store.verify(cid).status is CheckpointStatus.UNVERIFIED  # integrity only
    _refused(store, cid)
    with pytest.raises(errors.UntrustedCheckpoint, match="belongs to uid 65534"):
        store.begin("w1", engine="test", node=None)
    mine = _make(store, "w2")
    os.chown(store.images_dir(mine).parent, 65534, 65534)
    assert "someone else put it there" in store.get(mine).extra["untrusted_reason"]


def test_unsigned_legacy_checkpoint_can_be_resealed_by_its_owner(tmp_path: Path) -> None:
    store = stores.keyed(tmp_path)
    cid = _make(store, "w1")
    (store.images_dir(cid).parent / "manifest.mac").unlink()  # as written before signing
    err = _refused(store, cid)
    assert "--reseal" in err.hint
    assert store.reseal(cid).status is CheckpointStatus.GOOD
    assert store.verify(cid, restore=True).status is CheckpointStatus.GOOD
    pages = store.images_dir(cid) / "pages-1.img"
    (store.images_dir(cid).parent / "manifest.mac").unlink()
    pages.write_bytes(b"tampered" + pages.read_bytes()[8:])
    with pytest.raises(errors.CorruptCheckpoint, match="digest"):
        store.reseal(cid)  # never vouches for bytes that do not match
    assert store.get(cid).status is CheckpointStatus.UNTRUSTED


def test_a_store_without_key_reads_unverified_and_writes_nothing(tmp_path: Path) -> None:
    cid = _make(stores.keyed(tmp_path), "w1")
    reader = CheckpointStore(tmp_path)
    assert [i.status for i in reader.list("w1")] == [CheckpointStatus.UNVERIFIED]
    _refused(reader, cid)
    with pytest.raises(errors.CheckpointError, match="no store key"):
        reader.begin("w1", engine="test", node=None)
