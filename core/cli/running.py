"""``clawpoint run``: run a command checkpointably, restoring its lineage's newest good
checkpoint if there is one (or from scratch with ``--fresh``)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Annotated

import typer

from core import errors
from core.cli import output
from core.cli.common import JsonOpt, person, settings
from core.engine_names import ENGINES
from core.engine_names import check as check_engine
from core.lineage import pod_lineage
from core.model import parse_labels, validate_interval_s, validate_name
from core.sizes import MEMORY_HELP, memory_mib

run_app = typer.Typer(add_completion=False)
COMMANDS = {"run": run_app}


def _stdin_has_input() -> bool:
    """Whether stdin is a pipe or file someone meant for the workload (not a tty, not
    /dev/null, not closed)."""
    try:
        st = os.fstat(0)
        if os.isatty(0):
            return False
        null = os.stat(os.devnull)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) != (null.st_dev, null.st_ino)


@run_app.command(context_settings={"allow_interspersed_args": False})
def run(
    command: Annotated[list[str], typer.Argument(help="The command to run, after --")],
    name: Annotated[
        str | None,
        typer.Option(
            help="Workload name (its checkpoint lineage); NAME-INDEX when CLAWPOINT_POD_INDEX "
            "or JOB_COMPLETION_INDEX is set (one lineage per pod of a multi-pod workload)."
        ),
    ] = None,
    node: Annotated[str | None, typer.Option(help="Local node to place it on.")] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            help=f"{' | '.join(ENGINES)} (default: [checkpoint] default_engine; "
            "'clawpoint config check' says which work here)"
        ),
    ] = None,
    checkpoint_every: Annotated[
        float | None, typer.Option(help="Periodic checkpoint interval, seconds.")
    ] = None,
    label: Annotated[list[str] | None, typer.Option(help="KEY=VALUE label (repeatable).")] = None,
    detach: Annotated[bool, typer.Option("--detach", "-d", help="Run in the background.")] = False,
    fresh: Annotated[
        bool,
        typer.Option(
            "--fresh",
            help="Start from scratch even if NAME has checkpoints (they are kept, not restored; "
            "recorded in the audit log).",
        ),
    ] = False,
    cpus: Annotated[
        float | None,
        typer.Option(
            help="CPUs it may use (a cgroup CPU quota; 0.5, 2...). Needs root or "
            "[local] cgroup_root."
        ),
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option(
            help="Memory it may use (a cgroup limit: 512Mi, 4Gi...). Needs root or "
            "[local] cgroup_root."
        ),
    ] = None,
    init: Annotated[
        bool | None,
        typer.Option(
            "--init/--no-init",
            help="Run CMD as the child of a small init that stays root (needed when CMD drops "
            "its privileges itself: setpriv --reuid, gosu; default: on for those programs).",
        ),
    ] = None,
    user_namespace: Annotated[
        bool | None,
        typer.Option(
            "--user-namespace/--no-user-namespace",
            help="Root: run it in a user namespace of its own mapping every uid to itself (its "
            "root keeps no power over the host: no ports below 1024), so processes of other "
            "users can be checkpointed without CAP_SYS_RESOURCE (default: on for --init "
            "programs on such a host).",
        ),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Run CMD checkpointably; restores the newest good checkpoint of NAME if there is one
    (if NAME has checkpoints but none verifies, it fails with exit 8 unless --fresh)."""
    from core.service.facade import bootstrap
    from core.specs import RunSpec, standby_from_env

    if checkpoint_every is not None:
        validate_interval_s(checkpoint_every, what="--checkpoint-every")
    labels = parse_labels(label or [], what="--label")
    memory_mb = _memory_mb(memory)
    if cpus is not None and not 0 < cpus <= 1024:
        raise errors.InvalidInput(f"--cpus {cpus:g} is out of range", hint="give 0.01 to 1024")
    config = settings()
    engine = engine or config.checkpoint.default_engine
    check_engine(engine)  # an unknown name is refused here, naming the known ones
    if not detach:  # this process restores it: its engine check runs while the rest loads
        from core.service.early_start import prepare_engine

        prepare_engine(config, engine)
    # In a pod of a multi-pod workload (an Indexed Job, a StatefulSet) every pod runs the same
    # --name: the pod's index from its environment makes its lineage its own (NAME-INDEX).
    workload_name = (
        pod_lineage(validate_name(name, what="workload name", new=True), os.environ)
        if name
        else _default_name(command[0])
    )
    if _stdin_has_input():
        output.plain(
            "warning: the workload's stdin is /dev/null: input piped or redirected into "
            "'clawpoint run' is not passed to it (a restored workload could not get it back); "
            "have the command read a file instead",
            stderr=True,
        )
    service = bootstrap(config)
    spec = RunSpec(
        name=workload_name,
        node=node,
        engine=engine,
        checkpoint_every=checkpoint_every,
        cpus=cpus,
        memory_mb=memory_mb,
        command=command,
        init=init,
        user_namespace=user_namespace,
        cwd=os.getcwd(),
        labels=labels,
        home=str(config.home),
        **({"start_mode": "fresh" if fresh else "auto"} | standby_from_env(os.environ, fresh)),
    )
    result = service.run_workload(spec, detach=detach, principal=person())
    if isinstance(result, int):
        if result != 0:
            ended = service.get_workload(f"local:{workload_name}")
            raise errors.OperationFailed(
                f"workload local:{workload_name} ended with "
                f"{_exit_status_words(ended.exit_status, result)}",
                hint="its output above says why; 'clawpoint workloads' shows its state",
                details={"exit_status": ended.exit_status, "wrapper_exit_code": result},
            )
        return None
    if json_:
        return output.emit_json(result)
    output.out.print(
        f"started [bold]{output.esc(result.id)}[/] on {output.esc(result.node)} (pid {result.pid})",
        highlight=False,
    )


def _memory_mb(memory: str | None) -> int | None:
    """``--memory`` in MiB; InvalidInput (exit 2) saying how to write it."""
    if memory is None:
        return None
    try:
        return memory_mib(memory)
    except ValueError as exc:
        raise errors.InvalidInput(f"--memory: {exc}", hint=f"write it as {MEMORY_HELP}") from None


def _exit_status_words(status: str | None, code: int) -> str:
    """``exit 7`` -> ``exit status 7``; ``signal SIGKILL`` as is."""
    if status and status.startswith("exit "):
        return "exit status " + status.removeprefix("exit ")
    return status or f"exit status {code}"


def _default_name(program: str) -> str:
    base = (
        "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(program).name).strip("-.")
        or "job"
    )
    return f"{base[:40]}-{secrets.token_hex(2)}"
