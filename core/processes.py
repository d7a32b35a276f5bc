"""Is a process alive, and is it still the one we mean? Read from ``/proc``, once for all.

A pid names a process only while it lives: after it exits the number may be given to
another one. So callers that recorded a process (a wrapper, a payload, the owner of an
execution) keep its pid *and its start time* (field 22 of ``/proc/PID/stat``, clock ticks
since boot), and ask ``same_process``. ``alive`` answers for a bare pid: a zombie (exited,
not yet reaped by its parent) is not alive, and a process of another user that we may not
signal is.

Limits: Linux only (``/proc``); a pid in another PID namespace than ours is not seen.
"""

from __future__ import annotations

import os
from pathlib import Path


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3 onwards of ``/proc/PID/stat`` (the command name, field 2, may hold spaces
    and parentheses: split after its last ')'); None when the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rpartition(")")[2].split()


def start_time(pid: int | None) -> int | None:
    """The process's start time in clock ticks since boot; None when it is gone."""
    fields = _stat_fields(pid) if pid else None
    if not fields or len(fields) < 20:
        return None
    return int(fields[19])


def alive(pid: int | None) -> bool:
    """Whether ``pid`` is a live process (a zombie is not; one we may not signal is)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat_fields(pid)
    return fields is not None and len(fields) > 0 and fields[0] != "Z"


def same_process(pid: int | None, start: int | None) -> bool:
    """Whether ``pid`` is alive and is the process that started at ``start``."""
    if not pid or start is None:
        return False
    fields = _stat_fields(pid)
    if not fields or len(fields) < 20 or int(fields[19]) != start:
        return False
    return fields[0] != "Z"
