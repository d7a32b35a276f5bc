"""Staging a handoff's images in memory (tmpfs) instead of the store's disk.

A migration's dump is the one part of the pause that grows with the workload. Written to
the store's filesystem it competes with the write-back of earlier checkpoints (the kernel
throttles a writer once enough dirty pages pile up), so a 1 GiB dump took from 0.7 s to
over 4 s on the same machine. Written to a tmpfs (``[migration] staging_dir``, default
``/dev/shm``) it runs at memory speed; the target restores from there (hard links in the
same tmpfs), and the source then copies the images into the store and publishes them.

Layout: ``<staging_dir>/clawpoint-staging/<lineage>@<seq>-<token>/`` (the source's names)
and ``...-<token>.links-<standby token>/`` (the target's). Each side removes its own; every
staged dump first sweeps entries older than ``STALE_S`` (left by a process that was
killed), so memory is not held for long after a crash.

Limits: used only when the tmpfs has room for 1.5x the workload's resident memory; the
images are in RAM until published (seconds), so a machine crash in that window loses them
(the previous checkpoint is intact and still the newest published one).
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

SUBDIR = "clawpoint-staging"
STALE_S = 600.0


def base(staging_dir: str) -> Path | None:
    """The staging area under ``staging_dir`` (None: staging disabled or not a directory)."""
    if not staging_dir or not Path(staging_dir).is_dir():
        return None
    return Path(staging_dir) / SUBDIR


def allocate(staging_dir: str, name: str, need_bytes: int | None) -> Path | None:
    """A fresh directory for a dump of about ``need_bytes``, or None (use the store)."""
    root = base(staging_dir)
    if root is None or need_bytes is None:
        return None
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        st = os.statvfs(root)
    except OSError as exc:
        log.warning("staging.unavailable", dir=str(root), error=str(exc))
        return None
    if st.f_bavail * st.f_frsize < need_bytes * 1.5:
        log.info("staging.too_small", dir=str(root), need=need_bytes)
        return None
    d = root / f"{name}-{secrets.token_hex(4)}"
    d.mkdir(mode=0o700)
    return d


def contains(staging_dir: str, path: Path) -> bool:
    root = base(staging_dir)
    return root is not None and path.resolve().is_relative_to(root.resolve())


def copy_into(src: Path, dest: Path) -> None:
    """Copy every file of ``src`` into ``dest`` (the store's pending images)."""
    for f in sorted(src.iterdir()):
        if f.is_file():
            shutil.copyfile(f, dest / f.name)


def sweep(staging_dir: str, older_than_s: float = STALE_S) -> None:
    """Remove staging entries older than ``older_than_s`` (left by a killed process)."""
    root = base(staging_dir)
    if root is None or not root.is_dir():
        return
    now = time.time()
    for d in root.iterdir():
        try:
            if now - d.stat().st_mtime > older_than_s:
                shutil.rmtree(d, ignore_errors=True)
                log.info("staging.swept", path=str(d))
        except OSError:
            continue
