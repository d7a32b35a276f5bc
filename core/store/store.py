"""The checkpoint store: ``ROOT/LINEAGE/SEQ/{manifest.json, images/}``, atomic and verified.

Writing a checkpoint: ``begin`` allocates the next sequence number under a per-lineage
``flock`` (safe across processes) and creates ``ROOT/LINEAGE/.tmp-SEQ-RANDOM/images``; the
engine writes there; ``publish`` hashes every file (reusing digests the engine computed while
it wrote), fsyncs files and directories, writes ``manifest.json`` last, and renames the
directory to its 8-digit sequence number. A directory named ``SEQ`` holding a manifest is a
complete checkpoint and nothing else is one: a writer SIGKILLed half-way leaves only a
``.tmp-*`` directory that ``list`` never shows and ``cleanup_partial`` removes once no live
writer holds its lock.

Corruption found by ``verify`` is recorded with a ``CORRUPT`` marker file next to the manifest
(the manifest itself is never rewritten); such a checkpoint is never restored.

Retention protects checkpoints by their goodness, not their age: it never deletes the newest
checkpoint that verifies (whatever corrupt ones lie above it), and only checkpoints taken on
the workload's own schedule or when it was stopped (never those asked for on request, which
is what an agent's "safe" ``checkpoint_workload`` is) push older ones out; see
``apply_retention``.

Limits: one filesystem per root (rename is atomic only within one; on a cluster the root must
be a shared filesystem with POSIX rename and flock, such as NFSv4 or Lustre). No compression.
"""

from __future__ import annotations

import builtins
import fcntl
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from pydantic import ValidationError

from core import errors
from core.model import CheckpointFile, CheckpointInfo, CheckpointStatus, utcnow, validate_name
from core.store import digest

log = structlog.get_logger(__name__)

MANIFEST = "manifest.json"
IMAGES = "images"
CORRUPT_MARK = "CORRUPT"
# Manifest ``extra`` key: true for a leave-running checkpoint asked for on request (control
# socket or SIGUSR1), as opposed to the wrapper's schedule or a stop-checkpoint.
ON_REQUEST = "on_request"
FORMAT = 1
_TMP = ".tmp-"
_DEL = ".del-"
_WRITER_LOCK = ".writer.lock"
_SEQ_RE = re.compile(r"^[0-9]{8}$")
_ID_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,62})@([0-9]{1,8})$")
# Files an engine may add to an images dir after publish (CRIU writes stats-restore on each
# restore); verification ignores them, everything else unknown is suspicious.
_RESTORE_BYPRODUCTS = frozenset({"stats-restore"})


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


