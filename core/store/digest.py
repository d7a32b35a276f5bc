"""Digests of checkpoint files: whole-file hashing and a follower that hashes while a writer writes.

The follower exists for speed: hashing 1 GiB costs about a second, so instead of hashing after
CRIU has finished (serially), a thread reads each image file as it grows (from the page cache,
so it costs no disk I/O) and flushes it to disk as it goes, so the final ``fsync`` of publish
finds little left to write. Limits: it assumes the writer appends (CRIU writes its image files
sequentially); a file rewritten in place would get a wrong digest, which verification on
restore would then report as corruption (safe, never silent).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

ALGO = "sha256"
_CHUNK = 4 << 20


def new_hash() -> hashlib._Hash:
    return hashlib.new(ALGO)


def file_digest(path: Path) -> tuple[int, str]:
    """(size, "sha256:<hex>") of a file, read in large chunks."""
    h = new_hash()
    size = 0
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
            size += n
    return size, f"{ALGO}:{h.hexdigest()}"


class _Tracked:
    __slots__ = ("fd", "hash", "offset", "synced")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.hash = new_hash()
        self.offset = 0
        self.synced = 0


class DirectoryFollower:
    """Hash (and flush to disk) every regular file of a directory while another process writes it.

    ``start()`` launches the thread; ``finish()`` is called once the writer has exited: it
    reads what is left and returns ``{relative name: (size, digest)}``.
    """

    def __init__(self, root: Path, *, poll_s: float = 0.005, sync_every: int = 64 << 20) -> None:
        self.root = root
        self.poll_s = poll_s
        self.sync_every = sync_every
        self._files: dict[str, _Tracked] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="digest-follower", daemon=True)
        self._error: BaseException | None = None
        self._buf = bytearray(_CHUNK)

    def start(self) -> DirectoryFollower:
        self._thread.start()
        return self

    def _scan(self, *, final: bool) -> bool:
        progressed = False
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return False
        for entry in entries:
            if not entry.is_file(follow_symlinks=False):
                continue
            tracked = self._files.get(entry.name)
            if tracked is None:
                try:
                    fd = os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                tracked = self._files[entry.name] = _Tracked(fd)
            progressed |= self._drain(tracked, final=final)
        return progressed

    def _drain(self, tracked: _Tracked, *, final: bool) -> bool:
        view = memoryview(self._buf)
        progressed = False
        while True:
            n = os.preadv(tracked.fd, [self._buf], tracked.offset)
            if n <= 0:
                break
            tracked.hash.update(view[:n])
            tracked.offset += n
            progressed = True
            if not final and tracked.offset - tracked.synced >= self.sync_every:
                # Start write-back early so publish's fsync has little left to do.
                os.fdatasync(tracked.fd)
                tracked.synced = tracked.offset
            if self._stop.is_set() and not final:
                break
        return progressed

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._scan(final=False):
                    self._stop.wait(self.poll_s)
        except BaseException as exc:  # reported by finish(); the thread must not die silently
            self._error = exc

    def finish(self) -> dict[str, tuple[int, str]]:
        self._stop.set()
        self._thread.join()
        try:
            if self._error is not None:
                raise self._error
            self._scan(final=True)
            return {
                name: (t.offset, f"{ALGO}:{t.hash.hexdigest()}") for name, t in self._files.items()
            }
        finally:
            self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()
        for tracked in self._files.values():
            os.close(tracked.fd)
        self._files.clear()
