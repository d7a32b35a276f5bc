"""Checkpoint and restore as whole operations: engine + store, with the safety ordering.

- ``criu_checkpoint``: begin -> dump (hashing as CRIU writes) -> publish. With ``stop`` the
  tree is dumped *frozen* and only killed after the checkpoint is published; if anything
  fails before that, the tree is resumed. A stop never loses the workload.
- The files the tree writes (``core.checkpoint.files``) are copied into the checkpoint while
  the tree is frozen and put back, digests checked, before CRIU restores.
- ``criu_restore_verified``: CRIU restores the tree stopped while a thread re-hashes the
  images against the manifest; the tree is resumed only if the digests match, killed
  otherwise (and the checkpoint marked corrupt). Verification thus overlaps the restore.

The wrapper (``core.wrapper.supervisor``) and the benchmark (``bench/checkpoint.py``) both
use these, so the benchmark measures what users get. Limits: see ``core.checkpoint.criu``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from core import errors
from core.checkpoint import criu, engine, files
from core.model import CheckpointInfo, ProgressFn, no_progress
from core.store.store import CheckpointStore

log = structlog.get_logger(__name__)


def criu_checkpoint(
    store: CheckpointStore,
    *,
    lineage: str,
    pid: int,
    node: str | None,
    stop: bool,
    pipes: Sequence[int] = (),
    extra: dict[str, Any] | None = None,
    criu_path: str = "criu",
    progress: ProgressFn = no_progress,
    options: criu.CriuOptions | None = None,
) -> CheckpointInfo:
    """Checkpoint the tree rooted at ``pid``; with ``stop`` it is killed once published.

    The files the tree writes are copied while it is frozen (``core.checkpoint.files``): a
    leave-running checkpoint of a tree that has any is dumped ``--leave-stopped`` and resumed
    right after the copy. ``options``: None = the configuration's, read once here.
    """
    t0 = time.perf_counter()
    options = options or criu.current_options()
    exclude = (str(store.root),)
    # Cheap look before the freeze: only a tree with files to copy pays for a stopped dump.
    frozen = stop or bool(files.writable_files(pid, exclude=exclude))
    resumed = False
    pending = store.begin(lineage, engine="criu", node=node)
    try:
        progress(0, 3, f"dumping pid {pid} into {pending.id}")
        timings = criu.dump(
            pid,
            pending,
            leave_running=not frozen,
            leave_stopped=frozen,
            external_pipes=pipes,
            criu_path=criu_path,
            options=options,
        )
        file_state: dict[str, Any] = {"budget_bytes": options.file_budget_mib * 2**20}
        if frozen:
            t1 = time.perf_counter()
            file_state = files.save(
                pid,
                pending.images_dir,
                budget_bytes=options.file_budget_mib * 2**20,
                exclude=exclude,
            )
            timings["files_s"] = time.perf_counter() - t1
            if not stop:
                criu.resume(pid)
                resumed = True
        progress(1, 3, "publishing (fsync + manifest)")
        info = store.publish(
            pending,
            timings=timings,
            leave_running=not stop,
            extra={**(extra or {}), "pipes": list(pipes), files.FILES_KEY: file_state},
        )
    except BaseException:
        store.abort(pending)
        if frozen and not resumed:
            criu.resume(pid)  # the dump froze it: let it go on rather than lose it
        raise
    # The manifest cannot contain its own total; the caller gets it (and the log).
    info.timings["total_s"] = time.perf_counter() - t0
    if stop:
        engine.kill_tree(pid)
    progress(2, 3, f"published {info.id} ({info.size_bytes} bytes)")
    return info


def criu_restore_verified(
    store: CheckpointStore,
    checkpoint_id: str,
    *,
    work_dir: Path,
    inherit_pipes: Mapping[int, int] | None = None,
    criu_path: str = "criu",
) -> criu.Restored:
    """Restore and verify concurrently; resume only a verified tree.

    Raises CorruptCheckpoint (tree killed, checkpoint marked) when verification fails, and
    CheckpointError when CRIU fails on images that verify.
    """
    t0 = time.perf_counter()
    images = store.images_dir(checkpoint_id)
    # Sizes first (no reads): CRIU may wait forever on a truncated page image.
    info = store.verify(checkpoint_id, digests=False)
    # The files the workload wrote, back as they were at the checkpoint (digests checked
    # first): CRIU refuses files whose size changed, and memory must match their contents.
    try:
        files.put_back(info, images)
    except errors.CorruptCheckpoint as exc:
        store.mark_corrupt(checkpoint_id, exc.message)
        raise
    verdict: list[BaseException | None] = []
    corrupt = threading.Event()

    def verify() -> None:
        try:
            store.verify(checkpoint_id)
            verdict.append(None)
        except BaseException as exc:  # handed to the restoring thread
            verdict.append(exc)
            corrupt.set()  # stop CRIU now: it may never finish on damaged images

    checker = threading.Thread(target=verify, name="verify-images", daemon=True)
    checker.start()
    try:
        restored = criu.restore(
            images,
            work_dir=work_dir,
            inherit_pipes=inherit_pipes,
            leave_stopped=True,
            criu_path=criu_path,
            abort=corrupt,
        )
    except errors.CheckpointError:
        checker.join()
        if verdict[0] is not None:
            raise verdict[0] from None  # the real cause: the images are bad
        raise
    t1 = time.perf_counter()
    checker.join()
    if verdict[0] is not None:
        engine.kill_tree(restored.pid)
        try:
            os.waitpid(restored.pid, 0)
        except ChildProcessError:
            pass
        raise verdict[0]
    criu.resume(restored.pid)
    restored.timings.update(
        {"verify_wait_s": time.perf_counter() - t1, "restore_total_s": time.perf_counter() - t0}
    )
    return restored


def terminate_tree(pid: int, *, grace_s: float, exited: threading.Event) -> None:
    """SIGTERM the root, then SIGKILL the tree if it has not exited within ``grace_s``.

    A PID-namespace init ignores SIGTERM unless it installed a handler, hence the escalation.
    """
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if not exited.wait(grace_s):
        log.warning("payload.sigkill_after_grace", pid=pid, grace_s=grace_s)
        engine.kill_tree(pid)
