"""Which cases a fuzz run draws: one seed per commit, so a run is reproducible and each new
commit tries cases no earlier run tried.

The fuzz tests used to be derandomized: every run, on every machine, drew the very same
cases (74,000 MCP calls per suite run that could find nothing the first run had not).
Seeded by the commit under test, a run is still exactly reproducible (the same commit draws
the same cases; ``CLAWPOINT_FUZZ_SEED=N`` draws run N's anywhere), and the cases tried
accumulate over commits instead of repeating. Outside a git checkout the seed is 0.

A failing case is shrunk and printed by hypothesis as before; ``with_seed_note`` adds the
line that reproduces the whole run to the failure.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, seed, settings

ROOT = Path(__file__).resolve().parents[2]


@cache
def fuzz_seed() -> int:
    """``CLAWPOINT_FUZZ_SEED`` if set, else the first 48 bits of the checked-out commit."""
    given = os.environ.get("CLAWPOINT_FUZZ_SEED", "").strip()
    if given:
        try:
            return int(given)
        except ValueError:
            raise ValueError(f"CLAWPOINT_FUZZ_SEED={given!r} is not an integer") from None
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip()  # fmt: skip
        return int(head[:12], 16)
    except (OSError, subprocess.SubprocessError, ValueError):
        return 0


def fuzzed(max_examples: int) -> Callable[[Any], Any]:
    """Hypothesis settings for a fuzz test (this run's seed, no example database, no
    deadline: a busy machine is not a bug), as one decorator over ``@given``."""

    def wrap(test: Any) -> Any:
        configured = settings(
            max_examples=max_examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )(test)
        return seed(fuzz_seed())(configured)

    return wrap


@contextmanager
def with_seed_note() -> Iterator[None]:
    """Add how to draw this run's cases again to a failure raised inside."""
    try:
        yield
    except BaseException as failure:
        failure.add_note(
            f"fuzz seed {fuzz_seed()}: CLAWPOINT_FUZZ_SEED={fuzz_seed()} draws these cases again"
        )
        raise
