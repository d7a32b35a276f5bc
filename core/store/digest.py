"""File digests for checkpoint images: whole-file hashing, and a follower that hashes as files grow.

Why a follower: hashing 1 GiB costs one to several seconds on one core, so hashing after CRIU
has finished would add that to every checkpoint. The follower thread watches each large image
file while CRIU is still appending to it (the bytes come from the page cache, so it costs no
disk reads), hashes what has arrived, and asks the kernel to start writing it back
(``sync_file_range(SYNC_FILE_RANGE_WRITE)``, which does not wait; ``fdatasync`` where that
call is missing) so the final fsync at publish has little left to do.

Algorithms: digests are written ``ALGO:HEX``. The default, ``sha256t16m``, is a chunked
("tree") sha256 that can use every core: the file is cut into 16 MiB chunks (the last one
may be shorter; an empty file has none), each chunk is hashed with sha256, and the digest is
the sha256 of the concatenated 32-byte chunk digests, in file order. The chunk size is part of
the name, so a different size would be a different algorithm. Chunks are hashed by a small
thread pool (``hashlib`` releases the GIL while hashing large buffers), as soon as they are
complete while CRIU writes, and all at once after it exits; restore verification uses the
same pool. The pool has one thread per usable CPU (``CLAWPOINT_DIGEST_THREADS`` overrides).
Plain ``sha256`` (one stream, one core: what older checkpoints use), ``blake2b`` and
``blake3`` (the optional ``blake3`` package) are selected with ``CLAWPOINT_DIGEST``
(``sha256-tree`` is accepted for ``sha256t16m``). Verification always uses the algorithm
named in each manifest entry, so checkpoints written with different settings, or a manifest
mixing algorithms, stay verifiable; an algorithm not available here raises CheckpointError
(the checkpoint is not marked corrupt).

Limits: the follower assumes the writer only appends to the files it follows (CRIU writes its
``pages-*.img`` sequentially): a tree chunk is hashed once the file has grown past its end.
Small files are never followed: the store hashes them after the writer is done, so a small
file rewritten in place is still hashed correctly. If a followed file were ever rewritten in
place its digest would not match the bytes, and verification on restore would refuse it as
corrupt: safe, never silent.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Protocol

from core import errors

ENV_DIGEST = "CLAWPOINT_DIGEST"
ENV_THREADS = "CLAWPOINT_DIGEST_THREADS"
TREE = "sha256t16m"
TREE_CHUNK = 16 << 20  # the chunk size named by TREE: never change it without a new name
ALGOS = (TREE, "sha256", "blake2b", "blake3")
ALGO = TREE  # the default
_ALIASES = {"sha256-tree": TREE, "sha256t": TREE}
CHUNK = 8 << 20  # read size for the streaming algorithms
_SYNC_EVERY = 16 << 20  # start write-back every 16 MiB so publish's fsync finds little to do
_SYNC_FILE_RANGE_WRITE = 2
_MAX_THREADS = 16
_READ = 1 << 20  # the pool's read size within a chunk
_POOL_NICE = 10  # the pool's threads yield the CPU to CRIU and the workload

_sync_file_range: Callable[[int, int, int, int], int] | None
try:
    _fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    _fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    _fn.restype = ctypes.c_int
    _sync_file_range = _fn
except (OSError, AttributeError):  # not Linux/glibc: fall back to fdatasync
    _sync_file_range = None


class Hasher(Protocol):
    def update(self, data: bytes | bytearray | memoryview, /) -> object: ...
    def hexdigest(self) -> str: ...


def default_algo() -> str:
    """The algorithm for new checkpoints: ``$CLAWPOINT_DIGEST`` or the sha256 tree."""
    algo = os.environ.get(ENV_DIGEST, "").strip().lower() or ALGO
    algo = _ALIASES.get(algo, algo)
    if algo not in ALGOS:
        raise errors.InvalidInput(
            f"{ENV_DIGEST}={algo!r} is not a supported digest",
            hint=f"use one of {', '.join(ALGOS)} (or unset it for {ALGO})",
        )
    return algo


class TreeHasher:
    """Sequential (one-thread) ``sha256t16m``: the reference the parallel paths must match."""

    def __init__(self) -> None:
        self._chunk = hashlib.sha256()
        self._filled = 0
        self._digests: list[bytes] = []

    def update(self, data: bytes | bytearray | memoryview, /) -> object:
        view = memoryview(data).cast("B")
        while len(view):
            take = min(len(view), TREE_CHUNK - self._filled)
            self._chunk.update(view[:take])
            self._filled += take
            view = view[take:]
            if self._filled == TREE_CHUNK:
                self._digests.append(self._chunk.digest())
                self._chunk = hashlib.sha256()
                self._filled = 0
        return None

    def hexdigest(self) -> str:
        tail = [self._chunk.digest()] if self._filled else []
        return tree_hex([*self._digests, *tail])


def tree_hex(chunk_digests: list[bytes]) -> str:
    """The ``sha256t16m`` hex digest from the ordered sha256 digests of a file's chunks."""
    return hashlib.sha256(b"".join(chunk_digests)).hexdigest()


