"""Checkpoint and restore as whole operations: any engine + the store, with the safety ordering.

- ``checkpoint``: begin -> the engine's dump -> publish. A dump that leaves the tree frozen
  (a stop, or CRIU copying the workload's files) is ended only after the checkpoint is
  published; if anything fails before that, the checkpoint is aborted and the tree resumed.
  A stop never loses the workload.
- ``restore_verified``: the engine's checks and put-backs, then the engine restores the tree
  stopped while a thread re-hashes the images against the manifest; the tree is resumed only
  if the digests match, killed otherwise (and the checkpoint marked corrupt). Verification
  thus overlaps the restore. An engine that restarts the command (cooperative) gets the
  verified directory only.

The wrapper (``core.wrapper.supervisor``) and the benchmark both use these, so the benchmark
measures what users get. Engine-specific limits: see each engine's module.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import errors, logs
from core.checkpoint import engine, files
from core.checkpoint.engine import DumpRequest, Engine, Restored, RestoreRequest
from core.config import CheckpointConfig
from core.model import CheckpointInfo
from core.store import retention, staging
from core.store.disk import PendingCheckpoint
from core.store.store import CheckpointStore

log = logs.get_logger(__name__)


def checkpoint(
    store: CheckpointStore,
    eng: Engine,
    *,
    lineage: str,
    pid: int,
    node: str | None,
    stop: bool,
    cfg: CheckpointConfig,
    pipes: Sequence[int] = (),
    link: Path | None = None,
    extra: dict[str, Any] | None = None,
    exited: threading.Event | None = None,
    progress: engine.Progress | None = None,
    abort: threading.Event | None = None,
    side_files: Callable[[], Sequence[Path]] | None = None,
) -> CheckpointInfo:
    """Checkpoint the tree rooted at ``pid`` with ``eng``; with ``stop`` it ends once published.
    ``abort``: set to give the dump up (``DumpRequest.abort``); ``side_files``: see
    ``DumpRequest``."""
    t0 = time.perf_counter()
    say = progress or (lambda done, total, message: None)
    ended = exited or threading.Event()
    pending = store.begin(lineage, engine=eng.name, node=node)
    frozen = False
    try:
        say(0, 3, f"{eng.name}: saving pid {pid} into {pending.id}")
        dumped = eng.dump(
            DumpRequest(
                pid=pid,
                pending=pending,
                stop=stop,
                cfg=cfg,
                pipes=pipes,
                link=link,
                exclude=(str(store.root),),
                alive=lambda: not ended.is_set(),
                progress=say,
                abort=abort or threading.Event(),
                side_files=side_files,
            )
        )
        frozen = dumped.frozen
        say(1, 3, "publishing (fsync + manifest)")
        info = store.publish(
            pending,
            timings=dumped.timings,
            leave_running=not stop,
            extra={**(extra or {}), **dumped.extra},
        )
    except BaseException:
        store.abort(pending)
        if frozen:
            eng.resume(pid)  # the dump froze it: let it go on rather than lose it
        raise
    # The manifest cannot contain its own total; the caller gets it (and the log).
    info.timings["total_s"] = time.perf_counter() - t0
    if stop:
        eng.end(pid, ended)
    say(2, 3, f"published {info.id} ({info.size_bytes} bytes)")
    return info


@dataclass
class Staged:
    """A handoff's stop-checkpoint half done: dumped, the tree still frozen, nothing hashed
    or synced (``stage``). Then either ``end_staged`` + hand over + ``publish_staged``, or
    ``publish_staged`` + ``end_staged`` when there is nobody to hand over to."""

    pending: PendingCheckpoint
    timings: dict[str, float]
    extra: dict[str, Any]
    pid: int
    t0: float
    # Where the store wants the images, when they were dumped into a private tmpfs slot
    # instead (``core.store.staging``; pending.images_dir is the slot's path).
    store_images: Path | None = None
    slot: staging.Slot | None = None

    @property
    def carries_files(self) -> bool:
        """Did the dump copy files of the workload (which only a published one puts back)?"""
        saved = self.extra.get(files.FILES_KEY)
        return isinstance(saved, dict) and bool(saved.get("saved"))


def _staged_bytes(pid: int, cfg: CheckpointConfig, store: CheckpointStore) -> int | None:
    """About what a staged dump of the tree at ``pid`` takes: its memory and the copies of
    the files it writes that fit the budget (``files.save`` puts them with the images)."""
    memory = engine.resident_bytes(pid)
    if memory is None:
        return None
    exclude = (str(store.root),)
    copied, _ = files.split_budget(
        files.writable_files(pid, exclude=exclude), cfg.file_budget_mib * 2**20
    )
    return memory + sum(f.size for f in copied)


def stage(
    store: CheckpointStore,
    eng: Engine,
    *,
    lineage: str,
    pid: int,
    node: str | None,
    cfg: CheckpointConfig,
    pipes: Sequence[int] = (),
    extra: dict[str, Any] | None = None,
    staging_dir: str = "",
    abort: threading.Event | None = None,
    side_files: Callable[[], Sequence[Path]] | None = None,
) -> Staged:
    """Dump the tree at ``pid`` for a handoff, leaving it frozen: the pause holds nothing but
    the engine's dump, into a tmpfs under ``staging_dir`` when it has room (else the store).
    Raises (the tree resumed, nothing kept) when the dump fails."""
    t0 = time.perf_counter()
    pending = store.begin(lineage, engine=eng.name, node=node)
    staging.sweep(staging_dir)
    slot = staging.allocate(staging_dir, pending.id, _staged_bytes(pid, cfg, store))
    store_images = None
    if slot is not None:
        store_images, pending.images_dir = pending.images_dir, slot.path
    try:
        dumped = eng.dump(
            DumpRequest(pid=pid, pending=pending, stop=True, cfg=cfg, pipes=pipes,
                        exclude=(str(store.root),), staged=True,
                        abort=abort or threading.Event(), side_files=side_files)
        )  # fmt: skip
    except BaseException:
        store.abort(pending)
        if slot is not None:
            slot.remove()
        raise
    if not dumped.frozen:  # an engine whose stop does not freeze cannot be staged
        store.abort(pending)
        if slot is not None:
            slot.remove()
        raise errors.CheckpointError(
            f"the {eng.name} engine cannot stage a checkpoint for a handoff",
            hint="[migration] handoff = false moves it the plain way",
        )
    timings = {**dumped.timings, "staged_in_memory": 1.0 if slot is not None else 0.0}
    extra = {**(extra or {}), **dumped.extra}
    return Staged(pending, timings, extra, pid, t0, store_images, slot)


def publish_staged(store: CheckpointStore, staged: Staged) -> CheckpointInfo:
    """Copy (from a tmpfs), hash, sync and publish a staged checkpoint, after the handoff
    and outside the pause. The staging copy is removed either way (the target restored
    from its own links to it)."""
    pending = staged.pending
    slot = staged.slot
    try:
        if slot is not None and staged.store_images is not None:
            try:
                slot.copy_into(staged.store_images)
            except OSError as exc:
                store.abort(pending)
                raise errors.CheckpointError(
                    f"cannot copy checkpoint {pending.id} into the store: {exc}",
                    hint="check free space of the checkpoint store",
                ) from exc
            pending.images_dir = staged.store_images
        info = store.publish(pending, timings=staged.timings, leave_running=False,
                             extra=staged.extra)  # fmt: skip
    finally:
        if slot is not None:
            slot.remove()
    info.timings["total_s"] = time.perf_counter() - staged.t0
    return info


def restore_staged(
    eng: Engine,
    images: Path,
    *,
    work_dir: Path,
    cfg: CheckpointConfig,
    info: CheckpointInfo,
    inherit_pipes: Mapping[int, int] | None = None,
    lazy: bool = False,
    join: Callable[[], None] | None = None,
) -> Restored:
    """Restore a handoff's staged images (written a moment ago on this host, not yet
    published: nothing to hash them against) and let the tree run at once. ``images`` must
    come from ``staging.link`` (a private area of this uid, checked on its descriptors: no
    other user can have written them) or the store. The start step verifies the published
    checkpoint afterwards."""
    t0 = time.perf_counter()
    req = RestoreRequest(images=images, info=info, work_dir=work_dir, cfg=cfg,
                         inherit_pipes=dict(inherit_pipes or {}), lazy=lazy, join=join)  # fmt: skip
    restored = eng.restore(req)
    if restored.pid is not None:
        eng.resume(restored.pid)
        restored.timings["resumed_at"] = time.time()
    restored.timings["restore_total_s"] = time.perf_counter() - t0
    _said_restored(eng, restored, info.id)
    return restored


def restore_verified(
    store: CheckpointStore,
    eng: Engine,
    checkpoint_id: str,
    *,
    work_dir: Path,
    cfg: CheckpointConfig,
    inherit_pipes: Mapping[int, int] | None = None,
    lazy: bool = False,
    resume_early: bool = False,
    join: Callable[[], None] | None = None,
) -> Restored:
    """Restore and verify concurrently; resume only a verified tree.

    Raises CorruptCheckpoint (tree killed, checkpoint marked) when verification fails, and
    CheckpointError when the engine fails on images that verify.

    ``lazy``: post-copy, where the engine can (memory is faulted in after the tree runs).
    ``resume_early`` (a migration's handoff, whose images were hashed as they were written a
    moment ago on this host): the tree runs as soon as it is restored and verification
    finishes behind it; a mismatch still kills it and fails the restore, only later.

    The checkpoint is held (``core.store.retention.hold``) until the engine has restored the
    tree: neither rotation nor a deletion removes it meanwhile.
    """
    with retention.hold(store, checkpoint_id):
        return _restore_verified(
            store,
            eng,
            checkpoint_id,
            work_dir=work_dir,
            cfg=cfg,
            inherit_pipes=inherit_pipes,
            lazy=lazy,
            resume_early=resume_early,
            join=join,
        )


def _restore_verified(
    store: CheckpointStore,
    eng: Engine,
    checkpoint_id: str,
    *,
    work_dir: Path,
    cfg: CheckpointConfig,
    inherit_pipes: Mapping[int, int] | None = None,
    lazy: bool = False,
    resume_early: bool = False,
    join: Callable[[], None] | None = None,
) -> Restored:
    t0 = time.perf_counter()
    images = store.images_dir(checkpoint_id)
    # Sizes first (no reads): CRIU may wait forever on a truncated page image.
    # ... and authenticity: an untrusted checkpoint, or one we cannot authenticate, never
    # reaches the engine.
    info = store.verify(checkpoint_id, digests=False, restore=True)
    req = RestoreRequest(
        images=images,
        info=info,
        work_dir=work_dir,
        cfg=cfg,
        inherit_pipes=dict(inherit_pipes or {}),
        lazy=lazy,
        join=join,
    )
    try:
        eng.prepare_restore(req)
    except errors.CorruptCheckpoint as exc:
        store.mark_corrupt(checkpoint_id, exc.message)
        raise
    verdict: list[BaseException | None] = []

    def verify() -> None:
        try:
            store.verify(checkpoint_id)
            verdict.append(None)
        except BaseException as exc:  # handed to the restoring thread
            verdict.append(exc)
            req.abort.set()  # stop the engine now: CRIU may never finish on damaged images

    checker = threading.Thread(target=verify, name="verify-images", daemon=True)
    if not resume_early:  # else after the resume: hashing would compete with CRIU for CPUs
        checker.start()
    try:
        restored = eng.restore(req)
    except errors.ClawpointError:
        if resume_early:
            checker.start()
        checker.join()
        if verdict[0] is not None:
            raise verdict[0] from None  # the real cause: the images are bad
        raise
    restored.files = req.files
    t1 = time.perf_counter()
    if resume_early:
        if restored.pid is not None:
            eng.resume(restored.pid)
            restored.timings["resumed_at"] = time.time()
        checker.start()
    checker.join()
    if verdict[0] is not None:
        if restored.pid is not None:
            engine.kill_tree(restored.pid)
            try:
                os.waitpid(restored.pid, 0)
            except ChildProcessError:
                pass
        raise verdict[0]
    if restored.pid is not None and not resume_early:
        eng.resume(restored.pid)
        restored.timings["resumed_at"] = time.time()
    restored.timings.update(
        {"verify_wait_s": time.perf_counter() - t1, "restore_total_s": time.perf_counter() - t0}
    )
    _said_restored(eng, restored, checkpoint_id)
    return restored


def _said_restored(eng: Engine, restored: Restored, checkpoint_id: str) -> None:
    """Log a restore once its tree runs (never inside the pause: see criu_restore)."""
    log.info("checkpoint.restored", engine=eng.name, checkpoint=checkpoint_id,
             pid=restored.pid, **{k: round(v, 3) for k, v in restored.timings.items()
                                  if k in ("criu_restore_s", "restore_total_s")})  # fmt: skip


# The wrapper's way of ending a payload; lives with the tree helpers.
terminate_tree = engine.terminate_tree
