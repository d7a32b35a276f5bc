"""What every checkpoint engine reports about itself, and helpers on process trees.

Limits: the tree helpers read ``/proc`` (Linux only) and act on the tree as it is at the
moment they walk it; a process forked during the walk may be missed, which is why callers
only use them on frozen (stopped) trees or as a best effort before a kill.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from pydantic import BaseModel

ENGINES = ("criu", "cooperative")


class EngineStatus(BaseModel):
    name: str
    available: bool
    version: str | None = None
    reason: str = ""


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants, parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += children(p)
    return out


def signal_tree(pid: int, sig: int) -> None:
    """Send ``sig`` to every process of the tree rooted at ``pid`` (ignoring ones that left)."""
    for p in tree(pid):
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            continue


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = stat[stat.rindex(")") + 2 :].split()
    return int(rest[19])


def kill_tree(pid: int) -> None:
    signal_tree(pid, signal.SIGKILL)
