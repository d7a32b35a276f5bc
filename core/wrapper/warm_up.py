"""The engine check a wrapper starts early, in the background, so that it is done by the time
the restore needs it.

Role: a wrapper that restores a workload (a resume, a failover, a Slurm job requeued onto
another node, a plain move) is inside the workload's pause from its first instant, and its
engine's check (for CRIU ``criu --version`` and ``criu check``: about 50-65 ms, nearly all of
it waiting on the kernel) was done in line, right before the restore. It now starts in a
thread as soon as the wrapper knows its engine, and the rest of the start-up (imports, the
settings, the service, the lock) covers it. The logger is not loaded here: it costs tens of
ms of CPU that would compete with the start-up for the interpreter, and no line is logged
inside the pause any more (``core.checkpoint.ops`` logs a restore once the tree runs).

Limits: the thread only warms a cache; ``Engine.require`` asks again where it is needed, and
a CRIU check in flight is waited for rather than run twice
(``core.checkpoint.criu_setup.criu_status``), so a failure here changes nothing but the
timing.
"""

from __future__ import annotations

import threading

from core.checkpoint.engine import Engine
from core.config import CheckpointConfig


def start(engine: Engine, cfg: CheckpointConfig) -> threading.Thread:
    """Check ``engine`` in a daemon thread; returns it (for tests).
    Called as early as the engine is known: by ``clawpoint run`` in the foreground before
    it builds the service (``core.service.early_start``), by a detached wrapper before it
    imports the supervisor, and by the supervisor (nothing left to do by then). The engine
    is got by the caller: importing in two threads at once can meet a circular import
    half done."""
    thread = threading.Thread(target=_warm, args=(engine, cfg), daemon=True, name="warm-up")
    thread.start()
    return thread


def _warm(engine: Engine, cfg: CheckpointConfig) -> None:
    try:
        engine.status(cfg)  # cached for the process: ``require`` reads it
    except Exception:  # noqa: BLE001, S110 (not logged: a line here would load the logger in
        pass  # the pause; ``require`` checks again where it is needed and says why it fails)
