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

Confidentiality and authenticity (``core.store.perms``, ``core.store.seal``): everything the
store creates is private (directories 0700, files 0600, whatever the umask; or a documented
group mode), and every manifest is signed with its owner's key, kept outside the store. A
checkpoint is ``good`` only when its manifest authenticates under our key and it lies in
directories we own. One whose manifest is unsigned, signed with another key or altered, or
that lies in a directory someone else owns, is ``untrusted``: listed, never restored
(UntrustedCheckpoint, exit 8), never marked corrupt, never deleted by retention. Who reads
a lineage another uid owns (root, or a service in group mode) checks its integrity but cannot
authenticate it: such checkpoints are ``unverified`` and this store never restores them.

Retention (``core.store.retention``) protects checkpoints by their goodness, not their age:
it never deletes the newest checkpoint that verifies (whatever corrupt ones lie above it), nor
one a restore holds (``hold``); checkpoints asked for on request rotate among themselves
(``keep_on_request``) and never push the others out.

Limits: one filesystem per root (rename is atomic only within one; on a cluster the root must
be a shared filesystem with POSIX rename and flock, such as NFSv4 or Lustre). No compression.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import stat
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
from core.store import digest, perms, seal

log = structlog.get_logger(__name__)

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
_TMP = ".tmp-"
FAILED_LOGS = ".last-failed"  # per lineage: the engine logs of the last aborted checkpoint
_DEL = ".del-"
_WRITER_LOCK = ".writer.lock"
_SEQ_RE = re.compile(r"^[0-9]{8}$")
_ID_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,62})@([0-9]{1,8})$")
# Files an engine may add to an images dir after publish (CRIU writes stats-restore on each
# restore); verification ignores them, everything else unknown is suspicious.
_RESTORE_BYPRODUCTS = frozenset({"stats-restore"})
_NEVER_RESTORED = frozenset({CheckpointStatus.CORRUPT, CheckpointStatus.UNTRUSTED})


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

    @property
    def kept_logs_dir(self) -> Path:
        """Where ``abort`` keeps the engine's logs of the lineage's last failed checkpoint (the
        pending directory itself is removed, and an error's hint must name a file that
        exists)."""
        return self.tmp_dir.parent / FAILED_LOGS


