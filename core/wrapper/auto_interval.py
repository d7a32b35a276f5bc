"""The ``auto`` checkpoint interval: the wrapper re-times its periodic checkpoints itself.

Role: a workload whose interval is ``auto`` carries an ``AutoInterval`` (its node's hazard
as a mean time between interruptions, and the bounds ``[economics] min_interval_s`` ..
``max_interval_s``; ``for_node`` resolves it from the configuration). After each checkpoint
its wrapper makes, ``AutoTimer.measured`` pools the pause and wall time of the newest ones
it made (``CheckpointCost.from_checkpoints``, a median) and returns the interval that pays
now, computed by the one pure model ``core.planner.checkpoint_interval.recommend`` (the
same ``get_workload`` shows); ``advise`` is that computation for any list of checkpoints
(the plan's first recommendation, from the store). The interval never leaves the bounds.

Limits: the hazard is a constant rate (Young/Daly): the configured one, learned from what
the watch loop saw on that class of nodes where the caller passes it; a checkpoint an earlier
wrapper of the workload made (before a restore) is not pooled: a restored wrapper starts
from the interval its record kept and re-times after its own first checkpoint. This module
is the one place below the planner that imports its pure interval model (pyproject's
import contract names the exception).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from core.config import EconomicsConfig
from core.model import CheckpointInfo
from core.planner.checkpoint_interval import (
    CheckpointCost,
    IntervalAdvice,
    IntervalBounds,
    recommend,
)
from core.planner.interruption_hazard import Hazard, learned_mtbf_h
from core.specs import AutoInterval
from core.state.interruptions import Tally
from core.wrapper.periodic import PeriodicClock

# The newest checkpoints whose costs are pooled (a median: one slow dump does not decide).
RECENT = 10


def for_node(economics: EconomicsConfig, *, spot: bool, seen: Tally | None = None) -> AutoInterval:
    """The auto interval's inputs on a spot or an on-demand node; ``seen``: what the watch
    loop saw on that class of nodes (``core.state.interruptions``), which the configured
    hazard is a prior for (``learned_mtbf_h``)."""
    prior = economics.spot_mtbf_h if spot else economics.on_demand_mtbf_h
    return AutoInterval(
        mtbf_h=learned_mtbf_h(prior, seen.events, seen.watched_h) if seen else prior,
        min_s=economics.min_interval_s,
        max_s=economics.max_interval_s,
    )


def advise(
    auto: AutoInterval, checkpoints: Sequence[CheckpointInfo], *, age_h: float = 0.0
) -> IntervalAdvice | None:
    """The interval that pays given ``checkpoints``' measured costs (None: none is timed)."""
    cost = CheckpointCost.from_checkpoints(checkpoints)
    if cost is None:
        return None
    bounds = IntervalBounds(min_s=auto.min_s, max_s=auto.max_s)
    return recommend(cost, Hazard.from_mtbf(auto.mtbf_h), age_h=age_h, bounds=bounds)


def clamp(auto: AutoInterval, every_s: float | None) -> float:
    """Where auto starts when nothing is measured: the interval in force within the bounds,
    else the shortest (auto only adds checkpoints where there were none)."""
    return auto.min_s if every_s is None else min(max(every_s, auto.min_s), auto.max_s)


class AutoTimer:
    """The interval of a wrapper's ``PeriodicClock`` and, when it is auto, the costs of the
    checkpoints the wrapper made, which re-time it. One lock: a new interval a request sets
    and a re-time after a checkpoint never interleave (the request wins, whichever ends)."""

    def __init__(self, clock: PeriodicClock, auto: AutoInterval | None) -> None:
        self.clock = clock
        self.auto = auto
        self._lock = threading.Lock()
        self._made: deque[CheckpointInfo] = deque(maxlen=RECENT)
        self._since = time.monotonic()  # the run's age counts from the wrapper's start

    def set(self, every_s: float | None, auto: AutoInterval | None) -> dict[str, Any]:
        """A new interval (None: off), auto or not; what the wrapper answers about it."""
        with self._lock:
            self.auto = auto
            said: dict[str, Any] = {
                "checkpoint_every": every_s,
                "next_in_s": self.clock.set(every_s),
            }
        return said | ({"auto": True} if auto else {})

    def status(self) -> dict[str, Any]:
        """What the wrapper's ``status`` says of its interval: the one in force, auto or not."""
        with self._lock:
            return {"checkpoint_every": self.clock.every_s, "auto": self.auto is not None}

    def recorded(self) -> dict[str, Any]:
        """The interval in force as the workload's row keeps it."""
        with self._lock:
            return {
                "checkpoint_every": self.clock.every_s,
                "checkpoint_auto": self.auto is not None,
            }

    @contextmanager
    def measured(self, info: CheckpointInfo) -> Iterator[dict[str, Any]]:
        """Pool ``info``; auto: re-time the clock to what pays now. Gives what the workload's
        row should record besides the checkpoint (``checkpoint_every``: auto's new interval)
        and holds the lock while the caller writes it: a request that sets another interval
        meanwhile is recorded after it, never overwritten."""
        with self._lock:
            self._made.append(info)
            advice = None
            if self.auto is not None:
                age_h = (time.monotonic() - self._since) / 3600
                advice = advise(self.auto, list(self._made), age_h=age_h)
            if self.auto is None or advice is None:
                yield {}
                return
            every = clamp(self.auto, advice.interval_s)
            self.clock.set(every)
            yield {"checkpoint_every": every}
