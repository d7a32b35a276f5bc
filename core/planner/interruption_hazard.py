"""Interruption hazard: a rate that may change with the age of a run, and its estimate.

Role: the input of the checkpoint-interval model (``core.planner.checkpoint_interval``). A
``Hazard`` is a piecewise-constant rate of interruption (per hour) over the age of the
current run (hours since the workload last started or was restored): one bin is a constant
rate (exponential inter-failure times), several bins describe a rate that changes with age,
e.g. spot capacity that is reclaimed again soon after it came back, or a node that fails in
bursts. ``estimate_hazard`` builds one from the history of past runs (``RunSpan``: how long
each ran and whether it ended in an interruption), shrunk towards the pooled rate where a
bin has seen little, so that a few observations never give a zero or an extreme rate.

``learned_mtbf_h`` is the constant-rate estimate the checkpoint economics use for a class of
nodes (a backend's spot or on-demand ones) from what the watch loop saw there
(``core.state.interruptions``), starting from the configured guess.

Limits: the age is the only covariate (price, time of day and a notice are not); bins are
fixed (``DEFAULT_EDGES_H``, log-spaced from 5 minutes to 32 hours); a run whose end was not
an interruption (the history ends, or it was stopped) counts as exposure only (censored).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence

from pydantic import ConfigDict, Field, model_validator

from core import errors
from core.schema_base import Model

# Bin edges over a run's age (hours): short bins early, where reclaims cluster, long ones
# late, where a run that survived is quiet and there is little data.
DEFAULT_EDGES_H: tuple[float, ...] = (0, 1 / 12, 1 / 6, 1 / 3, 0.5, 1, 2, 4, 8, 16, 32)
# A bin's rate is (events + PRIOR_EVENTS) / (exposure + PRIOR_EVENTS / pooled rate): with
# no data a bin has the pooled rate, with much data its own.
PRIOR_EVENTS = 1.0


class RunSpan(Model):
    """One past run: how long it ran (hours) and whether an interruption ended it."""

    model_config = ConfigDict(frozen=True)

    hours: float = Field(ge=0, allow_inf_nan=False)
    interrupted: bool


class Hazard(Model):
    """Interruptions per hour over a run's age: ``rates_per_h[i]`` from ``edges_h[i]`` to
    ``edges_h[i + 1]`` (the last rate holds for ever). ``edges_h`` starts at 0."""

    model_config = ConfigDict(frozen=True)

    edges_h: tuple[float, ...] = (0.0,)
    rates_per_h: tuple[float, ...]

    @model_validator(mode="after")
    def _check(self) -> Hazard:
        e, r = self.edges_h, self.rates_per_h
        hint = "Give edges starting at 0, increasing, one rate (>= 0 per hour) per edge."
        if len(e) != len(r) or not e or e[0] != 0:
            raise errors.InvalidInput(
                f"hazard has {len(e)} edges and {len(r)} rates; edges must start at 0",
                hint=hint,
            )
        if any(not math.isfinite(x) for x in (*e, *r)) or any(
            b <= a for a, b in itertools.pairwise(e)
        ):
            raise errors.InvalidInput("hazard edges must be finite and increasing", hint=hint)
        if any(x < 0 for x in r):
            raise errors.InvalidInput(f"hazard rates {r} include a negative one", hint=hint)
        return self

    @classmethod
    def constant(cls, rate_per_h: float) -> Hazard:
        return cls(rates_per_h=(rate_per_h,))

    @classmethod
    def from_mtbf(cls, mtbf_h: float) -> Hazard:
        """A constant hazard from a mean time between failures (hours, > 0)."""
        if not (math.isfinite(mtbf_h) and mtbf_h > 0):
            raise errors.InvalidInput(
                f"MTBF {mtbf_h!r} h must be a finite number of hours above 0",
                hint="Give the mean time between interruptions in hours, e.g. 24.",
            )
        return cls.constant(1.0 / mtbf_h)

    @property
    def is_constant(self) -> bool:
        return len(set(self.rates_per_h)) == 1

    def rate_at(self, age_h: float) -> float:
        return self.rates_per_h[bisect.bisect_right(self.edges_h, max(age_h, 0.0)) - 1]

    def cumulative(self, age_h: float) -> float:
        """Expected interruptions from age 0 to ``age_h`` (the integral of the rate)."""
        total, e, r = 0.0, self.edges_h, self.rates_per_h
        for i, start in enumerate(e):
            if age_h <= start:
                break
            end = e[i + 1] if i + 1 < len(e) else math.inf
            total += r[i] * (min(age_h, end) - start)
        return total

    def mean_rate(self, from_h: float, to_h: float) -> float:
        """The average rate over ``[from_h, to_h]`` (the rate at ``from_h`` if empty)."""
        if to_h <= from_h:
            return self.rate_at(from_h)
        return (self.cumulative(to_h) - self.cumulative(from_h)) / (to_h - from_h)

    def mean_rate_over_time(self) -> float:
        """The long-run rate a constant-hazard model would use: 1 / mean run length, from
        the survival function of this hazard (infinite tail integrated in closed form)."""
        mean_h, e, r = 0.0, self.edges_h, self.rates_per_h
        surv = 1.0
        for i, start in enumerate(e):
            end = e[i + 1] if i + 1 < len(e) else math.inf
            if r[i] == 0:
                if math.isinf(end):
                    return 0.0
                mean_h += surv * (end - start)
                continue
            span = end - start
            mean_h += surv * (1 - math.exp(-r[i] * span)) / r[i]
            surv *= math.exp(-r[i] * span) if not math.isinf(span) else 0.0
        return 1.0 / mean_h if mean_h > 0 else math.inf


class HazardCounts(Model):
    """Interruptions and exposure (hours) per age bin: what ``estimate_hazard`` pools. Kept
    as a model so that a policy can add one run at a time (``add``)."""

    edges_h: tuple[float, ...] = DEFAULT_EDGES_H
    events: list[float] = Field(default_factory=list)
    exposure_h: list[float] = Field(default_factory=list)

    def model_post_init(self, _context: object) -> None:
        n = len(self.edges_h)
        self.events = self.events or [0.0] * n
        self.exposure_h = self.exposure_h or [0.0] * n

    def add(self, run: RunSpan) -> None:
        e = self.edges_h
        for i, start in enumerate(e):
            if run.hours <= start:
                break
            end = e[i + 1] if i + 1 < len(e) else math.inf
            self.exposure_h[i] += min(run.hours, end) - start
        if run.interrupted:
            i = bisect.bisect_left(e, run.hours) - 1  # an end exactly on an edge: bin below
            self.events[max(i, 0)] += 1

    def hazard(self, prior_rate_per_h: float) -> Hazard:
        """The shrunk per-bin estimate; the pool itself starts from ``prior_rate_per_h``
        (one pseudo-interruption at that rate), so an empty history gives the prior."""
        if not (math.isfinite(prior_rate_per_h) and prior_rate_per_h > 0):
            raise errors.InvalidInput(
                f"prior rate {prior_rate_per_h!r} per hour must be finite and above 0",
                hint="Give a prior interruption rate, e.g. 1/24 for one a day.",
            )
        pooled = (sum(self.events) + PRIOR_EVENTS) / (
            sum(self.exposure_h) + PRIOR_EVENTS / prior_rate_per_h
        )
        rates = tuple(
            (ev + PRIOR_EVENTS) / (x + PRIOR_EVENTS / pooled)
            for ev, x in zip(self.events, self.exposure_h, strict=True)
        )
        return Hazard(edges_h=self.edges_h, rates_per_h=rates)


def estimate_hazard(
    runs: Iterable[RunSpan],
    *,
    prior_rate_per_h: float,
    edges_h: Sequence[float] = DEFAULT_EDGES_H,
) -> Hazard:
    """The age-dependent hazard seen in ``runs`` (see ``HazardCounts.hazard``)."""
    counts = HazardCounts(edges_h=tuple(edges_h))
    for run in runs:
        counts.add(run)
    return counts.hazard(prior_rate_per_h)


def learned_mtbf_h(prior_mtbf_h: float, events: int, watched_h: float) -> float:
    """The mean time between interruptions after watching ``watched_h`` node-hours and
    seeing ``events``: the posterior mean rate of a Poisson process under a gamma prior worth
    one interruption in ``prior_mtbf_h`` (the configured guess), as an MTBF. No history gives
    the prior; a long one its own rate; a short quiet one lengthens it only a little."""
    return (max(watched_h, 0.0) + prior_mtbf_h) / (max(events, 0) + 1.0)


def mtbf_basis(prior_mtbf_h: float, events: int, watched_h: float) -> str:
    """What ``learned_mtbf_h`` rests on, in a few words (for ``why``)."""
    if watched_h <= 0 and events <= 0:
        return f"MTBF {prior_mtbf_h:g} h as configured (nothing watched yet)"
    mtbf = learned_mtbf_h(prior_mtbf_h, events, watched_h)
    return (
        f"MTBF {mtbf:.3g} h: {events} interruption(s) in {watched_h:.3g} node-hours watched "
        f"and the configured {prior_mtbf_h:g} h"
    )
