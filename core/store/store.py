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

The names on disk, checkpoint ids and the durability primitives are in ``core.store.disk``;
what makes a checkpoint believable (authentication, file checks) in ``core.store.trust``.

Limits: one filesystem per root (rename is atomic only within one; on a cluster the root must
be a shared filesystem with POSIX rename and flock, such as NFSv4 or Lustre). No compression.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import os
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core import errors, logs
from core.model import CheckpointInfo, CheckpointStatus, utcnow, validate_name
from core.store import disk, perms, seal, trust

log = logs.get_logger(__name__)


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
        lineage, seq = disk.parse_checkpoint_id(checkpoint_id)
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
                raise trust.foreign_error(d, uid=self.uid, owner=owner if owner is not None else -1)
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

    def begin(self, lineage: str, *, engine: str, node: str | None) -> disk.PendingCheckpoint:
        """Allocate ``LINEAGE@SEQ`` and a temporary directory for the engine to write into.

        The key is loaded (or created) first: a key problem refuses the checkpoint before
        the engine runs, not after it has frozen the workload."""
        validate_name(lineage, what="lineage")
        self._signing_key()
        with self._lineage_lock(lineage) as d:
            seqs = [int(p.name) for p in d.iterdir() if disk.SEQ_RE.fullmatch(p.name)]
            seqs += [
                int(p.name[len(disk.TMP) : len(disk.TMP) + 8])
                for p in d.iterdir()
                if p.name.startswith(disk.TMP)
                and p.name[len(disk.TMP) : len(disk.TMP) + 8].isdigit()
            ]
            seq_file = d / ".seq"
            last = int(seq_file.read_text() or 0) if seq_file.exists() else 0
            seq = max([last, *seqs]) + 1
            published = sorted(int(p.name) for p in d.iterdir() if disk.is_published(p))
            parent = disk.checkpoint_id(lineage, published[-1]) if published else None
            tmp = d / f"{disk.TMP}{seq:08d}-{secrets.token_hex(4)}"
            try:
                # Private before the engine writes a byte: its files get the umask's modes
                # until publish tightens them, but nobody else can reach them.
                perms.make_dir(tmp, self.modes)
                perms.make_dir(tmp / disk.IMAGES, self.modes)
                perms.write_durable(seq_file, str(seq).encode(), self.modes)
                lock_fd = perms.open_file(tmp / disk.WRITER_LOCK, self.modes, os.O_RDWR)
                fcntl.flock(lock_fd, fcntl.LOCK_EX)  # held until publish/abort or our death
            except OSError as exc:
                shutil.rmtree(tmp, ignore_errors=True)
                raise errors.CheckpointError(
                    f"cannot create a checkpoint directory under {d}: {exc}",
                    hint="check free space and permissions of the checkpoint store",
                ) from exc
        return disk.PendingCheckpoint(
            id=disk.checkpoint_id(lineage, seq),
            lineage=lineage,
            seq=seq,
            parent=parent,
            engine=engine,
            node=node,
            tmp_dir=tmp,
            images_dir=tmp / disk.IMAGES,
            lock_fd=lock_fd,
        )

    def publish(
        self,
        pending: disk.PendingCheckpoint,
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
            files = disk.hash_images(pending)
            if not files:
                raise errors.CheckpointError(
                    f"checkpoint {pending.id} has no image files in {pending.images_dir}",
                    hint="the engine wrote nothing; see the wrapper's log for the engine's error",
                )
            disk.fsync_tree(pending.images_dir, [f.name for f in files])
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
                extra={"format": disk.FORMAT, **(extra or {}), disk.OWNER_UID: self.uid},
            )
            manifest = info.model_dump_json(indent=1).encode()
            perms.write_durable(pending.tmp_dir / disk.SEAL, key.seal(manifest), self.modes)
            perms.write_durable(pending.tmp_dir / disk.MANIFEST, manifest, self.modes)
            disk.fsync_path(pending.tmp_dir, directory=True)
            final = pending.tmp_dir.parent / f"{pending.seq:08d}"
            os.rename(pending.tmp_dir, final)
            disk.fsync_path(final.parent, directory=True)
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

    def abort(self, pending: disk.PendingCheckpoint) -> None:
        """Throw away a pending checkpoint (idempotent), keeping its engine logs (``*.log``
        in the work dir) in ``kept_logs_dir`` in place of the previous failure's."""
        self._keep_logs(pending)
        shutil.rmtree(pending.tmp_dir, ignore_errors=True)
        self._release(pending)
        log.info("checkpoint.aborted", id=pending.id)

    def _keep_logs(self, pending: disk.PendingCheckpoint) -> None:
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
    def _release(pending: disk.PendingCheckpoint) -> None:
        if pending.lock_fd >= 0:
            os.close(pending.lock_fd)
            pending.lock_fd = -1

    # -- reading ----------------------------------------------------------------------------

    def _lineage_owner(self, d: Path) -> int | None:
        """The owner of lineage directory ``d`` if we may read it; None when it does not
        exist; UntrustedCheckpoint (by name) for a link, or another uid's we may not read."""
        owner = perms.dir_owner(d)
        if owner is not None and not self._may_read(d, owner):
            raise trust.foreign_error(d, uid=self.uid, owner=owner)
        return owner

    def _load(self, path: Path, owner: int) -> CheckpointInfo:
        """The manifest at ``path`` (a checkpoint of a lineage ``owner`` owns), its status
        decided here: untrusted, corrupt (marked), good (authentic), or unverified."""
        try:
            raw = perms.read_nofollow(path / disk.MANIFEST)
            if raw is None:
                raise FileNotFoundError(path / disk.MANIFEST)
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
        info.extra.pop(disk.UNTRUSTED_REASON, None)  # only ever set here, never believed from disk
        info.extra.pop(disk.UNVERIFIED_REASON, None)
        try:
            status, reason = trust.authenticate(path, raw, info, owner, uid=self.uid, key=self.key)
            corrupt = None
            if status is not CheckpointStatus.UNTRUSTED and (path / disk.CORRUPT_MARK).exists():
                corrupt = (path / disk.CORRUPT_MARK).read_text(errors="replace")
        except FileNotFoundError as exc:
            # Deleted after its manifest was read: retention pruned it, or someone deleted it.
            raise errors.NotFound(
                f"checkpoint {path.parent.name}@{path.name} was deleted while being read",
                hint="list the checkpoints again to see which exist",
            ) from exc
        if status is CheckpointStatus.UNTRUSTED:
            info.status = status
            info.extra[disk.UNTRUSTED_REASON] = reason
        elif corrupt is not None:
            info.status = CheckpointStatus.CORRUPT
            info.extra["corrupt_reason"] = corrupt
        else:
            info.status = status
            if reason:
                info.extra[disk.UNVERIFIED_REASON] = reason
        return info

    def _published(self, d: Path) -> builtins.list[Path]:
        return [p for p in d.iterdir() if disk.is_published(p)]

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
            try:
                published = self._published(d)
            except FileNotFoundError:  # the lineage directory itself went away meanwhile
                continue
            for p in published:
                try:
                    out.append(self._load(p, owner))
                except errors.NotFound:
                    # Pruned by retention (a periodic checkpoint's publish keeps the newest
                    # N) or deleted between the directory listing and its read: not listed,
                    # as it would not be a moment later. A listing never fails for it.
                    continue
                except errors.CorruptCheckpoint as exc:
                    log.warning("checkpoint.unreadable_manifest", path=str(p), error=str(exc))
        for info in out:
            if info.status is CheckpointStatus.UNTRUSTED:
                log.warning(
                    "checkpoint.untrusted", id=info.id, reason=info.extra.get(disk.UNTRUSTED_REASON)
                )
        out.sort(key=lambda i: (i.created_at, i.seq), reverse=True)
        return out

    def get(self, checkpoint_id: str) -> CheckpointInfo:
        path = self._dir(checkpoint_id)
        owner = self._lineage_owner(path.parent)
        if owner is None or not disk.is_published(path):
            raise errors.NotFound(
                f"no checkpoint {checkpoint_id}",
                hint="list the checkpoints (of this workload) to see the ids that exist",
            )
        return self._load(path, owner)

    def path_of(self, checkpoint_id: str) -> Path | None:
        """The directory of a published checkpoint; None when there is none (now)."""
        path = self._dir(checkpoint_id)
        return path if disk.is_published(path) else None

    def images_dir(self, checkpoint_id: str) -> Path:
        self.get(checkpoint_id)
        return self._dir(checkpoint_id) / disk.IMAGES

    def published_ids(self, lineage: str) -> builtins.list[str]:
        """Ids of every published checkpoint of a lineage, readable manifest or not: whether
        the lineage has any history at all (a fresh start would throw it away)."""
        d = self._lineage_dir(lineage)
        if self._lineage_owner(d) is None:
            return []
        seqs = sorted((int(p.name) for p in self._published(d)), reverse=True)
        return [disk.checkpoint_id(lineage, seq) for seq in seqs]

    def candidates(self, lineage: str) -> builtins.list[CheckpointInfo]:
        """Published checkpoints of a lineage that may be restored (not known to be corrupt,
        not untrusted), newest first."""
        return [i for i in self.list(lineage) if i.status not in disk.NEVER_RESTORED]

    # -- verification -----------------------------------------------------------------------

    def mark_corrupt(self, checkpoint_id: str, reason: str) -> None:
        path = self._dir(checkpoint_id)
        try:
            perms.write_durable(path / disk.CORRUPT_MARK, reason.encode(), self.modes)
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
            raise trust.untrusted_error(info)
        if info.status is CheckpointStatus.CORRUPT:
            raise trust.corrupt_error(info, info.extra.get("corrupt_reason", "marked corrupt"))
        images = self._dir(checkpoint_id) / disk.IMAGES
        problem = trust.check_files(info, images, digests=digests)
        if problem:
            if info.status is CheckpointStatus.GOOD:  # ours: the owner records what it found
                self.mark_corrupt(checkpoint_id, problem)
            raise trust.corrupt_error(info, problem)
        if restore and info.status is not CheckpointStatus.GOOD:
            raise errors.UntrustedCheckpoint(
                f"checkpoint {info.id} cannot be authenticated here and will not be restored: "
                f"{info.extra.get(disk.UNVERIFIED_REASON, 'no key')}",
                hint=f"restore it as its owner, whose wrapper holds the key ([store] key); "
                f"the owner's 'clawpoint checkpoints' shows whether {info.id} is good",
                details={"checkpoint": info.id, "problem": "unverified"},
            )
        return info

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
            raise trust.corrupt_error(info, info.extra.get("corrupt_reason", "marked corrupt"))
        problem = trust.check_files(info, path / disk.IMAGES, digests=True)
        if problem:
            raise trust.corrupt_error(info, problem)
        key = self._signing_key()
        with self._lineage_lock(info.lineage):
            raw = perms.read_nofollow(path / disk.MANIFEST) or b""
            recorded = CheckpointInfo.model_validate_json(raw).extra.get(disk.OWNER_UID)
            if recorded not in (None, self.uid):
                raise errors.UntrustedCheckpoint(
                    f"checkpoint {checkpoint_id} records owner uid {recorded}: not yours",
                    hint="take a new checkpoint of the workload instead",
                    details={"checkpoint": checkpoint_id},
                )
            if recorded is None:  # written before owners were recorded: record ours
                data = json.loads(raw)
                data.setdefault("extra", {})[disk.OWNER_UID] = self.uid
                raw = json.dumps(data, indent=1).encode()
                perms.write_durable(path / disk.MANIFEST, raw, self.modes)
            perms.write_durable(path / disk.SEAL, key.seal(raw), self.modes)
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
        if not disk.is_published(path):
            raise errors.NotFound(
                f"no checkpoint {checkpoint_id}", hint="list the checkpoints to see which exist"
            )
        # Rename first: the checkpoint disappears from the catalog atomically, then the bytes go.
        gone = path.with_name(f"{disk.DEL}{path.name}-{secrets.token_hex(4)}")
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
                    if p.name.startswith(disk.DEL) or (
                        p.name.startswith(disk.TMP) and disk.writer_gone(p)
                    ):
                        shutil.rmtree(p, ignore_errors=True)
                        removed.append(str(p))
                        log.info("checkpoint.partial_removed", path=str(p))
        return removed
