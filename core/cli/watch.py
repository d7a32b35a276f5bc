"""``clawpoint watch``: the scheduled check. Quiet when all is well; exit code says what happened.

Mount with ``app.command("watch")(watch_command)`` in ``core.cli.app``. ``--once`` runs one
pass and exits with 0 (nothing new), 20 (approvals waiting), 21 (actions executed) or 1 (an
error); without it, it polls every ``--every`` (default: ``signals.poll_interval_s``) until
interrupted. Output: nothing when nothing changed, else one line per pass (or the report as
JSON with ``--json``, every pass).
"""

from __future__ import annotations

from typing import Annotated

import typer

from core import errors, logs
from core.cli import output
from core.config import load_settings
from core.service.facade import bootstrap
from core.signals.sla import parse_duration_s
from core.watch.loop import WatchReport, watch, watch_once


def _emit(report: WatchReport, *, as_json: bool) -> None:
    if as_json:
        output.emit_json(report.model_dump(mode="json") | {"exit_code": report.exit_code})
        return
    line = report.summary()
    if line:
        output.plain(line)


def watch_command(
    every: Annotated[
        str | None, typer.Option("--every", help="Poll interval, e.g. 5s, 1m (default 5s).")
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="One pass, then exit with its code.")
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Watch signals (spot notices, GPU health, node health, SLA, queues) and act on them."""
    logs.configure()  # structlog to stderr: stdout is for the report only
    try:
        settings = load_settings()
        interval = settings.signals.poll_interval_s
        if every is not None:
            parsed = parse_duration_s(every)
            if parsed is None or parsed <= 0:
                raise errors.InvalidInput(
                    f"--every {every!r} is not a duration", hint="use e.g. 5s, 30s, 5m"
                )
            interval = parsed
        service = bootstrap(settings)
        if once:
            report = watch_once(service)
            _emit(report, as_json=json_)
            raise typer.Exit(report.exit_code)
        watch(service, every_s=interval, on_report=lambda r: _emit(r, as_json=json_))
    except errors.ClawpointError as exc:
        output.render_error(exc, as_json=json_)
        raise typer.Exit(1) from exc
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command("watch")(watch_command)
