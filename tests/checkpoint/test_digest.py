"""The chunked sha256 digest (``sha256t16m``): definition, parallel paths, damage, old digests."""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path

import pytest

from core import errors
from core.model import CheckpointStatus
from core.store import digest
from core.store.disk import MANIFEST
from core.store.store import CheckpointStore
from tests.checkpoint import stores

MIB = 1024 * 1024
SIZE = 2 * 16 * MIB + 12_345  # two full chunks and a short third one


def reference(data: bytes) -> str:
    """The tree digest written out from its definition, independently of the module."""
    step = 16 * MIB
    leaves = [hashlib.sha256(data[i : i + step]).digest() for i in range(0, len(data), step)]
    return "sha256t16m:" + hashlib.sha256(b"".join(leaves)).hexdigest()


@pytest.fixture(scope="module")
def data() -> bytes:
    return os.urandom(SIZE)


@pytest.fixture
def tree_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(digest.ENV_DIGEST, raising=False)


@pytest.mark.parametrize("threads", ["1", "2", "4"])
def test_file_digest_matches_reference(
    tmp_path: Path, data: bytes, threads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(digest.ENV_THREADS, threads)
    for size in (SIZE, 16 * MIB, 16 * MIB + 1, 5, 0):
        p = tmp_path / f"f{size}"
        p.write_bytes(data[:size])
        assert digest.file_digest(p, digest.TREE) == (size, reference(data[:size]))


def test_empty_file_is_sha256_of_nothing(tmp_path: Path) -> None:
    (tmp_path / "e").write_bytes(b"")
    expected = "sha256t16m:" + hashlib.sha256(b"").hexdigest()
    assert digest.file_digest(tmp_path / "e", digest.TREE) == (0, expected)


def test_sequential_hasher_matches_reference(data: bytes) -> None:
    h = digest.new_hasher(digest.TREE)
    pos = 0
    for piece in (1, 7 * MIB, 16 * MIB, 3, 9 * MIB):  # updates straddling chunk boundaries
        h.update(memoryview(data)[pos : pos + piece])
        pos += piece
    h.update(data[pos:])
    assert "sha256t16m:" + h.hexdigest() == reference(data)


def test_follower_hashes_a_growing_file(tmp_path: Path, data: bytes, tree_default: None) -> None:
    follower = digest.Follower(tmp_path)
    follower.start()
    with open(tmp_path / "pages-1.img", "wb") as f:
        for i in range(0, SIZE, 3 * MIB + 17):  # appends that do not align with chunks
            f.write(data[i : i + 3 * MIB + 17])
            f.flush()
            time.sleep(0.002)
    (tmp_path / "pages-2.img").write_bytes(data[:100])  # created at the very end
    (tmp_path / "core.img").write_bytes(b"not followed")
    got = follower.finish()
    assert got == {
        "pages-1.img": (SIZE, reference(data)),
        "pages-2.img": (100, reference(data[:100])),
    }


def test_follower_streaming_algorithms_still_work(tmp_path: Path, data: bytes) -> None:
    follower = digest.Follower(tmp_path, algo="sha256")
    follower.start()
    (tmp_path / "pages-1.img").write_bytes(data)
    assert follower.finish() == {
        "pages-1.img": (SIZE, "sha256:" + hashlib.sha256(data).hexdigest())
    }


def _publish(store: CheckpointStore, data: bytes) -> str:
    pending = store.begin("w", engine="test", node=None)
    (pending.images_dir / "pages-1.img").write_bytes(data)
    (pending.images_dir / "core.img").write_bytes(b"core")
    return store.publish(pending, timings={}, leave_running=True).id


def test_new_checkpoints_use_the_tree(tmp_path: Path, data: bytes, tree_default: None) -> None:
    store = stores.keyed(tmp_path)
    cid = _publish(store, data)
    files = {f.name: f.digest for f in store.get(cid).files}
    assert files == {"pages-1.img": reference(data), "core.img": reference(b"core")}
    assert store.verify(cid).status is CheckpointStatus.GOOD


@pytest.mark.parametrize("offset", [0, 16 * MIB - 1, 16 * MIB, 2 * 16 * MIB + 5, SIZE - 1])
def test_flipped_byte_in_any_chunk_is_detected(
    tmp_path: Path, data: bytes, offset: int, tree_default: None
) -> None:
    store = stores.keyed(tmp_path)
    cid = _publish(store, data)
    path = store.images_dir(cid) / "pages-1.img"
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(errors.CorruptCheckpoint, match="digest"):
        store.verify(cid)
    assert store.get(cid).status is CheckpointStatus.CORRUPT


@pytest.mark.parametrize(
    ("size", "why"),
    [(2 * 16 * MIB, "truncated to a chunk boundary"), (SIZE - 1, "one byte short")],
)
def test_truncation_is_detected(
    tmp_path: Path, data: bytes, size: int, why: str, tree_default: None
) -> None:
    assert reference(data[:size]) != reference(data), why
    store = stores.keyed(tmp_path)
    cid = _publish(store, data)
    path = store.images_dir(cid) / "pages-1.img"
    os.truncate(path, size)
    assert digest.file_digest(path)[1] != reference(data)  # the digest alone sees it too
    with pytest.raises(errors.CorruptCheckpoint, match="truncated"):
        store.verify(cid, digests=False)  # and the size check, before any read


@pytest.mark.parametrize("extra", [b"\0", b"\0" * (3 * 16 * MIB - SIZE), b"\0" * 16 * MIB])
def test_extension_is_detected(
    tmp_path: Path, data: bytes, extra: bytes, tree_default: None
) -> None:
    store = stores.keyed(tmp_path)
    cid = _publish(store, data)
    path = store.images_dir(cid) / "pages-1.img"
    with open(path, "ab") as f:
        f.write(extra)
    assert digest.file_digest(path)[1] != reference(data)
    with pytest.raises(errors.CorruptCheckpoint):
        store.verify(cid)


def test_old_and_new_digests_verify_side_by_side(
    tmp_path: Path, data: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = stores.keyed(tmp_path, keep=5)
    monkeypatch.setenv(digest.ENV_DIGEST, "sha256")
    old = _publish(store, data)
    assert all(f.digest.startswith("sha256:") for f in store.get(old).files)
    monkeypatch.setenv(digest.ENV_DIGEST, "sha256-tree")
    new = _publish(store, data)
    assert all(f.digest.startswith("sha256t16m:") for f in store.get(new).files)
    # One manifest mixing both (e.g. a file re-hashed by a newer clawpoint).
    manifest = store.images_dir(new).parent / MANIFEST
    doc = json.loads(manifest.read_text())
    for f in doc["files"]:
        if f["name"] == "core.img":
            f["digest"] = "sha256:" + hashlib.sha256(b"core").hexdigest()
    manifest.write_text(json.dumps(doc))
    store.reseal(new)  # whatever rewrites a manifest signs it again
    assert {digest.algo_of(f.digest) for f in store.get(new).files} == {"sha256", "sha256t16m"}
    for cid in (old, new):
        assert store.verify(cid).status is CheckpointStatus.GOOD
    (store.images_dir(new) / "core.img").write_bytes(b"Core")
    with pytest.raises(errors.CorruptCheckpoint, match=r"core\.img"):
        store.verify(new)


def test_digest_selection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(digest.ENV_DIGEST, raising=False)
    assert digest.default_algo() == "sha256t16m"
    for name, algo in [("SHA256", "sha256"), ("blake2b", "blake2b"), ("sha256-tree", "sha256t16m")]:
        monkeypatch.setenv(digest.ENV_DIGEST, name)
        assert digest.default_algo() == algo
    monkeypatch.setenv(digest.ENV_DIGEST, "md5")
    with pytest.raises(errors.InvalidInput):
        digest.default_algo()
    with pytest.raises(errors.CheckpointError):
        digest.new_hasher("sha256t1m")  # another chunk size is another, unknown algorithm


def test_pool_is_shared_and_rebuilt_on_resize(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(digest.ENV_THREADS, "2")
    pool = digest._chunk_pool()
    assert digest._chunk_pool() is pool
    monkeypatch.setenv(digest.ENV_THREADS, "3")
    assert digest._chunk_pool() is not pool
    names: set[str] = set()
    digest._chunk_pool().submit(lambda: names.add(threading.current_thread().name)).result()
    assert all(n.startswith("digest") for n in names)
