"""The cooperative engine: the application saves its own state when asked.

Protocol (documented in docs/checkpointing.md): the payload's environment has
``CLAWPOINT_CHECKPOINT_DIR``, a path that the wrapper points (a symlink, swapped atomically)
at a fresh directory inside the pending checkpoint for each request; the wrapper sends the
configured signal (SIGUSR1 by default) and waits until the application has written the marker
file ``COMPLETE`` there. On start from a checkpoint the wrapper sets ``CLAWPOINT_RESTORE_DIR``
to the published images directory. Works without root and without CRIU. Limits: the
application decides what state it saves; the wrapper can only check that it finished.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from core import errors

COMPLETE = "COMPLETE"
ENV_CHECKPOINT_DIR = "CLAWPOINT_CHECKPOINT_DIR"
ENV_RESTORE_DIR = "CLAWPOINT_RESTORE_DIR"


def parse_signal(name: str) -> signal.Signals:
    try:
        return signal.Signals[name.upper() if name.upper().startswith("SIG") else "SIG" + name]
    except KeyError as exc:
        raise errors.InvalidInput(
            f"unknown signal {name!r} for the cooperative engine",
            hint="use a signal name such as SIGUSR1, SIGUSR2 or SIGHUP",
        ) from exc


def point_link(link: Path, target: Path) -> None:
    """Make ``link`` a symlink to ``target``, replacing any previous one atomically."""
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def request(
    pid: int,
    images_dir: Path,
    *,
    link: Path,
    sig: signal.Signals = signal.SIGUSR1,
    timeout_s: float = 60.0,
    alive: Callable[[], bool] | None = None,
    poll_s: float = 0.02,
) -> dict[str, float]:
    """Ask the payload to save into ``images_dir`` (through ``link``) and wait for ``COMPLETE``."""
    images_dir.mkdir(parents=True, exist_ok=True)
    point_link(link, images_dir)
    marker = images_dir / COMPLETE
    t0 = time.monotonic()
    try:
        os.kill(pid, sig)
    except ProcessLookupError as exc:
        raise errors.CheckpointError(
            f"the workload (pid {pid}) is gone; it cannot save a checkpoint",
            hint="restart it with 'clawpoint run'; it resumes from its newest checkpoint",
        ) from exc
    try:
        while not marker.exists():
            if alive is not None and not alive():
                raise errors.CheckpointError(
                    f"the workload (pid {pid}) exited before writing {marker}",
                    hint="check its log; it must handle the signal and write the COMPLETE marker",
                )
            if time.monotonic() - t0 > timeout_s:
                raise errors.CheckpointError(
                    f"the workload did not write the marker {COMPLETE} in {images_dir} "
                    f"within {timeout_s:g} s after {sig.name}",
                    hint=f"make the app save into ${ENV_CHECKPOINT_DIR} and then write "
                    f"'{COMPLETE}' there when it gets {sig.name}, or raise "
                    "checkpoint.cooperative_timeout_s",
                    details={"directory": str(images_dir), "marker": COMPLETE},
                )
            time.sleep(poll_s)
    finally:
        link.unlink(missing_ok=True)
    return {"cooperative_save_s": time.monotonic() - t0}
