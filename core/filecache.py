"""What was parsed from a file, kept until the file changes.

A long-lived process (the MCP server) answers many reads of the same files (runbook YAML,
price feeds); parsing them again on every call is most of such a call's time. A
``FileCache`` keeps each file's parsed value keyed by its path and its stat: inode, size,
modification and change times in nanoseconds. Any write, truncation, rename over it or
``touch`` changes the key, so the next ``get`` parses the file again.

Limits: a rewrite that keeps the inode, the size and both timestamps (possible only within
one timestamp tick of a coarse file system) is not seen until the file changes again.
Errors are never cached: a file that fails to parse is parsed again on the next ``get``.
The cached value is shared by every caller, so it must be immutable or treated as such.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

__all__ = ["FileCache", "stat_key"]

T = TypeVar("T")
StatKey = tuple[int, int, int, int]


def stat_key(path: Path) -> StatKey | None:
    """(inode, size, mtime_ns, ctime_ns) of ``path``, or None when it cannot be read."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class FileCache(Generic[T]):
    """``parse(path)`` results by path, parsed again whenever the file's stat changes."""

    def __init__(self, parse: Callable[[Path], T], *, max_entries: int = 512) -> None:
        self._parse = parse
        self._max = max_entries
        self._entries: dict[str, tuple[StatKey, T]] = {}
        self._lock = threading.Lock()

    def get(self, path: Path) -> T:
        key = stat_key(path)
        if key is None:  # let the parser report the missing or unreadable file its own way
            return self._parse(path)
        where = os.path.abspath(path)
        with self._lock:
            hit = self._entries.get(where)
        if hit is not None and hit[0] == key:
            return hit[1]
        # Stat before parsing: a change during the parse leaves an old key on new content,
        # which the next get sees as changed and parses again (never the reverse).
        value = self._parse(path)
        with self._lock:
            if len(self._entries) >= self._max and where not in self._entries:
                self._entries.pop(next(iter(self._entries)))  # the oldest entry
            self._entries[where] = (key, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
