"""The checkpoint store: ``ROOT/LINEAGE/SEQ/{manifest.json, images/}``, atomic and verified.

A checkpoint is written under a temporary directory (``.tmp-SEQ-RANDOM``) in its lineage's
directory, every file and directory is fsynced, then the directory is renamed to its 8-digit
sequence number. The manifest is written last, inside the temporary directory, so a directory
named ``SEQ`` with a manifest is a complete checkpoint and nothing else is: a writer killed
half-way leaves only a ``.tmp-*`` directory, which ``list`` never shows and ``cleanup_partial``
removes (once no live writer holds its lock).

Limits: one filesystem (rename is atomic only within it; on a cluster this must be a shared
filesystem with POSIX rename and flock, e.g. NFSv4 or Lustre). No compression yet.
"""

from __future__ import annotations

import builtins
import fcntl
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog

from core import errors
from core.model import (
    NAME_RE,
    CheckpointFile,
    CheckpointInfo,
    CheckpointStatus,
    utcnow,
    validate_name,
)
from core.store import digest

log = structlog.get_logger(__name__)

MANIFEST = "manifest.json"
IMAGES = "images"
CORRUPT_MARK = "CORRUPT"
_WRITER_LOCK = ".writer.lock"
_TMP_PREFIX = ".tmp-"


def format_id(lineage: str, seq: int) -> str:
    return f"{lineage}@{seq}"


def parse_id(checkpoint_id: str) -> tuple[str, int]:
    """Split ``LINEAGE@SEQ``; raise InvalidInput naming the expected form."""
    lineage, sep, seq = str(checkpoint_id).rpartition("@")
    if not sep or not seq.isdigit() or int(seq) < 1:
        raise errors.InvalidInput(
            f"malformed checkpoint id {checkpoint_id!r}: expected LINEAGE@SEQ, e.g. train-1@3",
            hint="list checkpoints ('clawpoint checkpoints') and pass one of their ids",
        )
    validate_name(lineage, what="checkpoint lineage")
    return lineage, int(seq)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PendingCheckpoint:
    """A checkpoint being written. The engine writes into ``images_dir``.

    ``digests`` may be filled by the engine (name -> (size, digest)) when it hashed the files
    while writing them; publish hashes whatever is missing or has a different size.
    """

    def __init__(
        self, *, lineage: str, seq: int, engine: str, node: str | None, tmp_dir: Path, lock_fd: int
    ) -> None:
        self.lineage = lineage
        self.seq = seq
        self.id = format_id(lineage, seq)
        self.engine = engine
        self.node = node
        self.tmp_dir = tmp_dir
        self.images_dir = tmp_dir / IMAGES
        self.digests: dict[str, tuple[int, str]] = {}
        self._lock_fd: int | None = lock_fd

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


