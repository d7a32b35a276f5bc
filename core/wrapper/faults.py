"""Fault injection for the wrapper's tests: environment switches, never set in production.

- ``CLAWPOINT_TEST_DROP_REPLY`` = 1: a checkpoint or terminate request's connection is closed
  without its answer (a lost answer);
- ``CLAWPOINT_TEST_REPLY_DELAY_S`` = seconds to wait before writing that answer (a slow one);
- ``CLAWPOINT_TEST_DIE_AFTER_HANDOFF`` = 1: a source wrapper SIGKILLs itself right after it
  handed its workload to a standby, before publishing the checkpoint;
- ``CLAWPOINT_TEST_DIE_IN_TAKEOVER`` = 1: a standby SIGKILLs itself once it holds the
  workload's lock, before it restores;
- ``CLAWPOINT_TEST_STANDBY_DEAF`` = 1: a standby for another node announces itself, then
  listens to nothing (a hung one: its rendezvous says "waiting", its port refuses).

Limits: read from the wrapper's own environment (inherited from whoever started it).
"""

from __future__ import annotations

import os
import signal
import time

from core import logs

log = logs.get_logger(__name__)


def fault_on(name: str) -> bool:
    """Is the fault ``name`` switched on? A ``..._S`` one sleeps its value (at most 60 s)
    and says True."""
    value = os.environ.get(name, "")
    if not value:
        return False
    if name.endswith("_S"):
        try:
            delay = float(value)
        except ValueError:
            return False
        log.warning("control.test_hook_delaying_reply", seconds=delay)
        time.sleep(max(0.0, min(delay, 60.0)))
        return True
    return value == "1"


def die_if(name: str) -> None:
    """SIGKILL this process when the fault ``name`` is on (a fault matrix's death). A
    container's PID 1 ignores its own SIGKILL (the kernel protects a PID namespace's init
    from signals sent inside it): it then exits at once, running nothing of its own."""
    if fault_on(name):
        os.kill(os.getpid(), signal.SIGKILL)
        os._exit(137)
