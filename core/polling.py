"""Wait for a condition by asking again: the one polling loop behind every "until it exists",
"until it is gone" and "until it answers" wait.

A bottom-floor module: it imports nothing of clawpoint, so every layer may use it (like
``core.durations``). The caller says what to ask (``check``), how long to keep asking and how
often; what a timeout means (an error, a fallback, a last look) stays with the caller.

Limits: polling, not notification: a condition that holds only between two calls is missed,
and one that comes true is seen up to ``every_s`` late (callers on a pause's critical path
poll finely). ``check`` runs on the calling thread and is never interrupted: a slow check
can overrun the deadline by its own duration.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(
    check: Callable[[], T],
    *,
    timeout_s: float,
    every_s: float,
    max_every_s: float | None = None,
) -> T | None:
    """Call ``check()`` until it returns something truthy, and return that; None once
    ``timeout_s`` has passed. ``check`` runs at least once (``timeout_s`` 0: exactly once),
    and its last call is at or after the deadline, so nothing that came true in the last
    interval is missed. Between calls it sleeps ``every_s``, doubled after each call up to
    ``max_every_s`` when that is given (a backoff for a wait that is usually long)."""
    deadline = time.monotonic() + timeout_s
    delay = every_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        if max_every_s is not None:
            delay = min(delay * 2, max_every_s)