class CheckpointStore:
    """Catalog and images of checkpoints under ``root``; safe across processes."""

    def __init__(self, root: Path, *, keep: int = 3) -> None:
        if keep < 1:
            raise errors.InvalidInput(
                f"keep must be >= 1, got {keep}", hint="set store.keep_per_workload to 1 or more"
            )
        self.root = Path(root)
        self.keep = keep

    # -- paths and locks -------------------------------------------------------------------

    def _lineage_dir(self, lineage: str) -> Path:
        return self.root / validate_name(lineage, what="checkpoint lineage")

    def _dir(self, lineage: str, seq: int) -> Path:
        return self._lineage_dir(lineage) / f"{seq:08d}"

    @contextmanager
    def _locked(self, lineage: str) -> Iterator[Path]:
        ldir = self._lineage_dir(lineage)
        try:
            ldir.mkdir(parents=True, exist_ok=True)
            fd = os.open(ldir / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise errors.CheckpointError(
                f"cannot open the checkpoint store at {ldir}: {exc}",
                hint="check that the store path exists, is writable and has free space",
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield ldir
        finally:
            os.close(fd)

    def _seqs(self, ldir: Path) -> list[int]:
        """Published sequence numbers of a lineage, newest first."""
        if not ldir.is_dir():
            return []
        seqs = [
            int(p.name) for p in ldir.iterdir() if p.name.isdigit() and (p / MANIFEST).is_file()
        ]
        return sorted(seqs, reverse=True)

    # -- writing ----------------------------------------------------------------------------

    def begin(self, lineage: str, *, engine: str, node: str | None) -> PendingCheckpoint:
        """Allocate the next sequence number and a temporary directory to write into."""
        with self._locked(lineage) as ldir:
            used = [int(p.name) for p in ldir.iterdir() if p.name.isdigit()]
            used += [
                int(p.name[len(_TMP_PREFIX) :].split("-")[0])
                for p in ldir.iterdir()
                if p.name.startswith(_TMP_PREFIX)
            ]
            seq = max(used, default=0) + 1
            tmp = ldir / f"{_TMP_PREFIX}{seq:08d}-{secrets.token_hex(4)}"
            try:
                (tmp / IMAGES).mkdir(parents=True)
                lock_fd = os.open(tmp / _WRITER_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                fcntl.flock(lock_fd, fcntl.LOCK_EX)
            except OSError as exc:
                raise errors.CheckpointError(
                    f"cannot create a checkpoint directory in {ldir}: {exc}",
                    hint="check free space and permissions of the checkpoint store",
                ) from exc
        log.debug("checkpoint.begin", id=format_id(lineage, seq), dir=str(tmp))
        return PendingCheckpoint(
            lineage=lineage, seq=seq, engine=engine, node=node, tmp_dir=tmp, lock_fd=lock_fd
        )

    def publish(
        self,
        pending: PendingCheckpoint,
        *,
        timings: dict[str, float],
        leave_running: bool,
        extra: dict[str, Any] | None = None,
    ) -> CheckpointInfo:
        """Digest and fsync every file, write the manifest, then rename into place atomically."""
        try:
            files = self._seal_files(pending)
            parent = self._seqs(self._lineage_dir(pending.lineage))
            info = CheckpointInfo(
                id=pending.id,
                lineage=pending.lineage,
                seq=pending.seq,
                parent=format_id(pending.lineage, parent[0]) if parent else None,
                engine=pending.engine,
                node=pending.node,
                created_at=utcnow(),
                size_bytes=sum(f.size for f in files),
                files=files,
                timings=dict(timings),
                leave_running=leave_running,
                status=CheckpointStatus.GOOD,
                extra=dict(extra or {}),
            )
            manifest = pending.tmp_dir / MANIFEST
            with open(manifest, "w", encoding="utf-8") as f:
                f.write(info.model_dump_json(indent=2, exclude={"status"}))
                f.flush()
                os.fsync(f.fileno())
            (pending.tmp_dir / _WRITER_LOCK).unlink()
            _fsync_dir(pending.tmp_dir)
            final = self._dir(pending.lineage, pending.seq)
            os.rename(pending.tmp_dir, final)
            _fsync_dir(final.parent)
        except OSError as exc:
            raise errors.CheckpointError(
                f"cannot publish checkpoint {pending.id}: {exc}",
                hint="check free space in the checkpoint store; the partial copy is not listed",
            ) from exc
        finally:
            pending._release()
        log.info("checkpoint.published", id=info.id, size=info.size_bytes)
        return info

    def _seal_files(self, pending: PendingCheckpoint) -> list[CheckpointFile]:
        files: list[CheckpointFile] = []
        images = pending.images_dir
        for path in sorted(images.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            name = path.relative_to(images).as_posix()
            size = path.stat().st_size
            known = pending.digests.get(name)
            if known is None or known[0] != size:
                size, dig = digest.file_digest(path)
            else:
                dig = known[1]
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            files.append(CheckpointFile(name=name, size=size, digest=dig))
        for sub in sorted({p.parent for p in images.rglob("*")} | {images}):
            _fsync_dir(sub)
        return files

    def abort(self, pending: PendingCheckpoint) -> None:
        """Throw away a pending checkpoint (the engine failed)."""
        pending._release()
        shutil.rmtree(pending.tmp_dir, ignore_errors=True)
        log.info("checkpoint.aborted", id=pending.id)

    # -- reading ----------------------------------------------------------------------------

    def _load(self, lineage: str, seq: int) -> CheckpointInfo:
        cdir = self._dir(lineage, seq)
        try:
            raw = (cdir / MANIFEST).read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise errors.NotFound(
                f"no checkpoint {format_id(lineage, seq)}",
                hint="list checkpoints ('clawpoint checkpoints') to see the existing ids",
            ) from exc
        try:
            info = CheckpointInfo.model_validate(json.loads(raw))
        except ValueError as exc:
            raise errors.CorruptCheckpoint(
                f"the manifest of checkpoint {format_id(lineage, seq)} is unreadable: {exc}",
                hint="delete this checkpoint; restore uses the previous good one",
            ) from exc
        status = (
            CheckpointStatus.CORRUPT
            if (cdir / CORRUPT_MARK).exists()
            else CheckpointStatus.UNVERIFIED
        )
        return info.model_copy(update={"status": status})

    def list(self, lineage: str | None = None) -> list[CheckpointInfo]:
        """Published checkpoints, newest first (of one lineage, or of all)."""
        if lineage is not None:
            lineages = [lineage]
        elif self.root.is_dir():
            lineages = sorted(p.name for p in self.root.iterdir() if p.is_dir())
        else:
            lineages = []
        out: list[CheckpointInfo] = []
        for name in lineages:
            for seq in self._seqs(self._lineage_dir(name)):
                try:
                    out.append(self._load(name, seq))
                except (errors.NotFound, errors.CorruptCheckpoint):
                    continue  # deleted meanwhile, or a broken manifest: not a usable checkpoint
        out.sort(key=lambda c: (c.created_at, c.seq), reverse=True)
        return out

    def get(self, checkpoint_id: str) -> CheckpointInfo:
        return self._load(*parse_id(checkpoint_id))

    def images_dir(self, checkpoint_id: str) -> Path:
        info = self.get(checkpoint_id)
        return self._dir(info.lineage, info.seq) / IMAGES

    def verify(self, checkpoint_id: str) -> CheckpointInfo:
        """Check sizes, then digests; raise CorruptCheckpoint naming the first bad file."""
        info = self.get(checkpoint_id)
        images = self._dir(info.lineage, info.seq) / IMAGES
        for f in info.files:  # sizes first: a truncated file is found without reading anything
            path = images / f.name
            size = path.stat().st_size if path.is_file() else -1
            if size != f.size:
                raise self._corrupt(info, f"{f.name} has {size} bytes, manifest says {f.size}")
        for f in info.files:
            _, dig = digest.file_digest(images / f.name)
            if dig != f.digest:
                raise self._corrupt(info, f"{f.name} digest {dig} != manifest {f.digest}")
        return info.model_copy(update={"status": CheckpointStatus.GOOD})

    def _corrupt(self, info: CheckpointInfo, why: str) -> errors.CorruptCheckpoint:
        return errors.CorruptCheckpoint(
            f"checkpoint {info.id} is corrupt: {why}",
            hint="it will not be restored; use an older checkpoint of the same workload",
            details={"checkpoint": info.id},
        )

    def mark_corrupt(self, checkpoint_id: str, reason: str) -> None:
        """Remember that a checkpoint failed verification, so it is skipped from now on."""
        lineage, seq = parse_id(checkpoint_id)
        try:
            (self._dir(lineage, seq) / CORRUPT_MARK).write_text(reason + "\n")
        except OSError as exc:
            log.warning("checkpoint.mark_corrupt_failed", id=checkpoint_id, error=str(exc))
        log.warning("checkpoint.corrupt", id=checkpoint_id, reason=reason)

    def candidates(self, lineage: str) -> builtins.list[CheckpointInfo]:
        """Checkpoints of a lineage not known to be corrupt, newest first (unverified)."""
        return [c for c in self.list(lineage) if c.status is not CheckpointStatus.CORRUPT]

    def newest_good(self, lineage: str) -> CheckpointInfo | None:
        """Verify the newest checkpoint; on corruption mark it, log it and try the older ones."""
        for cand in self.candidates(lineage):
            try:
                return self.verify(cand.id)
            except errors.CorruptCheckpoint as exc:
                self.mark_corrupt(cand.id, exc.message)
            except errors.NotFound:
                continue
        return None

    # -- deleting ---------------------------------------------------------------------------

    def delete(self, checkpoint_id: str) -> None:
        lineage, seq = parse_id(checkpoint_id)
        with self._locked(lineage):
            cdir = self._dir(lineage, seq)
            if not (cdir / MANIFEST).is_file():
                raise errors.NotFound(
                    f"no checkpoint {checkpoint_id}",
                    hint="list checkpoints ('clawpoint checkpoints') to see the existing ids",
                )
            # Rename first so the catalog stops listing it at once, then remove at leisure.
            doomed = cdir.with_name(f"{_TMP_PREFIX}{seq:08d}-deleted-{secrets.token_hex(4)}")
            try:
                os.rename(cdir, doomed)
            except OSError as exc:
                raise errors.CheckpointError(
                    f"cannot delete checkpoint {checkpoint_id}: {exc}",
                    hint="check the permissions of the checkpoint store",
                ) from exc
        shutil.rmtree(doomed, ignore_errors=True)
        log.info("checkpoint.deleted", id=checkpoint_id)

    def apply_retention(self, lineage: str) -> builtins.list[str]:
        """Keep the newest ``keep`` checkpoints; never delete the newest one not known corrupt."""
        all_cps = self.list(lineage)
        protected = next((c.id for c in all_cps if c.status is not CheckpointStatus.CORRUPT), None)
        doomed = [c.id for c in all_cps[self.keep :] if c.id != protected]
        for cid in doomed:
            try:
                self.delete(cid)
            except errors.NotFound:
                continue
        return doomed

    def cleanup_partial(self) -> builtins.list[str]:
        """Remove temporary directories whose writer is gone (killed mid-write)."""
        removed: list[str] = []
        if not self.root.is_dir():
            return removed
        for ldir in self.root.iterdir():
            if not ldir.is_dir() or not NAME_RE.fullmatch(ldir.name):
                continue
            # Under the lineage lock: begin() creates a directory and its writer lock inside it.
            with self._locked(ldir.name):
                for tmp in ldir.iterdir():
                    if not tmp.name.startswith(_TMP_PREFIX) or not tmp.is_dir():
                        continue
                    if _writer_alive(tmp):
                        continue
                    shutil.rmtree(tmp, ignore_errors=True)
                    removed.append(str(tmp))
                    log.info("checkpoint.partial_removed", path=str(tmp))
        return removed


def _writer_alive(tmp: Path) -> bool:
    """A live writer holds an exclusive flock on the directory's lock file."""
    try:
        fd = os.open(tmp / _WRITER_LOCK, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
