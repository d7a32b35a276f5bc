"""The cooperative engine: the application saves its own state when asked.

Protocol (what an application implements; see docs/checkpointing.md):

- ``CLAWPOINT_CHECKPOINT_DIR`` is set in the application's environment at start. It is a
  symbolic link that the wrapper points at a fresh, empty directory inside the pending
  checkpoint before each request, so the application always writes to the same path.
- On the configured signal (default SIGUSR1) the application writes its state into that
  directory, makes it durable, and then creates the marker file ``COMPLETE`` there.
- When started from a checkpoint, ``CLAWPOINT_RESTORE_DIR`` names the published directory
  it wrote (read-only: the application must not modify it).

Works without root and without CRIU. Limits: only what the application saves is saved; the
wrapper cannot tell whether the state is complete beyond the marker; the application must
handle the signal promptly (the wait has a timeout).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from core import errors, logs
from core.checkpoint import engine
from core.polling import poll_until
from core.store.disk import PendingCheckpoint

if TYPE_CHECKING:
    from core.config import CheckpointConfig

log = logs.get_logger(__name__)

MARKER = "COMPLETE"
ENV_CHECKPOINT_DIR = "CLAWPOINT_CHECKPOINT_DIR"
ENV_RESTORE_DIR = "CLAWPOINT_RESTORE_DIR"


def status() -> engine.EngineStatus:
    return engine.EngineStatus(name="cooperative", available=True, version="1")


def parse_signal(name: str) -> int:
    """``SIGUSR1`` / ``USR1`` / ``10`` -> signal number; InvalidInput otherwise."""
    text = name.strip().upper()
    if text.isdigit():
        return int(text)
    try:
        return int(signal.Signals[text if text.startswith("SIG") else f"SIG{text}"])
    except KeyError as exc:
        raise errors.InvalidInput(
            f"unknown signal {name!r} for the cooperative engine",
            hint="set checkpoint.cooperative_signal to a name like SIGUSR1 or SIGUSR2",
        ) from exc


def point_link(link: Path, target: Path) -> None:
    """Atomically make ``link`` a symlink to ``target`` (replace via rename)."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def handles_signal(pid: int, sig: int) -> bool | None:
    """Whether ``pid`` has installed a handler for ``sig`` (None when it cannot be told).

    Sending SIGUSR1 to a process without a handler terminates it: that must never be how a
    checkpoint request ends a workload (for example one still starting up).
    """
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        return None
    return None


def checkpoint(
    pid: int,
    pending: PendingCheckpoint,
    *,
    link: Path,
    sig: int = signal.SIGUSR1,
    timeout_s: float = 60.0,
    alive: Callable[[], bool] | None = None,
) -> dict[str, float]:
    """Ask the application (``pid``) to save into ``pending.images_dir``; wait for the marker."""
    target = pending.images_dir
    point_link(link, target)
    marker = target / MARKER
    if handles_signal(pid, sig) is False:
        name = signal.Signals(sig).name
        raise errors.CheckpointError(
            f"the workload (pid {pid}) has no handler for {name} (yet): sending it would "
            "terminate it, so no checkpoint was requested",
            hint=f"make the application handle {name} by saving its state into "
            f"${ENV_CHECKPOINT_DIR} and writing {MARKER} there; if it is still starting, retry",
        )
    t0 = time.perf_counter()
    try:
        os.kill(pid, sig)
    except ProcessLookupError as exc:
        raise errors.CheckpointError(
            f"the workload (pid {pid}) is gone: cannot ask it to checkpoint",
            hint="start it again from its newest checkpoint",
        ) from exc

    def written_or_gone() -> bool:
        return marker.exists() or (alive is not None and not alive())

    left = t0 + timeout_s - time.perf_counter()
    poll_until(written_or_gone, timeout_s=left, every_s=0.005, max_every_s=0.1)
    if not marker.exists():
        if alive is not None and not alive():
            raise errors.CheckpointError(
                f"the workload (pid {pid}) exited before writing {marker}",
                hint="check the workload's log; its previous checkpoints are untouched",
            )
        raise errors.CheckpointError(
            f"the workload did not write the marker file {MARKER!r} in {target} within "
            f"{timeout_s:g}s after {signal.Signals(sig).name}",
            hint=f"make the application write its state to ${ENV_CHECKPOINT_DIR} and then "
            f"create {MARKER} there on {signal.Signals(sig).name}, or raise "
            "checkpoint.cooperative_timeout_s",
            details={"dir": str(target), "marker": MARKER},
        )
    wall = time.perf_counter() - t0
    log.info("cooperative.saved", pid=pid, wall_s=round(wall, 3))
    return {"cooperative_save_s": wall}


class CooperativeEngine:
    """``cooperative``: the application saves and reloads its own state (module doc)."""

    name = "cooperative"
    needs_pid_namespace = False
    restores_process = False  # the application reloads its own state in a fresh command
    supports_handoff = False

    def status(self, cfg: CheckpointConfig) -> engine.EngineStatus:
        return status()

    def require(self, cfg: CheckpointConfig) -> None:
        parse_signal(cfg.cooperative_signal)

    def payload_env(self, link: Path) -> dict[str, str]:
        return {ENV_CHECKPOINT_DIR: str(link)}

    def dump(self, req: engine.DumpRequest) -> engine.Dumped:
        if req.link is None:
            raise errors.CheckpointError(
                "the cooperative engine needs the workload's checkpoint directory link",
                hint="run the workload under the wrapper ('clawpoint run --engine cooperative')",
            )
        timings = checkpoint(
            req.pid,
            req.pending,
            link=req.link,
            sig=parse_signal(req.cfg.cooperative_signal),
            timeout_s=req.cfg.cooperative_timeout_s,
            alive=req.alive,
        )
        return engine.Dumped(timings=timings)

    def resume(self, pid: int) -> None:
        return None  # never frozen: the application saved while running

    def end(self, pid: int, exited: threading.Event) -> None:
        engine.terminate_tree(pid, grace_s=10, exited=exited)

    def refusals(self, pid: int) -> list[str]:
        return []  # the application saves what it can itself

    def prepare_restore(self, req: engine.RestoreRequest) -> None:
        return None

    def restore(self, req: engine.RestoreRequest) -> engine.Restored:
        # The command starts afresh and reloads the directory; ops verified it first.
        return engine.Restored(pid=None, env={ENV_RESTORE_DIR: str(req.images)})


ENGINE = CooperativeEngine()
