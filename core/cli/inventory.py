"""``clawpoint workloads`` and ``checkpoints``: what runs and what was saved, from the service.

Read commands: they change nothing, but ``checkpoints --reseal`` (signs an old checkpoint
again). ``clawpoint nodes`` lives in ``core.cli.nodes`` with the node actions.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from core.cli import output
from core.cli.common import JsonOpt, person, service
from core.model import CheckpointStatus

workloads_app = typer.Typer(add_completion=False)
checkpoints_app = typer.Typer(add_completion=False)
COMMANDS = {"workloads": workloads_app, "checkpoints": checkpoints_app}


@workloads_app.command()
def workloads(
    json_: JsonOpt = False, backend: Annotated[str | None, typer.Option()] = None
) -> None:
    """List workloads and their state.

    --json: a workload with a timed checkpoint adds checkpoint_interval (what pays)."""
    if json_:
        from core.service.economics import workload_rows

        return output.emit_json(workload_rows(service(), backend))
    items = service().workloads(backend)
    output.table(
        "Workloads",
        ["id", "state", "node", "engine", "pid", "last checkpoint", "message"],
        [
            (w.id, w.state.value, w.node, w.engine, w.pid, w.last_checkpoint, w.message)
            for w in items
        ],
    )


@checkpoints_app.command()
def checkpoints(
    workload: Annotated[str | None, typer.Argument(help="Workload id, e.g. local:train-1")] = None,
    json_: JsonOpt = False,
    reseal: Annotated[
        str | None,
        typer.Option(
            help="Sign an untrusted checkpoint of yours again (BACKEND:WORKLOAD@SEQ), one "
            "written before checkpoints were signed: only if nobody else could have written "
            "to it (docs/security.md)",
        ),
    ] = None,
) -> None:
    """List checkpoints (of one workload, or all), newest first. Untrusted ones (manifest
    not authentic) and corrupt ones are never restored; the reason says why."""
    if reseal is not None:
        done = service().reseal_checkpoint(reseal, principal=person())
        if json_:
            return output.emit_json(done)
        output.plain(f"{reseal} is signed again: {done.status.value}")
        return None
    items = service().checkpoints(workload)
    if json_:
        return output.emit_json(items)
    from core.timings import DumpTimings

    output.table(
        "Checkpoints",
        ["id", "engine", "node", "created (UTC)", "size MiB", "dump s", "status"],
        [
            (
                c.id,
                c.engine,
                c.node,
                f"{c.created_at:%Y-%m-%d %H:%M:%S}",
                f"{c.size_bytes / 2**20:.1f}",
                _fmt(DumpTimings.of(c).dump_s),
                c.status.value,
            )
            for c in items
        ],
    )
    for c in items:
        if c.status in (CheckpointStatus.UNTRUSTED, CheckpointStatus.CORRUPT) and c.reason():
            output.plain(f"{c.id} is {c.status.value}: {c.reason()}")


def _fmt(v: Any) -> str:
    return f"{float(v):.2f}" if isinstance(v, int | float) else ""
