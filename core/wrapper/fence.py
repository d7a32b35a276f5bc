"""Fencing: make sure a workload whose wrapper is gone does not live on, unmanaged.

Used before a failover or a restart elsewhere, so a workload is never duplicated (two copies
of the same lineage both writing checkpoints). A wrapper is alive exactly while it holds the
flock on ``<run_dir>/NAME.lock``; the payload is recognised by ``CLAWPOINT_WORKLOAD=NAME`` in
its environment, so a recycled pid is never killed by mistake. Limits: this host only.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from pathlib import Path

import structlog

from core import errors
from core.state.workloads import WorkloadRecord

log = structlog.get_logger(__name__)


def lock_path(run_dir: Path, name: str) -> Path:
    return run_dir / f"{name}.lock"


def wrapper_alive(lock: Path) -> bool:
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def is_payload_of(pid: int, name: str) -> bool:
    """Whether ``pid`` runs with ``CLAWPOINT_WORKLOAD=name`` (guards against pid reuse)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"CLAWPOINT_WORKLOAD={name}".encode() in env


def fence(record: WorkloadRecord, *, timeout_s: float = 10.0) -> bool:
    """Kill the payload of ``record`` if its wrapper is gone; True if something was killed.

    Raises Conflict if the wrapper is still alive: stop it through its control socket instead.
    """
    if record.socket:
        lock = Path(record.socket).with_suffix(".lock")
        if wrapper_alive(lock):
            raise errors.Conflict(
                f"the wrapper of {record.name} (pid {record.wrapper_pid}) is still running",
                hint="checkpoint-and-stop or terminate it first; fencing is for dead wrappers",
            )
    pid = record.pid
    if pid is None or not is_payload_of(pid, record.name):
        return False
    log.warning("fence.kill", workload=record.name, pid=pid)
    try:
        os.kill(pid, signal.SIGKILL)  # a PID-namespace init: the whole tree goes with it
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout_s
    while is_payload_of(pid, record.name):
        if time.monotonic() > deadline:
            raise errors.OperationFailed(
                f"payload pid {pid} of {record.name} survived SIGKILL for {timeout_s:g} s",
                hint="it may be in uninterruptible I/O; check 'ps -o stat -p PID'",
            )
        time.sleep(0.02)
    return True
