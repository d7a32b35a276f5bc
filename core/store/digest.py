"""File digests for checkpoint images: whole-file hashing, and a follower that hashes as files grow.

Why a follower: hashing 1 GiB costs about a second here, so hashing after CRIU has finished
would add that second to every checkpoint. The follower thread reads each large image file
while CRIU is still appending to it (the bytes come from the page cache, so it costs no disk
reads), hashes them, and asks the kernel to start writing them back (``fdatasync`` per few
chunks) so the final fsync at publish has little left to do.

Limits: the follower assumes the writer only appends to the files it follows (CRIU writes its
``pages-*.img`` sequentially). Small files are never followed: the store hashes them after the
writer is done, so a small file rewritten in place is still hashed correctly. If a followed
file were ever rewritten in place its digest would not match the bytes, and verification on
restore would refuse it as corrupt: safe, never silent.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

ALGO = "sha256"
CHUNK = 8 << 20
_SYNC_EVERY = 64 << 20  # start write-back every 64 MiB so publish's fsync finds little to do


def file_digest(path: Path) -> tuple[int, str]:
    """(size, "sha256:<hex>") of a whole file, read in large chunks without Python buffering."""
    h = hashlib.new(ALGO)
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
    return size, f"{ALGO}:{h.hexdigest()}"


class _Followed:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY)
        self.hash = hashlib.new(ALGO)
        self.offset = 0
        self.unsynced = 0

    def pump(self, *, sync: bool) -> int:
        """Hash whatever was appended since the last call; returns the bytes read."""
        total = 0
        while True:
            data = os.pread(self.fd, CHUNK, self.offset)
            if not data:
                break
            self.hash.update(data)
            self.offset += len(data)
            self.unsynced += len(data)
            total += len(data)
            if sync and self.unsynced >= _SYNC_EVERY:
                os.fdatasync(self.fd)
                self.unsynced = 0
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
    ) -> None:
        self.directory = directory
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
                    self._files[name] = _Followed(self.directory / name)
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
            result[name] = (f.offset, f"{ALGO}:{f.hash.hexdigest()}")
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
