"""What ``clawpoint run`` in the foreground starts before it builds the service.

Role: a foreground run restores its workload in this very process (a Slurm job's batch
script is one: ``exec clawpoint run``), so everything from the process's start to the
restored tree running is inside the workload's pause. Building the service and importing the
wrapper take a few hundred milliseconds of CPU; the engine's check (``criu check``, mostly a
wait on the kernel) need not wait for them: ``prepare_engine`` starts it in the background
(``core.wrapper.warm_up``) as soon as the engine is known.

Limits: it only warms caches of this process; the checks that decide still run where they
always did (``Engine.require``), and an unknown engine is refused there, not here.
"""

from __future__ import annotations

from core import errors
from core.config import Settings


def prepare_engine(settings: Settings, engine_name: str) -> None:
    """Start checking ``engine_name`` in the background."""
    from core.checkpoint import engine
    from core.wrapper import warm_up

    try:
        chosen = engine.get(engine_name)
    except errors.ClawpointError:
        return  # refused with its reason where the run needs it
    warm_up.start(chosen, settings.checkpoint)