def new_hasher(algo: str) -> Hasher:
    """A hasher for ``algo``; CheckpointError if it is unknown or its package is missing."""
    if algo == "blake3":
        try:
            import blake3
        except ImportError as exc:
            raise errors.CheckpointError(
                "this checkpoint uses blake3 digests but the blake3 package is not installed",
                hint="pip install blake3 (the 'fast-digest' extra) to verify and restore it",
            ) from exc
        h: Hasher = blake3.blake3()
        return h
    if algo == TREE:
        return TreeHasher()
    if algo in ("sha256", "blake2b"):
        return hashlib.new(algo)
    raise errors.CheckpointError(
        f"unknown digest algorithm {algo!r}",
        hint=f"this clawpoint knows {', '.join(ALGOS)}; a newer version may have written it",
    )


def algo_of(digest: str) -> str:
    """The algorithm of an ``ALGO:HEX`` digest."""
    return digest.split(":", 1)[0]


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing back a range, without waiting for it."""
    if _sync_file_range is not None and length > 0:
        if _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE) == 0:
            return
    os.fdatasync(fd)


# -- the chunk pool -------------------------------------------------------------------------


def hash_threads() -> int:
    """Threads of the chunk pool: ``$CLAWPOINT_DIGEST_THREADS`` or the usable CPUs (1-16)."""
    raw = os.environ.get(ENV_THREADS, "").strip()
    if raw:
        try:
            wanted = int(raw)
        except ValueError as exc:
            raise errors.InvalidInput(
                f"{ENV_THREADS}={raw!r} is not a number",
                hint="set it to the number of hashing threads, or unset it",
            ) from exc
    else:
        try:
            wanted = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            wanted = os.cpu_count() or 1
    return max(1, min(_MAX_THREADS, wanted))


_pool_lock = threading.Lock()
_pool: tuple[int, int, ThreadPoolExecutor] | None = None  # (pid, threads, pool)
_local = threading.local()


def _chunk_pool() -> ThreadPoolExecutor:
    """The process-wide pool; rebuilt after fork (its threads stay in the parent) or resize."""
    global _pool
    threads = hash_threads()
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid() or _pool[1] != threads:
            old = _pool
            _pool = (
                os.getpid(),
                threads,
                ThreadPoolExecutor(
                    max_workers=threads,
                    thread_name_prefix="digest",
                    initializer=_pool_thread_init,
                ),
            )
            if old is not None and old[0] == os.getpid():
                old[2].shutdown(wait=False)
        return _pool[2]


def _pool_thread_init() -> None:
    """Hashing yields to CRIU and the workload: the pool's threads run at a lower priority.

    CRIU writes the page images while the workload is frozen, so hashing that competed
    with it on equal terms would lengthen the pause the workload sees.
    """
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), _POOL_NICE)
    except (AttributeError, OSError):  # not Linux: plain priority
        pass


def _hash_chunk(fd: int, offset: int, length: int) -> tuple[int, bytes]:
    """(bytes read, sha256 digest) of ``length`` bytes at ``offset``; fewer at end of file.

    Read in 1 MiB pieces into a per-thread buffer, so each piece is hashed while it is still
    in the CPU's cache.
    """
    buf: bytearray | None = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = bytearray(_READ)
    view = memoryview(buf)
    h = hashlib.sha256()
    got = 0
    while got < length:
        n = os.preadv(fd, [view[: min(_READ, length - got)]], offset + got)
        if not n:
            break
        h.update(view[:n])
        got += n
    return got, h.digest()


def _tree_result(fd: int, path: Path, futures: list[Future[tuple[int, bytes]]]) -> tuple[int, str]:
    size = 0
    chunk_digests: list[bytes] = []
    for i, fut in enumerate(futures):
        got, dig = fut.result()
        if not got or (got != TREE_CHUNK and i != len(futures) - 1):
            raise errors.CheckpointError(
                f"{path} shrank while it was being hashed",
                hint="image files must not change while a checkpoint is written or verified",
            )
        size += got
        chunk_digests.append(dig)
    return size, f"{TREE}:{tree_hex(chunk_digests)}"


def _tree_file_digest(path: Path) -> tuple[int, str]:
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        offsets = range(0, size, TREE_CHUNK)
        if len(offsets) <= 1:  # one chunk or none: no point in a thread hop
            done: Future[tuple[int, bytes]] = Future()
            done.set_result(_hash_chunk(fd, 0, size))
            futures = [done] if size else []
        else:
            pool = _chunk_pool()
            futures = [pool.submit(_hash_chunk, fd, o, min(TREE_CHUNK, size - o)) for o in offsets]
        try:
            return _tree_result(fd, path, futures)
        finally:
            wait(futures)  # the fd must outlive every read of it
    finally:
        os.close(fd)


def file_digest(path: Path, algo: str | None = None) -> tuple[int, str]:
    """(size, "ALGO:<hex>") of a whole file, read in large chunks without Python buffering.

    ``algo`` defaults to ``default_algo()``. The tree algorithm hashes its chunks on the
    shared pool, so one large file uses every hashing thread.
    """
    algo = algo or default_algo()
    if algo == TREE:
        return _tree_file_digest(path)
    h = new_hasher(algo)
    size = 0
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
            size += n
    return size, f"{algo}:{h.hexdigest()}"


# -- following files as they are written ----------------------------------------------------


class _Followed:
    """A file hashed as one stream by the follower thread (sha256, blake2b, blake3)."""

    def __init__(self, path: Path, algo: str) -> None:
        self.path = path
        self.algo = algo
        self.hash = new_hasher(algo)
        self.fd = os.open(path, os.O_RDONLY)
        self.offset = 0
        self.synced = 0
        self.buf = bytearray(CHUNK)
        self.view = memoryview(self.buf)

    def pump(self, *, sync: bool, final: bool) -> int:
        """Hash whatever was appended since the last call; returns the bytes read."""
        total = 0
        while True:
            n = os.preadv(self.fd, [self.buf], self.offset)
            if not n:
                break
            self.hash.update(self.view[:n])
            self.offset += n
            total += n
            if sync and self.offset - self.synced >= _SYNC_EVERY:
                start_writeback(self.fd, self.synced, self.offset - self.synced)
                self.synced = self.offset
        return total

    def result(self) -> tuple[int, str]:
        return self.offset, f"{self.algo}:{self.hash.hexdigest()}"


class _TreeFollowed:
    """A file whose complete 16 MiB chunks are handed to the pool as soon as they exist."""

    def __init__(self, path: Path, pool: ThreadPoolExecutor) -> None:
        self.path = path
        self.pool = pool
        self.fd = os.open(path, os.O_RDONLY)
        self.offset = 0  # bytes handed to the pool
        self.synced = 0
        self.futures: list[Future[tuple[int, bytes]]] = []

    def pump(self, *, sync: bool, final: bool) -> int:
        """Submit every chunk now complete (and, once the writer is gone, the last one)."""
        size = os.fstat(self.fd).st_size
        start = self.offset
        while size - self.offset >= TREE_CHUNK or (final and size > self.offset):
            length = min(TREE_CHUNK, size - self.offset)
            self.futures.append(self.pool.submit(_hash_chunk, self.fd, self.offset, length))
            self.offset += length
        if sync and self.offset - self.synced >= _SYNC_EVERY:
            start_writeback(self.fd, self.synced, self.offset - self.synced)
            self.synced = self.offset
        return self.offset - start

    def result(self) -> tuple[int, str]:
        return _tree_result(self.fd, self.path, self.futures)


class Follower:
    """Hash files matching ``select`` in ``directory`` while another process writes them.

    ``start()`` the thread before the writer starts, ``finish()`` after it has exited: the
    result maps file name to (size, digest) for every followed file.
    """

    def __init__(
        self,
        directory: Path,
        *,
        select: Callable[[str], bool] | None = None,
        sync: bool = True,
        algo: str | None = None,
    ) -> None:
        self.directory = directory
        self.algo = algo or default_algo()
        new_hasher(self.algo)  # fail here, before the writer starts, if it is unavailable
        self.select = select or (lambda name: name.startswith("pages-") and name.endswith(".img"))
        self.sync = sync
        self._pool = _chunk_pool() if self.algo == TREE else None
        self._files: dict[str, _Followed | _TreeFollowed] = {}
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="image-follower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _scan(self) -> None:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        for name in names:
            if name not in self._files and self.select(name):
                try:
                    path = self.directory / name
                    self._files[name] = (
                        _TreeFollowed(path, self._pool)
                        if self._pool is not None
                        else _Followed(path, self.algo)
                    )
                except FileNotFoundError:
                    continue

    def _loop(self) -> None:
        try:
            while not self._done.is_set():
                self._scan()
                moved = sum(f.pump(sync=self.sync, final=False) for f in self._files.values())
                if not moved:
                    time.sleep(0.003)
            # The writer has exited: pick up files created at the very end and the last bytes.
            self._scan()
            for f in self._files.values():
                f.pump(sync=self.sync, final=True)
        except BaseException as exc:  # reported by finish(); a thread must not die silently
            self._error = exc

    def finish(self) -> dict[str, tuple[int, str]]:
        """Stop following (the writer must have exited) and return name -> (size, digest)."""
        self._done.set()
        self._thread.join()
        result: dict[str, tuple[int, str]] = {}
        first_error = self._error
        for name, f in self._files.items():
            try:
                if first_error is None:
                    result[name] = f.result()
            except BaseException as exc:
                first_error = exc
            finally:
                if isinstance(f, _TreeFollowed):
                    wait(f.futures)  # the fd must outlive every read of it
                os.close(f.fd)
        self._files.clear()
        if first_error is not None:
            raise first_error
        return result

    def cancel(self) -> None:
        """Stop following and drop everything (the writer failed)."""
        try:
            self.finish()
        except (OSError, errors.ClawpointError):
            pass
