"""``core.logs``: loggers that load structlog with their first line, configured once.

Each case runs in a fresh interpreter (structlog's configuration is process-wide, and what
is pinned is what a process has loaded): nothing loads structlog before a line is logged,
the wrapper's modules included (a restore's pause contains the wrapper's start); then the
CLI's JSON lines and the wrapper's readable ones go to stderr, never stdout, at the level
asked for.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_nothing_loads_structlog_until_a_line_is_logged() -> None:
    proc = _python(
        """
        import sys
        import core.wrapper.__main__, core.wrapper.supervisor, core.service.facade
        from core import logs
        logs.configure("INFO")
        log = logs.get_logger("clawpoint.test")
        assert "structlog" not in sys.modules, "loaded before any line"
        log.info("first.line")
        assert "structlog" in sys.modules
        """
    )
    assert proc.returncode == 0, proc.stderr


def test_configure_writes_json_lines_to_stderr_at_the_level_asked() -> None:
    proc = _python(
        """
        from core import logs
        log = logs.get_logger("clawpoint.test")
        logs.configure("INFO")
        log.debug("not.shown")
        log.info("shown", answer=42)
        logs.configure("ERROR")  # configured again once loaded: loggers made from now on
        later = logs.get_logger("clawpoint.later")
        later.warning("filtered.now")
        later.error("still.shown")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    lines = [json.loads(line) for line in proc.stderr.splitlines()]
    assert [(r["event"], r["level"]) for r in lines] == [
        ("shown", "info"),
        ("still.shown", "error"),
    ]
    assert lines[0]["answer"] == 42 and "timestamp" in lines[0]


def test_configure_console_writes_readable_lines_of_every_level_to_stderr() -> None:
    proc = _python(
        """
        from core import logs
        logs.configure_console()
        logs.get_logger("clawpoint.wrapper").debug("wrapper.detail", pid=7)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert "wrapper.detail" in proc.stderr and "pid=7" in proc.stderr


def test_a_line_below_the_level_loads_nothing_and_says_nothing() -> None:
    """The CLI's default level is WARNING: an INFO line (``watch --once`` on a host without
    NVML says so) is dropped by the proxy, as structlog's filtering logger would drop it,
    without loading structlog; a WARNING line then loads it and is written."""
    proc = _python(
        """
        import sys
        from core import logs
        logs.configure()
        log = logs.get_logger("clawpoint.test")
        log.debug("below.debug"); log.info("below.info", n=1)
        assert "structlog" not in sys.modules, "loaded for a dropped line"
        log.warning("at.level")
        assert "structlog" in sys.modules
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert [json.loads(line)["event"] for line in proc.stderr.splitlines()] == ["at.level"]
