"""File digests for checkpoint images: whole-file hashing, and a follower that hashes as files grow.

Why a follower: hashing 1 GiB costs one to several seconds here, so hashing after CRIU has
finished would add that to every checkpoint. The follower thread reads each large image file
while CRIU is still appending to it (the bytes come from the page cache, so it costs no disk
reads), hashes them, and asks the kernel to start writing them back as they arrive
(``sync_file_range(SYNC_FILE_RANGE_WRITE)``, which does not wait; ``fdatasync`` where that
call is missing) so the final fsync at publish has little left to do.

Algorithms: digests are written ``ALGO:HEX``. ``sha256`` is the default; ``blake2b`` and
``blake3`` (the optional ``blake3`` package: several times faster than sha256 on one core,
which matters when hashing must keep up with CRIU) are selected with the environment
variable ``CLAWPOINT_DIGEST``. Verification always uses the algorithm named in the manifest,
so checkpoints written with different settings stay verifiable; a checkpoint whose
algorithm is not available here raises CheckpointError (it is not marked corrupt).

Limits: the follower assumes the writer only appends to the files it follows (CRIU writes its
``pages-*.img`` sequentially). Small files are never followed: the store hashes them after the
writer is done, so a small file rewritten in place is still hashed correctly. If a followed
file were ever rewritten in place its digest would not match the bytes, and verification on
restore would refuse it as corrupt: safe, never silent.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from core import errors

ENV_DIGEST = "CLAWPOINT_DIGEST"
ALGOS = ("sha256", "blake2b", "blake3")
ALGO = "sha256"  # the default
CHUNK = 8 << 20
_SYNC_EVERY = 16 << 20  # start write-back every 16 MiB so publish's fsync finds little to do
_SYNC_FILE_RANGE_WRITE = 2

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
    """The algorithm for new checkpoints: ``$CLAWPOINT_DIGEST`` or sha256."""
    algo = os.environ.get(ENV_DIGEST, "").strip().lower() or ALGO
    if algo not in ALGOS:
        raise errors.InvalidInput(
            f"{ENV_DIGEST}={algo!r} is not a supported digest",
            hint=f"use one of {', '.join(ALGOS)} (or unset it for sha256)",
        )
    return algo


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


def file_digest(path: Path, algo: str | None = None) -> tuple[int, str]:
    """(size, "ALGO:<hex>") of a whole file, read in large chunks without Python buffering.

    ``algo`` defaults to ``default_algo()``.
    """
    algo = algo or default_algo()
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


class _Followed:
    def __init__(self, path: Path, algo: str) -> None:
        self.path = path
        self.hash = new_hasher(algo)
        self.fd = os.open(path, os.O_RDONLY)
        self.offset = 0
        self.synced = 0
        self.buf = bytearray(CHUNK)
        self.view = memoryview(self.buf)

    def pump(self, *, sync: bool) -> int:
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
        self._files: dict[str, _Followed] = {}
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
                    self._files[name] = _Followed(self.directory / name, self.algo)
                except FileNotFoundError:
                    continue

    def _loop(self) -> None:
        try:
            while not self._done.is_set():
                self._scan()
                moved = sum(f.pump(sync=self.sync) for f in self._files.values())
                if not moved:
                    time.sleep(0.003)
            # The writer has exited: pick up files created at the very end and the last bytes.
            self._scan()
            for f in self._files.values():
                f.pump(sync=self.sync)
        except BaseException as exc:  # reported by finish(); a thread must not die silently
            self._error = exc

    def finish(self) -> dict[str, tuple[int, str]]:
        """Stop following (the writer must have exited) and return name -> (size, digest)."""
        self._done.set()
        self._thread.join()
        result: dict[str, tuple[int, str]] = {}
        for name, f in self._files.items():
            os.close(f.fd)
            result[name] = (f.offset, f"{self.algo}:{f.hash.hexdigest()}")
        self._files.clear()
        if self._error is not None:
            raise self._error
        return result

    def cancel(self) -> None:
        """Stop following and drop everything (the writer failed)."""
        try:
            self.finish()
        except OSError:
            pass
