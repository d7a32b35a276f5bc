"""``clawpoint pools``: list node pools, and ``pools scale`` (the catalogue's ``scale_pool``,
built by ``core.cli.acting`` like every action command)."""

from __future__ import annotations

from typing import Annotated

import typer

from core.cli import acting, output
from core.cli.common import JsonOpt, service

pools_app = typer.Typer(help="List node pools; grow or shrink one.")
COMMANDS = {"pools": pools_app}


@pools_app.callback(invoke_without_command=True)
def pools(
    ctx: typer.Context,
    json_: JsonOpt = False,
    backend: Annotated[str | None, typer.Option(help="Only this backend's pools.")] = None,
) -> None:
    """List pools: size (nodes up) within min..max, price per node, idle and released nodes."""
    if ctx.invoked_subcommand is not None:
        return  # `pools scale ...`: the subcommand does the work
    items = service().pools(backend)
    if json_:
        return output.emit_json(items)
    output.table(
        "Pools",
        ["id", "size", "min..max", "spot", "$/h per node", "idle", "released"],
        [
            (
                p.id,
                str(p.size),
                f"{p.min_size}..{p.max_size}",
                "yes" if p.spot else "no",
                f"{p.price_per_hour:.2f}",
                ", ".join(p.idle),
                ", ".join(p.released),
            )
            for p in items
        ],
    )


acting.add_actions(pools_app, ("pools",))
