"""``clawpoint spot evaluate``: replay spot availability traces through the spot policies."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from core import errors
from core.cli import output

spot_app = typer.Typer(help="Deadline-aware spot vs on-demand decisions.", no_args_is_help=True)


def _floats(value: str, what: str) -> list[float]:
    try:
        return [float(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise errors.InvalidInput(f"--{what} {value!r} is not a comma-separated list of numbers",
                                  hint=f"e.g. --{what} 0.6,0.8") from None  # fmt: skip


@spot_app.command()
def evaluate(
    traces: Annotated[
        list[Path], typer.Option("--traces", help="Trace CSV files or directories (repeatable).")
    ],
    compute_hours: Annotated[float, typer.Option(help="Compute the job needs, hours (C0).")] = 48.0,
    job_fractions: Annotated[str, typer.Option(help="C0 / deadline, comma-separated.")] = "0.8",
    changeover_hours: Annotated[
        str, typer.Option(help="Changeover delay d, comma-separated hours.")
    ] = "0.2",
    starts: Annotated[int, typer.Option(help="Random start points per trace.")] = 25,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    policies: Annotated[
        str, typer.Option(help="Comma-separated policies.")
    ] = "greedy,uniform-progress,omniscient,clawpoint",
    spot_price: Annotated[
        float | None,
        typer.Option(
            help="Constant spot price per hour (default: the traces' per-tick prices, 0.918 without them)."
        ),
    ] = None,
    on_demand_price: Annotated[
        float | None, typer.Option(help="On-demand price per hour (default 3.06).")
    ] = None,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 1,
    json_: Annotated[bool, typer.Option("--json", help="JSON with per-run rows.")] = False,
) -> None:
    """Mean cost / on-demand, gap to Omniscient (mean, p75), deadline misses, changeovers."""
    from core.planner.spot import evaluate as run_evaluation
    from core.planner.spot import render_report

    report = run_evaluation(
        traces, compute_hours=compute_hours, job_fractions=_floats(job_fractions, "job-fractions"),
        changeover_hours=_floats(changeover_hours, "changeover-hours"), starts=starts, seed=seed,
        policies=[p.strip() for p in policies.split(",") if p.strip()], spot_price=spot_price,
        on_demand_price=on_demand_price, workers=workers,
    )  # fmt: skip
    if json_:
        return output.emit_json(report)
    output.out.print(render_report(report), highlight=False)
