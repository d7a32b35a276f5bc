"""Work a wrapper starts early, in the background, so that it is done before it is needed.

Role: a wrapper that restores a workload (a resume, a failover, a Slurm job requeued onto
another node, a plain move) is inside the workload's pause from its first instant, and two
things it needs were done in line: the engine's check (for CRIU ``criu --version`` and
``criu check``: about 50 ms, nearly all of it waiting on the kernel) and the loading of
structlog for its first log line (about 50 ms of CPU, paid in the middle of the restore by
the line that says the tree was restored, before the tree runs). Both start here in a
thread as soon as the wrapper knows its engine; the restore's own waits (the CRIU process,
the store) then cover them.

Limits: the thread only warms caches; what it finds is asked for again where it is needed
(``Engine.require``, whose CRIU check waits for one in flight rather than run twice:
``core.checkpoint.criu_setup.criu_status``), so a failure here changes nothing but the
timing. It saves the most where the wrapper waits (two CPUs or more); on one CPU the work
is the same, only earlier.
"""

from __future__ import annotations

import threading

from core import logs
from core.checkpoint.engine import Engine
from core.config import CheckpointConfig

log = logs.get_logger(__name__)


def start(engine: Engine, cfg: CheckpointConfig) -> threading.Thread:
    """Check ``engine`` and load the logger in a daemon thread; returns it (for tests).
    Called as early as the engine is known: by ``clawpoint run`` in the foreground before
    it builds the service (``core.service.warm_up``), by a detached wrapper before it
    imports the supervisor, and by the supervisor (nothing left to do by then). The engine
    is got by the caller: importing in two threads at once can meet a circular import
    half done."""
    thread = threading.Thread(target=_warm, args=(engine, cfg), daemon=True, name="warm-up")
    thread.start()
    return thread


def _warm(engine: Engine, cfg: CheckpointConfig) -> None:
    try:
        engine.status(cfg)  # cached for the process: ``require`` reads it
    except Exception as exc:  # noqa: BLE001 (the real check runs again where needed)
        log.debug("wrapper.warm_up_failed", error=str(exc))
    logs.load()
