"""``clawpoint slurm submit|queue|script``: checkpointable batch jobs on Slurm."""

from __future__ import annotations

import getpass
import sys
from typing import Annotated

import typer

from core.cli import output
from core.config import load_settings
from core.model import Principal, PrincipalKind
from core.service.facade import bootstrap
from core.specs import BatchSpec

slurm_app = typer.Typer(
    help="Submit checkpointable jobs to Slurm; inspect its queues.", no_args_is_help=True
)

Name = Annotated[str, typer.Option("--name", help="Checkpoint lineage of the job.")]


def _spec(name: str, command: list[str], partition: str | None, nodelist: str | None, exclude: str | None,
          cpus: int, mem_mb: int | None, gpus: int, time: str | None, signal_before_end: int | None,
          checkpoint_every: float | None, output_path: str | None, chdir: str | None) -> BatchSpec:  # fmt: skip
    from pydantic import ValidationError

    from core import errors
    from core.model import validate_interval_s, validate_name

    if checkpoint_every is not None:
        validate_interval_s(checkpoint_every, what="--checkpoint-every")
    try:
        return BatchSpec(
            lineage=validate_name(name, what="job name", new=True), command=command, partition=partition,
            nodelist=nodelist, exclude=exclude, cpus=cpus, mem_mb=mem_mb, gpus=gpus, time_limit=time,
            signal_before_end_s=signal_before_end, checkpoint_every_s=checkpoint_every,
            output=output_path, workdir=chdir,
        )  # fmt: skip
    except ValidationError as exc:  # in the options' words, not pydantic's (nothing was written)
        raise errors.argument_error(
            "clawpoint slurm submit", exc.errors(include_url=False), sorted(set(_OPTION.values())),
            arg=lambda field: _OPTION.get(field, field),
        ) from None  # fmt: skip


# BatchSpec's fields as this command spells them.
_OPTION = {
    "lineage": "--name", "command": "CMD", "partition": "--partition", "nodelist": "--nodelist",
    "exclude": "--exclude", "cpus": "--cpus", "mem_mb": "--mem-mb", "gpus": "--gpus",
    "time_limit": "--time", "signal_before_end_s": "--signal-before-end",
    "checkpoint_every_s": "--checkpoint-every", "output": "--output", "workdir": "--chdir",
}  # fmt: skip


@slurm_app.command(context_settings={"allow_interspersed_args": False})
def submit(
    command: Annotated[list[str], typer.Argument(help="The payload, after --")],
    name: Name,
    partition: Annotated[str | None, typer.Option()] = None,
    nodelist: Annotated[str | None, typer.Option()] = None,
    exclude: Annotated[str | None, typer.Option()] = None,
    cpus: Annotated[int, typer.Option()] = 1,
    mem_mb: Annotated[int | None, typer.Option()] = None,
    gpus: Annotated[int, typer.Option()] = 0,
    time: Annotated[str | None, typer.Option(help="Slurm time limit, e.g. 2:00:00")] = None,
    signal_before_end: Annotated[
        int | None, typer.Option(help="Checkpoint N s before the time limit (--signal=B:USR1@N)")
    ] = None,
    checkpoint_every: Annotated[
        float | None, typer.Option(help="Periodic checkpoint interval, seconds")
    ] = None,
    output_path: Annotated[str | None, typer.Option("--output")] = None,
    chdir: Annotated[str | None, typer.Option()] = None,
    print_only: Annotated[
        bool, typer.Option("--print", help="Print the batch script; submit nothing.")
    ] = False,
    json_: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Submit CMD as a requeueable job running under `clawpoint run` (restores on restart)."""
    settings = load_settings()
    spec = _spec(name, command, partition, nodelist, exclude, cpus, mem_mb, gpus, time, signal_before_end,
                 checkpoint_every, output_path, chdir)  # fmt: skip
    service = bootstrap(settings)
    if print_only:
        sys.stdout.write(service.render_batch(spec, backend="slurm"))
        return
    workload = service.submit_batch(
        spec, principal=Principal(id=getpass.getuser(), kind=PrincipalKind.PERSON), backend="slurm"
    )
    if json_:
        return output.emit_json({"workload": workload})
    output.plain(f"submitted {workload}")


@slurm_app.command()
def queue(json_: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Queue depth per partition: pending by reason, oldest pending age, GPUs pending."""
    from core.service import insights

    items = insights.queue_depth(bootstrap(load_settings()), "slurm")
    if json_:
        return output.emit_json(items)
    output.table(
        "Queue depth",
        ["partition", "pending", "by reason", "oldest pending s", "GPUs pending", "running"],
        [(q.partition, q.pending, ", ".join(f"{k}={v}" for k, v in q.pending_by_reason.items()),
          f"{q.oldest_pending_age_s or 0:.0f}", q.pending_gpus, q.running) for q in items],
    )  # fmt: skip
