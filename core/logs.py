"""structlog setup: JSON lines to stderr (never stdout: the stdio MCP server owns stdout).

Role: the one place clawpoint's modules get a logger from (``logs.get_logger(__name__)``)
and the one place logging is configured.

Why a proxy: importing structlog costs about 50 ms of CPU (it imports Rich and asyncio at
import), paid by every ``clawpoint`` command even though a read command logs nothing. A
module's logger is therefore a small proxy that imports and configures structlog the first
time something is logged through it. ``configure`` (the CLI, the MCP server) and
``configure_console`` (the wrapper, whose start is inside a restore's pause) only record
what they ask for until then.

A line below the level ``configure`` asked for is dropped by the proxy itself, as
structlog's filtering logger would drop it, so a command whose only lines are below the
level (``watch --once`` on a host without NVML says so at INFO) never loads structlog.

Limits: the proxy forwards attribute access (``info``, ``warning``, ``bind``...) to the real
structlog logger; ``isinstance`` checks against structlog's classes see the proxy. Only the
plain level methods are dropped early; anything else (``bind``, ``log``) loads structlog.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

# What ``configure`` or ``configure_console`` asked for: ("json", level) or ("console", 0);
# None: not configured (structlog's defaults). ``_applied``: what structlog was last given.
_wanted: tuple[str, int] | None = None
_applied: tuple[str, int] | None = None


class _Stderr:
    """Whatever sys.stderr is at write time (test runners and daemons swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str | None = None) -> None:
    """JSON lines to stderr at ``level`` (else ``CLAWPOINT_LOG_LEVEL``, else WARNING).

    Applied at once when structlog is already loaded (to loggers used from then on: one
    that has logged keeps its configuration), else when the first line is logged."""
    name = (level or os.environ.get("CLAWPOINT_LOG_LEVEL") or "WARNING").upper()
    number = getattr(logging, name, logging.WARNING)
    _want(("json", number))
    _route_stdlib_logging(number)


class _JsonLines(logging.Handler):
    """Libraries' standard-library log records (the MCP SDK's, uvicorn's) as the same JSON
    lines as ours, to the stderr of the moment."""

    def emit(self, record: logging.LogRecord) -> None:
        import json
        from datetime import UTC, datetime

        line = {
            "event": record.getMessage(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(),
        }
        if record.exc_info:
            line["exception"] = logging.Formatter().formatException(record.exc_info)
        try:
            sys.stderr.write(json.dumps(line, default=str) + "\n")
        except (OSError, ValueError):  # stderr closed: nowhere to say it
            pass


def _route_stdlib_logging(level: int) -> None:
    """Give the root logger our JSON handler (once) at ``level``: a library that configures
    logging only when nothing has (the MCP SDK installs a Rich console handler at INFO with
    ``logging.basicConfig``) then leaves it alone."""
    root = logging.getLogger()
    if not any(isinstance(h, _JsonLines) for h in root.handlers):
        root.addHandler(_JsonLines())
    root.setLevel(level)


def configure_console() -> None:
    """structlog's own readable lines, every level, to the stderr of the moment: the
    wrapper's (its stderr is the workload's log file, read by people)."""
    _want(("console", 0))


def _want(wanted: tuple[str, int]) -> None:
    global _wanted, _applied
    _wanted = wanted
    _applied = None  # configure again even if unchanged (another caller may have)
    if "structlog" in sys.modules:
        _apply()


def _apply() -> Any:
    """structlog, imported and configured as last asked."""
    global _applied
    import structlog

    if _wanted is not None and _applied != _wanted:
        kind, level = _wanted
        if kind == "console":
            structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
        else:
            structlog.configure(
                processors=[
                    structlog.contextvars.merge_contextvars,
                    structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                    structlog.processors.JSONRenderer(),
                ],
                wrapper_class=structlog.make_filtering_bound_logger(level),
                logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
                cache_logger_on_first_use=True,
            )
        _applied = _wanted
    return structlog


# structlog's level of each method of its filtering bound logger (``exception`` logs at
# error), the methods a line below the configured level goes to.
_METHOD_LEVELS = {
    "debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
    "warn": logging.WARNING, "error": logging.ERROR, "exception": logging.ERROR,
    "critical": logging.CRITICAL, "fatal": logging.CRITICAL,
}  # fmt: skip


def _dropped(*args: Any, **kwargs: Any) -> None:
    """A line below the configured level: what structlog's filtering logger does with it."""


class Logger:
    """A structlog logger made on first use (see the module's docstring)."""

    __slots__ = ("_name", "_real")

    def __init__(self, name: str | None) -> None:
        self._name = name
        self._real: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._real is None:
            level = _METHOD_LEVELS.get(attr)
            json_level = _wanted[1] if _wanted is not None and _wanted[0] == "json" else None
            if level is not None and json_level is not None and level < json_level:
                return _dropped
            structlog = _apply()
            self._real = structlog.get_logger(self._name) if self._name else structlog.get_logger()
        return getattr(self._real, attr)


def get_logger(name: str | None = None) -> Any:
    """The logger of module ``name``: structlog's, loaded when it first logs."""
    return Logger(name)
