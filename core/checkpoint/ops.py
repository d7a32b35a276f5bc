"""Checkpoint and restore as whole operations: engine + store, with the safety ordering.

- ``criu_checkpoint``: begin -> dump (hashing as CRIU writes) -> publish. With ``stop`` the
  tree is dumped *frozen* and only killed after the checkpoint is published; if anything
  fails before that, the tree is resumed. A stop never loses the workload.
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
from core.backends.base import ProgressFn, no_progress
from core.checkpoint import criu, engine
from core.model import CheckpointInfo
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
) -> CheckpointInfo:
    """Checkpoint the tree rooted at ``pid``; with ``stop`` it is killed once published."""
    t0 = time.perf_counter()
    pending = store.begin(lineage, engine="criu", node=node)
    try:
        progress(0, 3, f"dumping pid {pid} into {pending.id}")
        timings = criu.dump(
            pid,
            pending,
            leave_running=not stop,
            leave_stopped=stop,
            external_pipes=pipes,
            criu_path=criu_path,
        )
        progress(1, 3, "publishing (fsync + manifest)")
        info = store.publish(
            pending,
            timings=timings,
            leave_running=not stop,
            extra={**(extra or {}), "pipes": list(pipes)},
        )
    except BaseException:
        store.abort(pending)
        if stop:
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
    store.verify(checkpoint_id, digests=False)
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
