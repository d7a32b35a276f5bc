"""structlog setup: JSON lines to stderr (never stdout: the stdio MCP server owns stdout)."""

from __future__ import annotations

import logging
import os
import sys

import structlog


class _Stderr:
    """Whatever sys.stderr is at write time (test runners and daemons swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str | None = None) -> None:
    name = (level or os.environ.get("CLAWPOINT_LOG_LEVEL") or "WARNING").upper()
    numeric = getattr(logging, name, logging.WARNING)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