def _fsync_path(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    """``key``: the owner's manifest key file (``[store] key``); without one the store only
    reads (it cannot publish, and lists everything as ``unverified``). ``group``: group mode
    (``[store] group``), else private. ``keep`` and ``keep_on_request``: what retention
    keeps (``[store] keep_per_workload`` and ``keep_on_request``)."""

    def __init__(
        self,
        root: Path,
        *,
        keep: int = 3,
        key: Path | None = None,
        group: str | None = None,
        keep_on_request: int = 3,
    ) -> None:
        for value, what in ((keep, "keep_per_workload"), (keep_on_request, "keep_on_request")):
            if value < 1:
                raise errors.InvalidInput(
                    f"{what} must be at least 1, got {value}",
                    hint=f"set store.{what} to 1 or more",
                )
        self.root = Path(root)
        self.keep = keep
        self.keep_on_request = keep_on_request
        self.key = seal.StoreKey(key) if key is not None else None
        self.group = group or None
        self.uid = os.geteuid()
        self._modes: perms.Modes | None = None

    @property
    def modes(self) -> perms.Modes:
        if self._modes is None:  # resolved on first use: constructing a store reads nothing
            self._modes = perms.modes(self.group)
        return self._modes

    def _signing_key(self) -> seal.StoreKey:
        """The key for publishing (created on first use); refuses a key inside the store."""
        if self.key is None:
            raise errors.CheckpointError(
                f"this process has no store key, so it cannot write checkpoints to {self.root}",
                hint="checkpoints are written by the workload's wrapper, which has one "
                "([store] key, default $CLAWPOINT_HOME/keys/store.key)",
            )
        where = self.key.path.resolve()
        if where.is_relative_to(self.root.resolve()):
            raise errors.CheckpointError(
                f"the store key {self.key.path} lies inside the checkpoint store {self.root}, "
                "where it protects nothing",
                hint="set [store] key to a path outside the store (the default is "
                "$CLAWPOINT_HOME/keys/store.key)",
                code="store-key-refused",
            )
        self.key.load(create=True)
        return self.key

    def _foreign(self, d: Path, owner: int) -> errors.UntrustedCheckpoint:
        return errors.UntrustedCheckpoint(
            f"the lineage directory {d} belongs to {perms.user_name(owner)}, not to you "
            f"({perms.user_name(self.uid)}): clawpoint neither writes into it nor restores "
            "from it",
            hint=f"another user created a lineage of this name in a shared store: use another "
            f"workload name, or have that user or an administrator remove {d}",
            details={"path": str(d), "owner_uid": owner},
        )

    def _may_read(self, d: Path, owner: int) -> bool:
        """Whether we may read another uid's lineage (as ``unverified``): root does, and a
        service in group mode reads the lineages of its group."""
        if owner == self.uid or self.uid == 0:
            return True
        return self.modes.gid is not None and perms.dir_gid(d) == self.modes.gid

    # -- paths and locks ------------------------------------------------------------------

    def _lineage_dir(self, lineage: str) -> Path:
        return self.root / validate_name(lineage, what="lineage")

    def _dir(self, checkpoint_id: str) -> Path:
        lineage, seq = parse_checkpoint_id(checkpoint_id)
        return self._lineage_dir(lineage) / f"{seq:08d}"

    @contextmanager
    def _lineage_lock(self, lineage: str) -> Iterator[Path]:
        """Our lineage directory, created private if missing, locked; one another uid owns
        (or a link planted in its place) is refused by name."""
        d = self._lineage_dir(lineage)
        try:
            perms.check_root(self.root)
            self.root.mkdir(parents=True, exist_ok=True)
            perms.make_dir(d, self.modes, exist_ok=True)
            owner = perms.dir_owner(d)
            if owner != self.uid:
                raise self._foreign(d, owner if owner is not None else -1)
            fd = perms.open_file(d / ".lock", self.modes, os.O_RDWR)
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

    def locked(self, lineage: str) -> contextlib.AbstractContextManager[Path]:
        """The lineage's lock (``begin`` and deletions take it): what is decided under it
        about the lineage's checkpoints holds until it is released."""
        return self._lineage_lock(lineage)

    # -- writing ----------------------------------------------------------------------------

    def begin(self, lineage: str, *, engine: str, node: str | None) -> PendingCheckpoint:
        """Allocate ``LINEAGE@SEQ`` and a temporary directory for the engine to write into.

        The key is loaded (or created) first: a key problem refuses the checkpoint before
        the engine runs, not after it has frozen the workload."""
        validate_name(lineage, what="lineage")
        self._signing_key()
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
                # Private before the engine writes a byte: its files get the umask's modes
                # until publish tightens them, but nobody else can reach them.
                perms.make_dir(tmp, self.modes)
                perms.make_dir(tmp / IMAGES, self.modes)
                perms.write_durable(seq_file, str(seq).encode(), self.modes)
                lock_fd = perms.open_file(tmp / _WRITER_LOCK, self.modes, os.O_RDWR)
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
            key = self._signing_key()
            perms.tighten_tree(pending.tmp_dir, self.modes)
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
                extra={"format": FORMAT, **(extra or {}), OWNER_UID: self.uid},
            )
            manifest = info.model_dump_json(indent=1).encode()
            perms.write_durable(pending.tmp_dir / SEAL, key.seal(manifest), self.modes)
            perms.write_durable(pending.tmp_dir / MANIFEST, manifest, self.modes)
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
        """Throw away a pending checkpoint (idempotent), keeping its engine logs (``*.log``
        in the work dir) in ``kept_logs_dir`` in place of the previous failure's."""
        self._keep_logs(pending)
        shutil.rmtree(pending.tmp_dir, ignore_errors=True)
        self._release(pending)
        log.info("checkpoint.aborted", id=pending.id)

    def _keep_logs(self, pending: PendingCheckpoint) -> None:
        try:
            logs = [p for p in pending.work_dir.glob("*.log") if p.is_file()]
        except OSError:
            return
        if not logs:
            return
        kept = pending.kept_logs_dir
        try:
            shutil.rmtree(kept, ignore_errors=True)
            perms.make_dir(kept, self.modes)
            for p in logs:
                os.chmod(p, self.modes.file)  # CRIU writes its log with the umask's mode
                os.replace(p, kept / p.name)  # same filesystem: the lineage directory
        except OSError as exc:  # never let keeping a log turn an abort into a failure
            log.warning("checkpoint.logs_not_kept", id=pending.id, error=str(exc))

    @staticmethod
    def _release(pending: PendingCheckpoint) -> None:
        if pending.lock_fd >= 0:
            os.close(pending.lock_fd)
            pending.lock_fd = -1

    # -- reading ----------------------------------------------------------------------------

    @staticmethod
    def _is_published(path: Path) -> bool:
        """A directory (not a link) named SEQ holding a manifest (not a link) is a checkpoint."""
        if not _SEQ_RE.fullmatch(path.name):
            return False
        try:
            return stat.S_ISDIR(os.lstat(path).st_mode) and stat.S_ISREG(
                os.lstat(path / MANIFEST).st_mode
            )
        except OSError:
            return False

    def _lineage_owner(self, d: Path) -> int | None:
        """The owner of lineage directory ``d`` if we may read it; None when it does not
        exist; UntrustedCheckpoint (by name) for a link, or another uid's we may not read."""
        owner = perms.dir_owner(d)
        if owner is not None and not self._may_read(d, owner):
            raise self._foreign(d, owner)
        return owner

    def _load(self, path: Path, owner: int) -> CheckpointInfo:
        """The manifest at ``path`` (a checkpoint of a lineage ``owner`` owns), its status
        decided here: untrusted, corrupt (marked), good (authentic), or unverified."""
        try:
            raw = perms.read_nofollow(path / MANIFEST)
            if raw is None:
                raise FileNotFoundError(path / MANIFEST)
            info = CheckpointInfo.model_validate_json(raw)
        except FileNotFoundError as exc:
            raise errors.NotFound(
                f"no checkpoint at {path}", hint="list the checkpoints to see which exist"
            ) from exc
        except (OSError, ValidationError, ValueError) as exc:
            raise errors.CorruptCheckpoint(
                f"the manifest of {path} is unreadable: {exc}",
                hint="this checkpoint cannot be restored; delete it and use an older one",
            ) from exc
        info.extra.pop(UNTRUSTED_REASON, None)  # only ever set here, never believed from disk
        info.extra.pop(UNVERIFIED_REASON, None)
        status, reason = self._authenticate(path, raw, info, owner)
        if status is CheckpointStatus.UNTRUSTED:
            info.status = status
            info.extra[UNTRUSTED_REASON] = reason
        elif (path / CORRUPT_MARK).exists():
            info.status = CheckpointStatus.CORRUPT
            info.extra["corrupt_reason"] = (path / CORRUPT_MARK).read_text(errors="replace")
        else:
            info.status = status
            if reason:
                info.extra[UNVERIFIED_REASON] = reason
        return info

    def _authenticate(
        self, path: Path, raw: bytes, info: CheckpointInfo, owner: int
    ) -> tuple[CheckpointStatus, str]:
        """(status, why): whether this manifest is its lineage owner's, as far as we can tell."""
        untrusted = CheckpointStatus.UNTRUSTED
        st = os.lstat(path)
        if st.st_uid != owner:
            return untrusted, (
                f"its directory belongs to {perms.user_name(st.st_uid)}, its lineage to "
                f"{perms.user_name(owner)}: someone else put it there"
            )
        lineage, seq = path.parent.name, int(path.name)
        if (info.id, info.lineage, info.seq) != (checkpoint_id(lineage, seq), lineage, seq):
            return untrusted, (
                f"its manifest describes {info.id}, but it lies at {checkpoint_id(lineage, seq)}"
            )
        recorded = info.extra.get(OWNER_UID)
        if owner != self.uid:
            if recorded is not None and recorded != owner:
                return untrusted, (
                    f"its manifest records owner uid {recorded}, but its directory belongs to "
                    f"{perms.user_name(owner)}"
                )
            return CheckpointStatus.UNVERIFIED, (
                f"it belongs to {perms.user_name(owner)}: only its owner's key can "
                "authenticate it (its wrapper does before any restore)"
            )
        if self.key is None:
            return CheckpointStatus.UNVERIFIED, "this process has no store key to check it with"
        try:
            sealed = perms.read_nofollow(path / SEAL)
        except OSError as exc:
            return untrusted, f"manifest authentication failed: {SEAL} unreadable: {exc}"
        problem = self.key.check(raw, sealed)
        if problem is None and recorded != self.uid:
            problem = f"its manifest records owner uid {recorded}, not yours ({self.uid})"
        if problem is not None:
            return untrusted, f"manifest authentication failed: {problem}"
        return CheckpointStatus.GOOD, ""

    def _published(self, d: Path) -> builtins.list[Path]:
        return [p for p in d.iterdir() if self._is_published(p)]

    def list(self, lineage: str | None = None) -> builtins.list[CheckpointInfo]:
        """Published checkpoints, newest first (by creation time, then sequence).

        All lineages: those of other users that we may not read are left out (a shared
        store holds everyone's); one lineage: such a lineage is refused by name."""
        found: builtins.list[tuple[Path, int]] = []
        if lineage is not None:
            d = self._lineage_dir(lineage)
            owner = self._lineage_owner(d)
            if owner is not None:
                found.append((d, owner))
        elif self.root.is_dir():
            for d in sorted(self.root.iterdir()):
                if d.name.startswith("."):
                    continue
                try:
                    owner = self._lineage_owner(d)
                except errors.UntrustedCheckpoint as exc:
                    log.info("checkpoint.lineage_skipped", path=str(d), why=exc.message)
                    continue
                if owner is not None:
                    found.append((d, owner))
        out: builtins.list[CheckpointInfo] = []
        for d, owner in found:
            for p in self._published(d):
                try:
                    out.append(self._load(p, owner))
                except errors.CorruptCheckpoint as exc:
                    log.warning("checkpoint.unreadable_manifest", path=str(p), error=str(exc))
        for info in out:
            if info.status is CheckpointStatus.UNTRUSTED:
                log.warning(
                    "checkpoint.untrusted", id=info.id, reason=info.extra.get(UNTRUSTED_REASON)
                )
        out.sort(key=lambda i: (i.created_at, i.seq), reverse=True)
        return out

    def get(self, checkpoint_id: str) -> CheckpointInfo:
        path = self._dir(checkpoint_id)
        owner = self._lineage_owner(path.parent)
        if owner is None or not self._is_published(path):
            raise errors.NotFound(
                f"no checkpoint {checkpoint_id}",
                hint="list the checkpoints (of this workload) to see the ids that exist",
            )
        return self._load(path, owner)

    def path_of(self, checkpoint_id: str) -> Path | None:
        """The directory of a published checkpoint; None when there is none (now)."""
        path = self._dir(checkpoint_id)
        return path if self._is_published(path) else None

    def images_dir(self, checkpoint_id: str) -> Path:
        self.get(checkpoint_id)
        return self._dir(checkpoint_id) / IMAGES

    def published_ids(self, lineage: str) -> builtins.list[str]:
        """Ids of every published checkpoint of a lineage, readable manifest or not: whether
        the lineage has any history at all (a fresh start would throw it away)."""
        d = self._lineage_dir(lineage)
        if self._lineage_owner(d) is None:
            return []
        seqs = sorted((int(p.name) for p in self._published(d)), reverse=True)
        return [checkpoint_id(lineage, seq) for seq in seqs]

    def candidates(self, lineage: str) -> builtins.list[CheckpointInfo]:
        """Published checkpoints of a lineage that may be restored (not known to be corrupt,
        not untrusted), newest first."""
        return [i for i in self.list(lineage) if i.status not in _NEVER_RESTORED]

    # -- verification -----------------------------------------------------------------------

    def mark_corrupt(self, checkpoint_id: str, reason: str) -> None:
        path = self._dir(checkpoint_id)
        try:
            perms.write_durable(path / CORRUPT_MARK, reason.encode(), self.modes)
        except OSError as exc:
            log.warning("checkpoint.cannot_mark_corrupt", id=checkpoint_id, error=str(exc))
        log.warning("checkpoint.corrupt", id=checkpoint_id, reason=reason)

    def verify(
        self, checkpoint_id: str, *, digests: bool = True, restore: bool = False
    ) -> CheckpointInfo:
        """Re-hash every file against the manifest; raise CorruptCheckpoint (and mark it).

        ``digests=False`` checks only the file set and sizes (no reads: instant), which
        catches truncation before an engine is even started. An untrusted checkpoint raises
        UntrustedCheckpoint and is never marked. The result is ``good`` when we authenticated
        it, ``unverified`` when we cannot (another uid's lineage, or no key); ``restore``
        (what a restore asks) refuses the latter too.
        """
        info = self.get(checkpoint_id)
        if info.status is CheckpointStatus.UNTRUSTED:
            raise self._untrusted(info)
        if info.status is CheckpointStatus.CORRUPT:
            raise self._corrupt(info, info.extra.get("corrupt_reason", "marked corrupt"))
        images = self._dir(checkpoint_id) / IMAGES
        problem = self._check_files(info, images, digests=digests)
        if problem:
            if info.status is CheckpointStatus.GOOD:  # ours: the owner records what it found
                self.mark_corrupt(checkpoint_id, problem)
            raise self._corrupt(info, problem)
        if restore and info.status is not CheckpointStatus.GOOD:
            raise errors.UntrustedCheckpoint(
                f"checkpoint {info.id} cannot be authenticated here and will not be restored: "
                f"{info.extra.get(UNVERIFIED_REASON, 'no key')}",
                hint=f"restore it as its owner, whose wrapper holds the key ([store] key); "
                f"the owner's 'clawpoint checkpoints' shows whether {info.id} is good",
                details={"checkpoint": info.id, "problem": "unverified"},
            )
        return info

    def _check_files(self, info: CheckpointInfo, images: Path, *, digests: bool) -> str | None:
        expected = {f.name: f for f in info.files}
        try:
            if not stat.S_ISDIR(os.lstat(images).st_mode):
                return "the images directory is not a directory (a link?)"
            present = {p.name for p in images.iterdir()} - _RESTORE_BYPRODUCTS
        except OSError as exc:
            return f"images directory unreadable: {exc}"
        if missing := sorted(set(expected) - present):
            return f"missing files: {', '.join(missing)}"
        if unknown := sorted(present - set(expected)):
            return f"unexpected files: {', '.join(unknown)}"
        for f in info.files:
            st = os.lstat(images / f.name)
            if not stat.S_ISREG(st.st_mode):
                return f"{f.name} is not a regular file (a link?)"
            if st.st_size != f.size:
                return f"{f.name} has {st.st_size} bytes, the manifest says {f.size} (truncated?)"
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

    @staticmethod
    def _untrusted(info: CheckpointInfo) -> errors.UntrustedCheckpoint:
        problem = str(info.extra.get(UNTRUSTED_REASON, "manifest authentication failed"))
        return errors.UntrustedCheckpoint(
            f"checkpoint {info.id} is untrusted and will not be restored: {problem}",
            hint=f"restore another checkpoint of {info.lineage} (the newest good one is used "
            "automatically). If it was written by your clawpoint before checkpoints were "
            "signed and nobody else could write to its directory, re-sign it with "
            f"'clawpoint checkpoints --reseal {info.id}'; otherwise take a new checkpoint. "
            "It was kept: nothing deletes it but you",
            details={"checkpoint": info.id, "problem": problem},
        )

    def reseal(self, checkpoint_id: str) -> CheckpointInfo:
        """Sign an untrusted checkpoint of ours (one written before manifests were signed):
        the person vouches for it. Only in a lineage we own, in a directory we own, and only
        when every file still matches the manifest; returns it, good."""
        path = self._dir(checkpoint_id)
        info = self.get(checkpoint_id)
        if info.status is CheckpointStatus.GOOD:
            return info
        owner = os.lstat(path.parent).st_uid
        if owner != self.uid or os.lstat(path).st_uid != self.uid:
            raise errors.UntrustedCheckpoint(
                f"checkpoint {checkpoint_id} lies in a directory that is not yours; only its "
                "owner may re-sign it",
                hint="take a new checkpoint of the workload instead",
                details={"checkpoint": checkpoint_id},
            )
        if info.status is CheckpointStatus.CORRUPT:
            raise self._corrupt(info, info.extra.get("corrupt_reason", "marked corrupt"))
        problem = self._check_files(info, path / IMAGES, digests=True)
        if problem:
            raise self._corrupt(info, problem)
        key = self._signing_key()
        with self._lineage_lock(info.lineage):
            raw = perms.read_nofollow(path / MANIFEST) or b""
            recorded = CheckpointInfo.model_validate_json(raw).extra.get(OWNER_UID)
            if recorded not in (None, self.uid):
                raise errors.UntrustedCheckpoint(
                    f"checkpoint {checkpoint_id} records owner uid {recorded}: not yours",
                    hint="take a new checkpoint of the workload instead",
                    details={"checkpoint": checkpoint_id},
                )
            if recorded is None:  # written before owners were recorded: record ours
                data = json.loads(raw)
                data.setdefault("extra", {})[OWNER_UID] = self.uid
                raw = json.dumps(data, indent=1).encode()
                perms.write_durable(path / MANIFEST, raw, self.modes)
            perms.write_durable(path / SEAL, key.seal(raw), self.modes)
            perms.tighten_tree(path, self.modes)
        log.warning("checkpoint.resealed", id=checkpoint_id)
        return self.verify(checkpoint_id, digests=False)

    def newest_good(self, lineage: str) -> CheckpointInfo | None:
        """The newest checkpoint that verifies; corrupt ones are logged, marked and skipped,
        untrusted ones logged and skipped. Another uid's lineage: the newest that passes
        the integrity checks (``unverified``: its owner's wrapper authenticates it)."""
        for info in self.candidates(lineage):
            try:
                return self.verify(info.id)
            except errors.CorruptCheckpoint as exc:
                log.warning("checkpoint.skipping_corrupt", id=info.id, error=exc.message)
        return None

    # -- deletion ---------------------------------------------------------------------------

    def delete(self, checkpoint_id: str) -> None:
        """Delete one checkpoint, unconditionally: callers go through
        ``core.store.retention``, which decides under ``locked`` which ones may go and
        never deletes one a restore holds."""
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
        """Delete what retention rotates out (``core.store.retention.rotate``); the ids."""
        from core.store import retention  # it builds on this module

        return retention.rotate(self, lineage, fresh=fresh)

    def cleanup_partial(self) -> builtins.list[str]:
        """Remove temporary directories whose writer is gone (its flock is free)."""
        removed: builtins.list[str] = []
        if not self.root.is_dir():
            return removed
        for d in self.root.iterdir():
            if d.name.startswith("."):
                continue
            try:  # only our own lineages: never links, never another user's
                st = os.lstat(d)
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != self.uid:
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
