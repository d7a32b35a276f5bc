"""Fencing: make sure a workload whose wrapper is gone is not still running somewhere.

Before a failover restores a workload elsewhere, its old copy must be dead, or the workload
would run twice. The payload normally dies with its wrapper (parent-death signal), but that
is best effort, so ``fence`` checks and kills what is left, and the tasks a restore left half
made when its wrapper died in the middle of it (``half_restored``).

Identity: a pid alone can be reused by an unrelated process. The wrapper writes
``<run_dir>/NAME.pids.json`` with the pids *and start times* (``/proc/PID/stat`` field 22)
of itself and of the payload; a process is only treated as ours if both match.

Limits: this host only (a process on another machine cannot be fenced from here).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from core import logs, processes
from core.checkpoint import engine
from core.config import Settings
from core.polling import poll_until
from core.state.workloads import WorkloadRecord

log = logs.get_logger(__name__)


def pids_path(settings: Settings, name: str) -> Path:
    return settings.run_dir / f"{name}.pids.json"


def write_identity(
    settings: Settings,
    name: str,
    *,
    wrapper: int,
    payload: int | None,
    restored_from: str | None = None,
    files: list[dict[str, Any]] | None = None,
) -> None:
    """``restored_from``: the checkpoint this incarnation started from (None: fresh), which
    the caller that asked for a restore checks against the one it asked for; ``files``: what
    that restore did to the workload's files (rewound or kept), which the caller reports."""
    data: dict[str, Any] = {
        "wrapper_pid": wrapper,
        "wrapper_start": processes.start_time(wrapper),
        "payload_pid": payload,
        "payload_start": processes.start_time(payload) if payload else None,
        "restored_from": restored_from,
        **({"files": files} if files else {}),
    }
    path = pids_path(settings, name)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def read_identity(settings: Settings, name: str) -> dict[str, Any]:
    try:
        data = json.loads(pids_path(settings, name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# Kept as this module's name for it: the wrapper, the backends and the tests ask the fence.
same_process = processes.same_process


def lock_holder(settings: Settings, name: str) -> int | None:
    """The pid holding the workload's wrapper lock, read from /proc/locks (None if free).

    Looking, not probing: trying the lock ourselves, even briefly, could make a wrapper that
    is starting at that instant fail to get it.
    """
    try:
        st = (settings.run_dir / f"{name}.lock").stat()
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    for line in text.splitlines():
        parts = line.split()
        if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
            continue  # "->" marks a waiter, not a holder
        try:
            major, minor, inode = parts[5].split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
            pid = int(parts[4])
        except ValueError:
            continue
        if key == want:
            return pid
    return None


def wrapper_alive(settings: Settings, record: WorkloadRecord) -> bool:
    """A wrapper holds the workload's lock from its first instant (before it records its
    identity), so the lock is checked as well as the recorded identity.

    The recorded identity is checked first: to list /proc/locks the kernel write-locks
    every file lock in the system (``percpu_down_write``, which waits for an RCU grace
    period): 0.25 ms at the median and 17 ms at the 99th percentile on a busy 2-CPU
    machine, on every read of a running workload; a live wrapper's identity is two small
    reads. Either one says alive, so the order does not change the answer."""
    ident = read_identity(settings, record.name)
    if same_process(ident.get("wrapper_pid"), ident.get("wrapper_start")):
        return True
    holder = lock_holder(settings, record.name)
    return holder is not None and holder != os.getpid()  # a wrapper checking on its own name


def payload_alive(settings: Settings, record: WorkloadRecord) -> bool:
    ident = read_identity(settings, record.name)
    return same_process(ident.get("payload_pid"), ident.get("payload_start"))


def restore_dir(settings: Settings, name: str) -> Path:
    """The work directory of the wrapper's restores of ``name`` (CRIU's log goes there)."""
    return settings.run_dir / f"{name}.restore"


def half_restored(settings: Settings, name: str) -> list[int]:
    """Tasks a restore of ``name`` left half made when its wrapper died in the middle of it.

    CRIU's tasks hold its log open (a service descriptor) until the restore is over, and they
    are made in a PID namespace of their own; such a task outlives a killed wrapper, asleep
    and holding its memory, reparented to init and so beyond any job's or pod's end. Call
    only with no wrapper of ``name`` alive (a live one may be restoring).
    """
    from core.checkpoint.criu_restore import RESTORE_LOG  # only here: fences are rare

    wanted = str(restore_dir(settings, name) / RESTORE_LOG)
    try:
        ours = os.readlink("/proc/self/ns/pid")
    except OSError:
        return []
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry.name}/ns/pid") == ours:
                continue  # not one CRIU made: cheap to tell, so most are never listed
            fds = os.listdir(f"/proc/{entry.name}/fd")
        except OSError:
            continue  # gone, or not ours to see
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{entry.name}/fd/{fd}")
            except OSError:
                continue
            if target in (wanted, f"{wanted} (deleted)"):
                found.append(int(entry.name))
                break
    return found


def fence(settings: Settings, record: WorkloadRecord, *, wait_s: float = 10.0) -> bool:
    """Ensure no unmanaged copy of ``record``'s payload runs on this host.

    Returns True when the workload is fenced (no payload of it is alive here: it was already
    gone, or it was orphaned and has been killed); False when its wrapper is still alive, in
    which case nothing is touched: ask the wrapper (control socket) instead.
    """
    if wrapper_alive(settings, record):
        return False
    for left in half_restored(settings, record.name):
        log.warning("fence.killing_half_restored", workload=record.name, pid=left)
        engine.kill_tree(left)
    ident = read_identity(settings, record.name)
    pid, start = ident.get("payload_pid"), ident.get("payload_start")
    if not same_process(pid, start):
        return True
    assert isinstance(pid, int)
    log.warning("fence.killing_orphan", workload=record.name, pid=pid)
    engine.kill_tree(pid)

    def gone() -> bool:
        if not same_process(pid, start):
            return True
        try:  # reap it if it happens to be our child (tests, a wrapper in-process)
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return False

    poll_until(gone, timeout_s=wait_s, every_s=0.02)
    if same_process(pid, start):
        os.kill(pid, signal.SIGKILL)
        return False
    return True
