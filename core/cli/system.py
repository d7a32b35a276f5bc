"""``clawpoint serve``, ``demo`` and ``config check``: clawpoint's own server, its demo and
its configuration. Each imports what it runs (the MCP server, the demo, the diagnostics)
only when called."""

from __future__ import annotations

from typing import Annotated

import typer

from core import errors
from core.cli import output
from core.cli.common import JsonOpt, settings

serve_app = typer.Typer(add_completion=False)
demo_app = typer.Typer(add_completion=False)
config_app = typer.Typer(help="Inspect and validate configuration.", no_args_is_help=True)
COMMANDS = {"serve": serve_app, "demo": demo_app, "config": config_app}


@serve_app.command()
def serve(
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP instead of stdio.")
    ] = False,
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default from config, 8765).")] = None,
    toolsets: Annotated[
        str | None,
        typer.Option(
            help="Serve these toolsets, comma-separated: inventory, signals, actions, "
            "approvals, runbooks, capacity; 'default' is all but capacity (the default)."
        ),
    ] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Serve only tools that change nothing.")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Run the MCP server (stdio by default)."""
    from mcp_server.server import check_toolsets, serve_stdio

    if not http and (host is not None or port is not None):
        raise errors.InvalidInput(
            "--host and --port are for --http; the stdio server listens on no address",
            hint="add --http to serve streamable HTTP on that address, or drop them",
        )
    config = settings()
    chosen = check_toolsets(toolsets.split(",")) if toolsets is not None else None
    if http:
        # Only here: the HTTP stack (Starlette, the approval page, the auth) is not what
        # a stdio server needs, and an agent's client starts one per session.
        from mcp_server.http_app import serve_http

        serve_http(
            config,
            host=host or config.mcp.host,
            port=config.mcp.port if port is None else port,  # 0 is refused, not the default
            toolsets=chosen,
            read_only=read_only,
        )
    else:
        serve_stdio(config, toolsets=chosen, read_only=read_only)


@demo_app.command()
def demo(
    state_mb: Annotated[
        int, typer.Option(min=1, max=16384, help="Workload state size in MiB (1-16384).")
    ] = 200,
    keep: Annotated[bool, typer.Option(help="Keep the demo's CLAWPOINT_HOME afterwards.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Checkpoint, migrate, kill and fail over a real stateful workload, then summarise."""
    from core.demo import run_demo

    def say(line: str) -> None:
        if not json_:
            output.out.print(line, highlight=False)

    report = run_demo(state_mb=state_mb, keep_home=keep, say=say)
    if json_:
        return output.emit_json(report)
    output.table(
        "Summary",
        ["what", "value"],
        [(k, v) for k, v in report.summary_rows()],
    )
    if not report.ok:
        raise typer.Exit(1)


@config_app.command("check")
def config_check(json_: JsonOpt = False) -> None:
    """Validate the configuration and report what works here (state, store, CRIU)."""
    from core.service.diagnostics import check_configuration

    report = check_configuration()
    if json_:
        output.emit_json(report)
    else:
        for item in report.items:
            mark = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "error": "[red]error[/]"}[
                item.level
            ]
            output.out.print(f"{mark}  {item.name}: {output.esc(item.message)}", highlight=False)
    if not report.ok:
        raise typer.Exit(errors.InvalidInput.exit_code)
