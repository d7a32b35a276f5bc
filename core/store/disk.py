"""The checkpoint store's form on disk: names, checkpoint ids, the pending checkpoint, and
the primitives that make images durable (hashing, fsync) or tell what lies in a lineage
directory (a published checkpoint, a writer that is gone).

``ROOT/LINEAGE/SEQ/{manifest.json, manifest.mac, images/}`` is a published checkpoint;
``.tmp-SEQ-RANDOM`` a pending one (its writer holds ``.writer.lock``), ``.del-*`` one being
deleted. ``core.store.store`` decides what to do with them; this module names them, reads
them and makes a pending one's images durable.

Limits: no locking here (the store's lineage lock orders writers); images are hashed with two
threads and flushed with four.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from core import errors
from core.model import CheckpointFile, CheckpointStatus
from core.store import digest, seal

MANIFEST = "manifest.json"
IMAGES = "images"
CORRUPT_MARK = "CORRUPT"
SEAL = seal.SEAL_FILE
# Manifest ``extra`` keys: the uid that wrote it (sealed with it), and why a checkpoint is
# untrusted or unverified (set when it is read, never written).
OWNER_UID = "owner_uid"
UNTRUSTED_REASON = "untrusted_reason"
UNVERIFIED_REASON = "unverified_reason"
# Manifest ``extra`` key: true for a leave-running checkpoint asked for on request (control
# socket or SIGUSR1), as opposed to the wrapper's schedule or a stop-checkpoint.
ON_REQUEST = "on_request"
# With ON_REQUEST: "agent" when an agent asked for it (such ones rotate among themselves).
REQUESTED_BY = "requested_by"
FORMAT = 1
TMP = ".tmp-"
FAILED_LOGS = ".last-failed"  # per lineage: the engine logs of the last aborted checkpoint
DEL = ".del-"
WRITER_LOCK = ".writer.lock"
SEQ_RE = re.compile(r"^[0-9]{8}$")
_ID_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,62})@([0-9]{1,8})$")
# Statuses never restored (nor counted as the last good checkpoint by retention).
NEVER_RESTORED = frozenset({CheckpointStatus.CORRUPT, CheckpointStatus.UNTRUSTED})


def parse_checkpoint_id(checkpoint_id: str) -> tuple[str, int]:
    """Split ``LINEAGE@SEQ`` strictly; anything else (paths, spaces, signs) is InvalidInput."""
    m = _ID_RE.fullmatch(checkpoint_id) if isinstance(checkpoint_id, str) else None
    if m is None or ".." in m.group(1) or int(m.group(2)) < 1:
        raise errors.InvalidInput(
            f"invalid checkpoint id {checkpoint_id!r}: expected LINEAGE@SEQ such as train-1@3",
            hint="list the checkpoints and pass one of the ids shown",
        )
    return m.group(1), int(m.group(2))


def checkpoint_id(lineage: str, seq: int) -> str:
    """``LINEAGE@SEQ``: the id ``parse_checkpoint_id`` splits."""
    return f"{lineage}@{seq}"


@dataclass
class PendingCheckpoint:
    """A checkpoint being written. The engine writes into ``images_dir`` and may add
    ``precomputed`` digests (name -> (size, digest)) of files it hashed while writing."""

    id: str
    lineage: str
    seq: int
    parent: str | None
    engine: str
    node: str | None
    tmp_dir: Path
    images_dir: Path
    precomputed: dict[str, tuple[int, str]] = field(default_factory=dict)
    lock_fd: int = -1

    @property
    def work_dir(self) -> Path:
        """Scratch space outside the images (engine logs); published along, not hashed."""
        return self.tmp_dir

    @property
    def kept_logs_dir(self) -> Path:
        """Where ``abort`` keeps the engine's logs of the lineage's last failed checkpoint (the
        pending directory itself is removed, and an error's hint must name a file that
        exists)."""
        return self.tmp_dir.parent / FAILED_LOGS


def fsync_path(path: Path, *, directory: bool = False) -> None:
    """fsync a file, or a directory (its entries)."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(images: Path, names: list[str]) -> None:
    """fsync ``names`` in ``images``, then the directory itself."""
    # fsync releases the GIL: flush files concurrently so one slow file does not serialise all.
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda n: fsync_path(images / n), names))
    fsync_path(images, directory=True)


def hash_images(pending: PendingCheckpoint) -> list[CheckpointFile]:
    """Every image file with its size and digest, reusing those the engine computed while
    it wrote (``precomputed``); one algorithm per checkpoint."""
    names = sorted(p.name for p in pending.images_dir.iterdir() if p.is_file())
    todo: list[str] = []
    out: dict[str, CheckpointFile] = {}
    for name in names:
        size = (pending.images_dir / name).stat().st_size
        pre = pending.precomputed.get(name)
        if pre is not None and pre[0] == size:
            out[name] = CheckpointFile(name=name, size=size, digest=pre[1])
        else:
            todo.append(name)
    # One algorithm per checkpoint: the one the engine used while writing, if it hashed.
    algo = next((digest.algo_of(d) for _, d in pending.precomputed.values()), digest.default_algo())
    with ThreadPoolExecutor(max_workers=2) as pool:
        for name, (size, dig) in zip(
            todo,
            pool.map(lambda n: digest.file_digest(pending.images_dir / n, algo), todo),
            strict=True,
        ):
            out[name] = CheckpointFile(name=name, size=size, digest=dig)
    return [out[n] for n in names]


def is_published(path: Path) -> bool:
    """A directory (not a link) named SEQ holding a manifest (not a link) is a checkpoint."""
    if not SEQ_RE.fullmatch(path.name):
        return False
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode) and stat.S_ISREG(
            os.lstat(path / MANIFEST).st_mode
        )
    except OSError:
        return False


def writer_gone(tmp: Path) -> bool:
    """Whether the writer of pending directory ``tmp`` is gone (its flock is free)."""
    try:
        fd = os.open(tmp / WRITER_LOCK, os.O_RDWR)
    except FileNotFoundError:
        return True  # killed between mkdir and taking the lock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True
