"""Durations people type ("90s", "30m", "2h"): the parser lives in ``core.durations`` (below
every layer, since config sections use it); this name stays for the guardrails' callers."""

from core.durations import MAX_DURATION, format_duration, parse_duration

__all__ = ["MAX_DURATION", "format_duration", "parse_duration"]
