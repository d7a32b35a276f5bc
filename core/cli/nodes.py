"""``clawpoint nodes``: list nodes, and the node actions of the catalogue (``nodes cordon``,
``nodes undrain``), built by ``core.cli.acting`` like every action command."""

from __future__ import annotations

from typing import Annotated

import typer

from core.cli import acting, output
from core.cli.common import JsonOpt, service

nodes_app = typer.Typer(help="List nodes; cordon a node, or return one to service.")
COMMANDS = {"nodes": nodes_app}


@nodes_app.callback(invoke_without_command=True)
def nodes(
    ctx: typer.Context,
    json_: JsonOpt = False,
    backend: Annotated[str | None, typer.Option(help="Only this backend's nodes.")] = None,
) -> None:
    """List nodes with price, spot flag, health and the workloads on them."""
    if ctx.invoked_subcommand is not None:
        return  # `nodes undrain ...`: the subcommand does the work
    items = service().nodes(backend)
    if json_:
        return output.emit_json(items)
    output.table(
        "Nodes",
        ["id", "state", "health", "spot", "$/h", "labels", "workloads"],
        [
            (
                n.id,
                n.state,
                n.health.value,
                "yes" if n.spot else "no",
                f"{n.price_per_hour:.2f}",
                ",".join(f"{k}={v}" for k, v in n.labels.items()),
                ", ".join(n.workloads),
            )
            for n in items
        ],
    )


acting.add_actions(nodes_app, ("nodes",))
