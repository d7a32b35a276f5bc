"""Parse the short durations people type in config files and commands ("90s", "30m", "2h", "7d").

Pure functions, no I/O. Limits: one unit per value (no "1h30m"); at most 365 days, because
a standing approval or an approval window longer than that is almost certainly a typo.

A workload's periodic checkpoint interval, as ``set_checkpoint_interval`` takes it, is such
a duration between ``MIN_INTERVAL_S`` and ``MAX_INTERVAL_S``, or ``off`` (no periodic
checkpoints), or ``auto`` (the workload's wrapper re-times its checkpoints itself, to the
interval that pays: ``core.wrapper.auto_interval``): ``Interval`` is that argument as a
pydantic field, kept in its shortest spelling ("600s" becomes "10m"), and
``interval_seconds`` reads a duration or off back.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from core import errors

# [0-9], not \d: "٣h" must not pass for "3h" (str.isdigit and \d accept every script's digits).
_DURATION_RE = re.compile(r"^\s*([0-9]{1,12})\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_DURATION = timedelta(days=365)


def parse_duration(value: str | int | float | timedelta, *, what: str = "duration") -> timedelta:
    """A positive timedelta; plain numbers are seconds. InvalidInput names ``what``."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):  # bool is an int subclass: True must not mean one second
        raise errors.InvalidInput(
            f"{what}: expected a duration like 30m, got {value!r}",
            hint="write a number followed by s, m, h, d or w, e.g. 15m or 2h",
        )
    elif isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION_RE.match(str(value).lower())
        if not match:
            raise errors.InvalidInput(
                f"{what}: {value!r} is not a duration",
                hint="write a number followed by s, m, h, d or w, e.g. 15m, 2h or 7d",
            )
        seconds = float(int(match.group(1)) * _UNITS[match.group(2)])
    # Compare before building a timedelta: a huge value ("99999999999d", 1e300, inf) must be
    # refused here, not overflow in datetime arithmetic later; NaN fails both comparisons.
    if not 0 < seconds <= MAX_DURATION.total_seconds():
        raise errors.InvalidInput(
            f"{what}: {value!r} must be more than 0 and at most 365 days",
            hint="pick a duration such as 15m, 2h or 7d",
        )
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """The inverse for display: the largest unit that divides exactly ("2h", "90s")."""
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


# A periodic checkpoint more often than this would keep a workload paused for much of its
# life; less often than daily is what "off" is for.
MIN_INTERVAL_S = 2.0
MAX_INTERVAL_S = 86400.0
OFF = "off"
AUTO = "auto"
# Worded to cost no more tokens than before auto came (tests/mcp/test_token_budgets.py).
INTERVAL_HELP = f"30s, 10m, 2h... ({MIN_INTERVAL_S:g}s to 1d), {AUTO} or {OFF}"


def interval_text(seconds: float | None) -> str:
    """An interval as it is written: ``off`` for None, else its largest exact unit."""
    if seconds is None:
        return OFF
    if seconds != int(seconds):
        return f"{seconds:g}s"
    return format_duration(timedelta(seconds=seconds))


def _interval(value: str) -> str:
    """``value`` in its shortest spelling, else a pydantic error (the caller's argument
    error) that says what is wrong and how to write it."""
    text = value.strip().lower()
    if text in (OFF, AUTO):
        return text
    try:
        seconds = parse_duration(
            int(text) if text.isascii() and text.isdigit() else text, what="every"
        ).total_seconds()
    except errors.InvalidInput:
        # Zero parses as no duration at all; it reads as "as short as can be".
        seconds = 0.0 if re.fullmatch(r"0+\s*[smhdw]?", text) else math.nan
    if seconds < MIN_INTERVAL_S:
        problem = f"is shorter than {MIN_INTERVAL_S:g}s, the shortest interval"
    elif seconds > MAX_INTERVAL_S:
        problem = "is longer than 1d, the longest interval"
    elif seconds != seconds:  # NaN: not a duration
        problem = "is not a duration"
    else:
        return interval_text(seconds)
    raise PydanticCustomError(
        "checkpoint_interval",
        "{got} {problem}: write a duration such as 30s, 10m or 2h, auto for the interval that "
        "pays, or off for no periodic checkpoints",
        {"got": repr(value), "problem": problem},
    )


Interval = Annotated[str, AfterValidator(_interval)]


def interval_seconds(text: str) -> float | None:
    """The seconds of an ``Interval`` that is not ``auto`` (None: off)."""
    return None if text == OFF else parse_duration(text, what="every").total_seconds()