def _fsync_path(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durable(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CheckpointStore:
    def __init__(self, root: Path, *, keep: int = 3) -> None:
        if keep < 1:
            raise errors.InvalidInput(
                f"keep must be at least 1, got {keep}",
                hint="set store.keep_per_workload to 1 or more",
            )
        self.root = Path(root)
        self.keep = keep

    # -- paths and locks ------------------------------------------------------------------

    def _lineage_dir(self, lineage: str) -> Path:
        return self.root / validate_name(lineage, what="lineage")

    def _dir(self, checkpoint_id: str) -> Path:
        lineage, seq = parse_checkpoint_id(checkpoint_id)
        return self._lineage_dir(lineage) / f"{seq:08d}"

    @contextmanager
    def _lineage_lock(self, lineage: str) -> Iterator[Path]:
        d = self._lineage_dir(lineage)
        try:
            d.mkdir(parents=True, exist_ok=True)
            fd = os.open(d / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise errors.CheckpointError(
                f"cannot use the checkpoint store at {self.root}: {exc}",
                hint="check that the store path exists, is writable and has free space",
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield d
        finally:
            os.close(fd)

    # -- writing ----------------------------------------------------------------------------

    def begin(self, lineage: str, *, engine: str, node: str | None) -> PendingCheckpoint:
        """Allocate ``LINEAGE@SEQ`` and a temporary directory for the engine to write into."""
        with self._lineage_lock(lineage) as d:
            seqs = [int(p.name) for p in d.iterdir() if _SEQ_RE.fullmatch(p.name)]
            seqs += [
                int(p.name[len(_TMP) : len(_TMP) + 8])
                for p in d.iterdir()
                if p.name.startswith(_TMP) and p.name[len(_TMP) : len(_TMP) + 8].isdigit()
            ]
            seq_file = d / ".seq"
            last = int(seq_file.read_text() or 0) if seq_file.exists() else 0
            seq = max([last, *seqs]) + 1
            published = sorted(int(p.name) for p in d.iterdir() if self._is_published(p))
            parent = checkpoint_id(lineage, published[-1]) if published else None
            tmp = d / f"{_TMP}{seq:08d}-{secrets.token_hex(4)}"
            try:
                (tmp / IMAGES).mkdir(parents=True)
                _write_durable(seq_file, str(seq).encode())
                lock_fd = os.open(tmp / _WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(lock_fd, fcntl.LOCK_EX)  # held until publish/abort or our death
            except OSError as exc:
                shutil.rmtree(tmp, ignore_errors=True)
                raise errors.CheckpointError(
                    f"cannot create a checkpoint directory under {d}: {exc}",
                    hint="check free space and permissions of the checkpoint store",
                ) from exc
        return PendingCheckpoint(
            id=checkpoint_id(lineage, seq),
            lineage=lineage,
            seq=seq,
            parent=parent,
            engine=engine,
            node=node,
            tmp_dir=tmp,
            images_dir=tmp / IMAGES,
            lock_fd=lock_fd,
        )

    def publish(
        self,
        pending: PendingCheckpoint,
        *,
        timings: dict[str, float],
        leave_running: bool,
        extra: dict[str, Any] | None = None,
    ) -> CheckpointInfo:
        """Hash, fsync, write the manifest and rename: after this returns the checkpoint exists."""
        t0 = time.perf_counter()
        try:
            files = self._hash_images(pending)
            if not files:
                raise errors.CheckpointError(
                    f"checkpoint {pending.id} has no image files in {pending.images_dir}",
                    hint="the engine wrote nothing; see the wrapper's log for the engine's error",
                )
            self._fsync_tree(pending.images_dir, [f.name for f in files])
            info = CheckpointInfo(
                id=pending.id,
                lineage=pending.lineage,
                seq=pending.seq,
                parent=pending.parent,
                engine=pending.engine,
                node=pending.node,
                created_at=utcnow(),
                size_bytes=sum(f.size for f in files),
                files=files,
                timings={**timings, "publish_s": time.perf_counter() - t0},
                leave_running=leave_running,
                status=CheckpointStatus.GOOD,
                extra={"format": FORMAT, **(extra or {})},
            )
            _write_durable(pending.tmp_dir / MANIFEST, info.model_dump_json(indent=1).encode())
            _fsync_path(pending.tmp_dir, directory=True)
            final = pending.tmp_dir.parent / f"{pending.seq:08d}"
            os.rename(pending.tmp_dir, final)
            _fsync_path(final.parent, directory=True)
        except OSError as exc:
            self.abort(pending)
            raise errors.CheckpointError(
                f"cannot publish checkpoint {pending.id}: {exc}",
                hint="check free space and permissions of the checkpoint store, then retry",
            ) from exc
        except errors.ClawpointError:
            self.abort(pending)
            raise
        self._release(pending)
        log.info("checkpoint.published", id=info.id, size=info.size_bytes, engine=info.engine)
        return info

    def _hash_images(self, pending: PendingCheckpoint) -> list[CheckpointFile]:
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
        algo = next(
            (digest.algo_of(d) for _, d in pending.precomputed.values()), digest.default_algo()
        )
        with ThreadPoolExecutor(max_workers=2) as pool:
            for name, (size, dig) in zip(
                todo,
                pool.map(lambda n: digest.file_digest(pending.images_dir / n, algo), todo),
                strict=True,
            ):
                out[name] = CheckpointFile(name=name, size=size, digest=dig)
        return [out[n] for n in names]

    @staticmethod
    def _fsync_tree(images: Path, names: builtins.list[str]) -> None:
        # fsync releases the GIL: flush files concurrently so one slow file does not serialise all.
        with ThreadPoolExecutor(max_workers=4) as pool:
            builtins.list(pool.map(lambda n: _fsync_path(images / n), names))
        _fsync_path(images, directory=True)

    def abort(self, pending: PendingCheckpoint) -> None:
        """Throw away a pending checkpoint (idempotent)."""
        shutil.rmtree(pending.tmp_dir, ignore_errors=True)
        self._release(pending)
        log.info("checkpoint.aborted", id=pending.id)

    @staticmethod
    def _release(pending: PendingCheckpoint) -> None:
        if pending.lock_fd >= 0:
            os.close(pending.lock_fd)
            pending.lock_fd = -1

    # -- reading ----------------------------------------------------------------------------

    @staticmethod
    def _is_published(path: Path) -> bool:
        return bool(_SEQ_RE.fullmatch(path.name)) and (path / MANIFEST).is_file()

    def _load(self, path: Path) -> CheckpointInfo:
        try:
            info = CheckpointInfo.model_validate_json((path / MANIFEST).read_bytes())
        except FileNotFoundError as exc:
            raise errors.NotFound(
                f"no checkpoint at {path}", hint="list the checkpoints to see which exist"
            ) from exc
        except (OSError, ValidationError, ValueError) as exc:
            raise errors.CorruptCheckpoint(
                f"the manifest of {path} is unreadable: {exc}",
                hint="this checkpoint cannot be restored; delete it and use an older one",
            ) from exc
        if (path / CORRUPT_MARK).exists():
            info.status = CheckpointStatus.CORRUPT
            info.extra["corrupt_reason"] = (path / CORRUPT_MARK).read_text(errors="replace")
        return info

    def list(self, lineage: str | None = None) -> builtins.list[CheckpointInfo]:
        """Published checkpoints, newest first (by creation time, then sequence)."""
        if lineage is not None:
            dirs = [self._lineage_dir(lineage)]
        elif self.root.is_dir():
            dirs = sorted(
                p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
            )
        else:
            dirs = []
        out: builtins.list[CheckpointInfo] = []
        for d in dirs:
            if not d.is_dir():
                continue
            for p in d.iterdir():
                if self._is_published(p):
                    try:
                        out.append(self._load(p))
                    except errors.CorruptCheckpoint as exc:
                        log.warning("checkpoint.unreadable_manifest", path=str(p), error=str(exc))
        out.sort(key=lambda i: (i.created_at, i.seq), reverse=True)
        return out

    def get(self, checkpoint_id: str) -> CheckpointInfo:
        path = self._dir(checkpoint_id)
        if not self._is_published(path):
            raise errors.NotFound(
                f"no checkpoint {checkpoint_id}",
                hint="list the checkpoints (of this workload) to see the ids that exist",
            )
        return self._load(path)

    def images_dir(self, checkpoint_id: str) -> Path:
        self.get(checkpoint_id)
        return self._dir(checkpoint_id) / IMAGES

    def published_ids(self, lineage: str) -> builtins.list[str]:
        """Ids of every published checkpoint of a lineage, readable manifest or not: whether
        the lineage has any history at all (a fresh start would throw it away)."""
        d = self._lineage_dir(lineage)
        if not d.is_dir():
            return []
        seqs = sorted((int(p.name) for p in d.iterdir() if self._is_published(p)), reverse=True)
        return [checkpoint_id(lineage, seq) for seq in seqs]

    def candidates(self, lineage: str) -> builtins.list[CheckpointInfo]:
        """Published checkpoints of a lineage not known to be corrupt, newest first."""
        return [i for i in self.list(lineage) if i.status is not CheckpointStatus.CORRUPT]

    # -- verification -----------------------------------------------------------------------

    def mark_corrupt(self, checkpoint_id: str, reason: str) -> None:
        path = self._dir(checkpoint_id)
        try:
            _write_durable(path / CORRUPT_MARK, reason.encode())
        except OSError as exc:
            log.warning("checkpoint.cannot_mark_corrupt", id=checkpoint_id, error=str(exc))
        log.warning("checkpoint.corrupt", id=checkpoint_id, reason=reason)

    def verify(self, checkpoint_id: str, *, digests: bool = True) -> CheckpointInfo:
        """Re-hash every file against the manifest; raise CorruptCheckpoint (and mark it).

        ``digests=False`` checks only the file set and sizes (no reads: instant), which
        catches truncation before an engine is even started.
        """
        info = self.get(checkpoint_id)
        if info.status is CheckpointStatus.CORRUPT:
            raise self._corrupt(info, info.extra.get("corrupt_reason", "marked corrupt"))
        images = self._dir(checkpoint_id) / IMAGES
        problem = self._check_files(info, images, digests=digests)
        if problem:
            self.mark_corrupt(checkpoint_id, problem)
            raise self._corrupt(info, problem)
        info.status = CheckpointStatus.GOOD
        return info

    def _check_files(self, info: CheckpointInfo, images: Path, *, digests: bool) -> str | None:
        expected = {f.name: f for f in info.files}
        try:
            present = {p.name for p in images.iterdir()} - _RESTORE_BYPRODUCTS
        except OSError as exc:
            return f"images directory unreadable: {exc}"
        if missing := sorted(set(expected) - present):
            return f"missing files: {', '.join(missing)}"
        if unknown := sorted(present - set(expected)):
            return f"unexpected files: {', '.join(unknown)}"
        for f in info.files:
            size = (images / f.name).stat().st_size
            if size != f.size:
                return f"{f.name} has {size} bytes, the manifest says {f.size} (truncated?)"
        if not digests:
            return None
        big_first = sorted(info.files, key=lambda f: -f.size)
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = pool.map(
                lambda f: digest.file_digest(images / f.name, digest.algo_of(f.digest)), big_first
            )
            for f, (_, got) in zip(big_first, results, strict=True):
                if got != f.digest:
                    return f"{f.name} digest {got} does not match the manifest's {f.digest}"
        return None

    @staticmethod
    def _corrupt(info: CheckpointInfo, problem: str) -> errors.CorruptCheckpoint:
        return errors.CorruptCheckpoint(
            f"checkpoint {info.id} is corrupt and will not be restored: {problem}",
            hint=f"restore an older checkpoint of {info.lineage} (the newest good one is used "
            "automatically) and delete this one",
            details={"checkpoint": info.id, "problem": problem},
        )

    def newest_good(self, lineage: str) -> CheckpointInfo | None:
        """The newest checkpoint that verifies; corrupt ones are logged, marked and skipped."""
        for info in self.candidates(lineage):
            try:
                return self.verify(info.id)
            except errors.CorruptCheckpoint as exc:
                log.warning("checkpoint.skipping_corrupt", id=info.id, error=exc.message)
        return None

    # -- deletion ---------------------------------------------------------------------------

    def delete(self, checkpoint_id: str) -> None:
        path = self._dir(checkpoint_id)
        if not self._is_published(path):
            raise errors.NotFound(
                f"no checkpoint {checkpoint_id}", hint="list the checkpoints to see which exist"
            )
        # Rename first: the checkpoint disappears from the catalog atomically, then the bytes go.
        gone = path.with_name(f"{_DEL}{path.name}-{secrets.token_hex(4)}")
        try:
            os.rename(path, gone)
        except OSError as exc:
            raise errors.CheckpointError(
                f"cannot delete checkpoint {checkpoint_id}: {exc}",
                hint="check the permissions of the checkpoint store",
            ) from exc
        shutil.rmtree(gone, ignore_errors=True)
        log.info("checkpoint.deleted", id=checkpoint_id)

    def apply_retention(self, lineage: str, *, fresh: str | None = None) -> builtins.list[str]:
        """Delete what ``keep`` rotates out; never the newest good checkpoint. Returns the ids.

        A checkpoint goes once ``keep`` *rotating* checkpoints are newer than it: known-good
        ones (not marked corrupt) that were taken on schedule or when the workload stopped.
        Checkpoints taken on request (``ON_REQUEST``) do not rotate, so any number of them,
        an agent's included, deletes nothing; they are themselves rotated out by later
        scheduled ones. The newest checkpoint that verifies is kept whatever its age: walking
        from the newest, each is verified (``fresh``, the one just published and hashed, is
        trusted) until one does; the ones that fail are marked corrupt on the way.
        """
        infos = self.list(lineage)
        protected: str | None = None
        for info in infos:
            if info.status is CheckpointStatus.CORRUPT:
                continue
            if info.id == fresh:
                protected = info.id
                break
            try:
                self.verify(info.id)
            except errors.CorruptCheckpoint:
                info.status = CheckpointStatus.CORRUPT  # verify marked it
                continue
            protected = info.id
            break
        doomed: builtins.list[str] = []
        newer_rotating = 0
        for info in infos:  # newest first
            if newer_rotating >= self.keep and info.id != protected:
                doomed.append(info.id)
            if info.status is not CheckpointStatus.CORRUPT and not info.extra.get(ON_REQUEST):
                newer_rotating += 1
        for cid in doomed:
            self.delete(cid)
        return doomed

    def cleanup_partial(self) -> builtins.list[str]:
        """Remove temporary directories whose writer is gone (its flock is free)."""
        removed: builtins.list[str] = []
        if not self.root.is_dir():
            return removed
        for d in self.root.iterdir():
            if not d.is_dir() or d.name.startswith("."):
                continue
            # Under the lineage lock: ``begin`` creates a directory and takes its writer lock
            # while holding it, so a directory without a lock file here really is orphaned.
            with self._lineage_lock(d.name):
                for p in d.iterdir():
                    if p.name.startswith(_DEL) or (
                        p.name.startswith(_TMP) and self._writer_gone(p)
                    ):
                        shutil.rmtree(p, ignore_errors=True)
                        removed.append(str(p))
                        log.info("checkpoint.partial_removed", path=str(p))
        return removed

    @staticmethod
    def _writer_gone(tmp: Path) -> bool:
        try:
            fd = os.open(tmp / _WRITER_LOCK, os.O_RDWR)
        except FileNotFoundError:
            return True  # killed between mkdir and taking the lock
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        return True
