"""When the wrapper's next periodic checkpoint is due: ``PeriodicClock``.

The interval is the workload's ``checkpoint_every`` (None: no periodic checkpoints). It may
change while the workload runs (``set_checkpoint_interval``, through the control socket):
the next checkpoint is then due the new interval after this wrapper's last checkpoint, or
from the change when it has taken none yet; a shorter interval than the time since the last
checkpoint makes one due at once. The main loop counts from its start and from the end of
each checkpoint (``restart``) and waits ``wait_s``; the desk's threads call ``set``.

Limits: monotonic time of this process; a checkpoint an earlier wrapper of the workload took
(before a restore) does not count.
"""

from __future__ import annotations

import threading
import time


class PeriodicClock:
    def __init__(self, every_s: float | None) -> None:
        self._lock = threading.Lock()
        self._every = every_s
        self._since = time.monotonic()  # what the interval counts from
        self._checkpointed = False  # whether ``_since`` is the end of a checkpoint

    def restart(self, *, checkpointed: bool) -> None:
        """Count from now: the main loop starts, or a checkpoint (``checkpointed``) ended."""
        with self._lock:
            self._since = time.monotonic()
            self._checkpointed = self._checkpointed or checkpointed

    def set(self, every_s: float | None) -> float | None:
        """A new interval (None: off); the seconds until the next checkpoint is due."""
        with self._lock:
            self._every = every_s
            if not self._checkpointed:
                self._since = time.monotonic()
            wait = self._wait_s()
        return None if wait is None else round(wait, 1)

    @property
    def every_s(self) -> float | None:
        """The interval in force (None: off)."""
        with self._lock:
            return self._every

    def wait_s(self) -> float | None:
        """Seconds until the next periodic checkpoint (0: due now); None: none is due."""
        with self._lock:
            return self._wait_s()

    def _wait_s(self) -> float | None:
        if not self._every:
            return None
        return max(0.0, self._since + self._every - time.monotonic())
