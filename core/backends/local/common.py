"""Shared pieces of the local backend: its name and process liveness checks (its
capabilities are its plan table's keys: ``plans.PLANS``)."""

from __future__ import annotations

from pathlib import Path

from core import logs, processes
from core.config import Settings
from core.model import WorkloadState
from core.state.workloads import WorkloadRecord
from core.wrapper import fence as fencing

log = logs.get_logger("clawpoint.local")

NAME = "local"
_LIVE = (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING)


_pid_alive = processes.alive


def _wrapper_alive(settings: Settings, record: WorkloadRecord) -> bool:
    """True while the workload's wrapper holds its lock (it does for its whole life)."""
    return fencing.wrapper_alive(settings, record)


def _resident_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None
