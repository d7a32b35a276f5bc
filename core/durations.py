"""Parse the short durations people type in config files and commands ("90s", "30m", "2h", "7d").

Pure functions, no I/O. Limits: one unit per value (no "1h30m"); at most 365 days, because
a standing approval or an approval window longer than that is almost certainly a typo.
"""

from __future__ import annotations

import re
from datetime import timedelta

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
