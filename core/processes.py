"""Is a process alive, and is it still the one we mean, and what is it doing? Read from
``/proc``, once for all (also its state letter and its namespace's TCP sockets).

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


def state(pid: int) -> str | None:
    """The process's state letter (``R``, ``S``, ``t`` when a tracer such as CRIU stopped
    it, ``Z``...); None when it is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


TCP_ESTABLISHED, TCP_LISTEN = "01", "0A"  # the ``st`` column of /proc/net/tcp


def tcp_sockets(pid: int, st: str) -> dict[str, int]:
    """The TCP sockets in state ``st`` of ``pid``'s network namespace (``/proc/PID/net/tcp``
    and ``tcp6``): socket inode (as ``socket:[INODE]`` names it) -> local port."""
    found: dict[str, int] = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == st:
                found[cols[9]] = int(cols[1].rsplit(":", 1)[1], 16)
    return found
