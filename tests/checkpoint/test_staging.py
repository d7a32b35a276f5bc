"""The tmpfs staging area of a handoff's dump (``core.store.staging``): used only when there
is room, recognised only where configured, and swept when a killed process left it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from core.store import staging


def test_allocates_only_with_room_and_a_directory(tmp_path: Path) -> None:
    assert staging.allocate("", "w@1", 10) is None  # disabled
    assert staging.allocate(str(tmp_path / "missing"), "w@1", 10) is None
    assert staging.allocate(str(tmp_path), "w@1", None) is None  # size unknown: use the store
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert staging.allocate(str(tmp_path), "w@1", free) is None  # needs 1.5x
    d = staging.allocate(str(tmp_path), "w@1", 1 << 20)
    assert d is not None and d.is_dir() and d.name.startswith("w@1-")
    assert staging.contains(str(tmp_path), d)
    assert not staging.contains(str(tmp_path / "other"), d)
    assert not staging.contains(str(tmp_path), tmp_path / ".." / "x")


def test_copy_and_sweep(tmp_path: Path) -> None:
    d = staging.allocate(str(tmp_path), "w@2", 1)
    assert d is not None
    (d / "pages-1.img").write_bytes(b"x" * 10)
    dest = tmp_path / "store"
    dest.mkdir()
    staging.copy_into(d, dest)
    assert (dest / "pages-1.img").read_bytes() == b"x" * 10
    fresh = staging.allocate(str(tmp_path), "w@3", 1)
    assert fresh is not None
    old = time.time() - staging.STALE_S - 5
    os.utime(d, (old, old))
    staging.sweep(str(tmp_path))
    assert not d.exists() and fresh.exists()  # only what a killed process left long ago
