"""``clawpoint watch``: the heartbeat. Quiet when nothing changed; the exit code says what it found.

Mount with ``app.command("watch")(watch_command)`` in ``core.cli.app``. Two modes share one
pass (``core.watch.loop.watch_once``):

- ``--once``: one pass, then exit 0 (nothing needs anyone), 20 (something needs a person or
  an agent: an approval waiting, a risk watch cannot fix), 21 (it acted) or 1 (something
  failed); 2 for bad options.
- ``--every 30s``: a pass every interval (1 s to 24 h) until SIGTERM (exit 0) or SIGINT
  (exit 130); a pass in progress is finished before a SIGTERM is obeyed.

Output: one line per *new* finding (``acted: ...``, ``attention: ...``, ``error: ...``) and
nothing when nothing changed since the previous pass (what was already reported is kept in
the state database, so successive ``--once`` runs stay quiet too). ``--json``: one JSON
object per pass on one line, flushed, so a stream reader can match lines.
"""

from __future__ import annotations

import json
import math
import signal
import sys
import threading
from types import FrameType
from typing import Annotated

import typer

from core import errors, logs
from core.cli import output
from core.config import load_settings
from core.service.facade import bootstrap
from core.signals.sla import parse_duration_s
from core.watch.loop import watch, watch_once
from core.watch.report import WatchReport

MIN_EVERY_S = 1.0
MAX_EVERY_S = 86400.0


def parse_every(text: str) -> float:
    """``5s`` / ``30s`` / ``5m`` / ``1h`` -> seconds, between 1 s and 24 h; else InvalidInput."""
    parsed = parse_duration_s(text)
    if parsed is None or not math.isfinite(parsed) or not MIN_EVERY_S <= parsed <= MAX_EVERY_S:
        raise errors.InvalidInput(
            f"--every {text!r} is not a poll interval between 1s and 24h",
            hint="give a duration such as 5s, 30s or 5m",
        )
    return parsed


def _emit(report: WatchReport, *, as_json: bool) -> None:
    if as_json:
        body = report.model_dump(mode="json") | {
            "changed": report.changed,
            "exit_code": report.exit_code,
        }
        sys.stdout.write(json.dumps(body, separators=(",", ":"), default=str) + "\n")
    else:
        for line in report.lines():
            sys.stdout.write(line + "\n")
    sys.stdout.flush()


def watch_command(
    every: Annotated[
        str | None,
        typer.Option("--every", help="Run a pass every interval (1s-24h), e.g. 5s, 30s, 5m."),
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="One pass, then exit with its code.")
    ] = False,
    json_: Annotated[
        bool, typer.Option("--json", help="One JSON object per pass, on one line.")
    ] = False,
) -> None:
    """Watch signals (spot notices, GPU and node health, SLA, queues), act where a standing
    approval covers it, and report what needs a person."""
    logs.configure()  # structlog to stderr: stdout is for the report only
    try:
        if once and every is not None:
            raise errors.InvalidInput(
                "--once and --every are two modes; choose one",
                hint="--once for a scheduled check, --every 30s for a long-running watch",
            )
        interval = parse_every(every) if every is not None else None
        settings = load_settings()
        service = bootstrap(settings)
        if once:
            report = watch_once(service)
            _emit(report, as_json=json_)
            raise typer.Exit(report.exit_code)
        stop = threading.Event()

        def on_term(signum: int, frame: FrameType | None) -> None:
            stop.set()

        previous = signal.signal(signal.SIGTERM, on_term)
        try:
            watch(
                service,
                every_s=interval if interval is not None else settings.signals.poll_interval_s,
                on_report=lambda r: _emit(r, as_json=json_),
                stop=stop,
            )
        finally:
            signal.signal(signal.SIGTERM, previous)
        raise typer.Exit(0)
    except errors.ClawpointError as exc:
        output.render_error(exc, as_json=json_)
        raise typer.Exit(exc.exit_code) from exc
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command("watch")(watch_command)
