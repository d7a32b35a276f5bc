"""The progress file: where a payload says how far it got (the progress protocol).

The wrapper starts its payload with ``CLAWPOINT_PROGRESS_FILE`` =
``<run_dir>/NAME.progress.json``; the payload replaces that file atomically with a JSON object
(``step``, ``total``, ``ts``, ...). A checkpoint records the last report. After a restore,
the wrapper (a handoff's report) and the local restore watch
(``core.backends.local.verify``) want the *first* report of the restored program, told apart
from an older one by the file's :class:`Stamp` taken before the restore.

The payload's temporary file (the protocol's "write, then rename") is part of its state: a
checkpoint frozen between the two must find it again at every restore, though the program's
later run renamed it away. ``side_files`` names those files to each checkpoint
(``core.checkpoint.files`` carries them), so the protocol asks that they sit beside this file
and be named after it.

Limits: a report is new when the file's inode or modification time changed; one written onto
the same inode within the filesystem's time resolution is not seen as new (atomic
replacement, which the protocol asks for, makes a new inode, so it always is). Reading never
raises: an absent, unreadable or non-object file is "no report".
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from core.config import Settings

# A report is a small JSON object; anything larger beside it is not a report's temporary file.
TEMP_MAX_BYTES = 1 << 20
TEMP_MAX_FILES = 16
# Names of files we write beside others' (``core.checkpoint.files``): never a payload's.
_OURS = (".after-", ".clawpoint-restore-")


class Stamp(NamedTuple):
    """Which version of the file is there: a later report has another one."""

    inode: int
    mtime_ns: int

    @classmethod
    def parse(cls, value: object) -> Stamp | None:
        """A stamp that travelled as JSON (a list of two numbers), else None."""
        if isinstance(value, list | tuple) and len(value) == 2:
            try:
                return cls(int(value[0]), int(value[1]))
            except (TypeError, ValueError):
                return None
        return None


@dataclass(frozen=True)
class ProgressFile:
    path: Path

    @classmethod
    def of(cls, settings: Settings, name: str) -> ProgressFile:
        """Workload ``name``'s progress file on this host."""
        return cls(settings.run_dir / f"{name}.progress.json")

    def stamp(self) -> Stamp | None:
        """The version there now; None when there is no file."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return Stamp(st.st_ino, st.st_mtime_ns)

    def temp_files(self) -> list[Path]:
        """The payload's temporary files for a report (written, not yet renamed over this
        file): regular files beside it named after it, ``.NAME.progress.json...`` or
        ``NAME.progress.json...`` (what the protocol asks for), none of our own, at most
        ``TEMP_MAX_BYTES`` each, the newest ``TEMP_MAX_FILES``."""
        mine, hidden = f"{self.path.name}.", f".{self.path.name}"
        try:
            entries = list(os.scandir(self.path.parent))
        except OSError:
            return []
        dated: list[tuple[int, Path]] = []
        for e in entries:
            if not e.name.startswith((mine, hidden)) or any(m in e.name for m in _OURS):
                continue
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue  # renamed away while we looked
            if stat.S_ISREG(st.st_mode) and st.st_size <= TEMP_MAX_BYTES:
                dated.append((st.st_mtime_ns, Path(e.path)))
        # The newest: the one a frozen program is about to rename is among them; older ones
        # are leftovers of runs that died between write and rename, not worth the freeze.
        return [path for _, path in sorted(dated, reverse=True)[:TEMP_MAX_FILES]]

    def side_files(self) -> Callable[[], list[Path]] | None:
        """What a checkpoint must carry besides the tree's open files (``DumpRequest``):
        ``temp_files`` once the payload speaks the protocol (a report or a temporary file is
        there), else None, so a payload that never reports is not dumped frozen for it."""
        return self.temp_files if self.path.exists() or self.temp_files() else None

    def read(self) -> dict[str, object] | None:
        """The payload's last report, if any."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def report_since(self, mark: Stamp | None) -> dict[str, object] | None:
        """The report, if one was written after ``mark`` was taken (None: not yet)."""
        now = self.stamp()
        if now is None or now == mark:
            return None
        return self.read()
