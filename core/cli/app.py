"""``clawpoint`` commands: parse, call the service, render. No logic of its own.

Every command takes ``--json``. Disruptive and destructive actions ask for confirmation (or
``--yes``) after showing the plan. Errors are caught once, in ``main``, and mapped to the
exit codes listed in ``core.cli.output``.
"""

from __future__ import annotations

import getpass
import importlib
import inspect
import os
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic.fields import FieldInfo
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from core import actions, errors
from core.actions import Interface
from core.cli import output
from core.cli.approvals import approvals_app, audit_app
from core.cli.runbook import runbook_app
from core.cli.slurm import slurm_app
from core.cli.spot import spot_app
from core.cli.watch import watch_command
from core.config import Settings, load_settings
from core.engine_names import ENGINES
from core.engine_names import check as check_engine
from core.lineage import pod_lineage
from core.model import (
    Action,
    CheckpointStatus,
    Plan,
    Principal,
    PrincipalKind,
    RiskClass,
    parse_labels,
    validate_interval_s,
    validate_name,
)
from core.service.facade import ActionResult, Service, bootstrap
from core.specs import RunSpec

app = typer.Typer(
    name="clawpoint",
    help="Checkpoint, migrate, resume and fail over stateful workloads, with guardrails.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Inspect and validate configuration.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(approvals_app, name="approvals")
app.add_typer(audit_app, name="audit")
app.command("watch")(watch_command)
app.add_typer(spot_app, name="spot")
app.add_typer(runbook_app, name="runbook")
app.add_typer(slurm_app, name="slurm")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]

ReasonOpt = Annotated[
    str,
    typer.Option(
        "--reason", help="Why (recorded in the audit log; at most 500 characters).",
        callback=output.check_reason,
    ),
]  # fmt: skip
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Show the plan; change nothing.")]
ToOpt = Annotated[
    str | None, typer.Option("--to", help="Target node name (default: best available).")
]


def _settings() -> Settings:
    return load_settings()


def _service(*, recover: bool = True) -> Service:
    service = bootstrap(_settings())
    if recover:
        for execution in service.recover():
            output.err.print(
                f"recovered interrupted execution {execution.id}: {execution.status.value}"
            )
    return service


def _person() -> Principal:
    return Principal(id=getpass.getuser(), kind=PrincipalKind.PERSON)


# --------------------------------------------------------------------------- inventory
nodes_app = typer.Typer(help="List nodes; cordon a node, or return one to service.")
app.add_typer(nodes_app, name="nodes")


@nodes_app.callback(invoke_without_command=True)
def nodes(
    ctx: typer.Context,
    json_: JsonOpt = False,
    backend: Annotated[str | None, typer.Option(help="Only this backend's nodes.")] = None,
) -> None:
    """List nodes with price, spot flag, health and the workloads on them."""
    if ctx.invoked_subcommand is not None:
        return  # `nodes undrain ...`: the subcommand does the work
    items = _service().nodes(backend)
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


@app.command()
def workloads(
    json_: JsonOpt = False, backend: Annotated[str | None, typer.Option()] = None
) -> None:
    """List workloads and their state."""
    items = _service().workloads(backend)
    if json_:
        return output.emit_json(items)
    output.table(
        "Workloads",
        ["id", "state", "node", "engine", "pid", "last checkpoint", "message"],
        [
            (w.id, w.state.value, w.node, w.engine, w.pid, w.last_checkpoint, w.message)
            for w in items
        ],
    )


@app.command()
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
        done = _service().reseal_checkpoint(reseal, principal=_person())
        if json_:
            return output.emit_json(done)
        output.plain(f"{reseal} is signed again: {done.status.value}")
        return None
    items = _service().checkpoints(workload)
    if json_:
        return output.emit_json(items)
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
                _fmt(c.timings.get("total_s")),
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


# --------------------------------------------------------------------------- actions
def _show_plan(plan: Plan) -> None:
    esc = output.esc  # names and summaries can carry agent or user input: never markup
    output.out.print(
        f"[bold]{esc(plan.summary)}[/]  (risk: {plan.risk.value}, plan {plan.hash[:12]})",
        highlight=False,
    )
    for i, step in enumerate(plan.steps, 1):
        output.plain(f"  {i}. {step.description}")
    if plan.expected_pause_s is not None:
        output.plain(f"  expected pause: ~{plan.expected_pause_s:.1f} s")
    for label, text in (("saves", plan.saves), ("cost", plan.cost_effect), ("undo", plan.rollback)):
        if text:
            output.plain(f"  {label}: {text}")


def _act(
    action: Action,
    target: str,
    params: dict[str, Any],
    *,
    yes: bool,
    json_: bool,
    reason: str,
    dry_run: bool,
) -> None:
    service = _service()
    plan = service.plan(action, target, params, reason=reason, interface=Interface.CLI)
    confirmed = yes
    if not json_:
        _show_plan(plan)
    if dry_run:
        result = service.perform(plan, principal=_person(), dry_run=True)
        return _render_result(result, json_=json_)
    if plan.risk in (RiskClass.DISRUPTIVE, RiskClass.DESTRUCTIVE) and not yes:
        if json_ or not sys.stdin.isatty():
            raise errors.ApprovalRequired(
                f"{plan.risk.value} action not confirmed: {plan.summary}",
                hint="re-run with --yes to confirm, or run it in a terminal to be asked",
            )
        confirmed = typer.confirm("Proceed?", default=False)
        if not confirmed:
            raise errors.ApprovalRequired(
                "not confirmed; nothing was changed", hint="re-run and answer y"
            )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=output.err,
        disable=json_,
        transient=True,
    ) as bar:
        task = bar.add_task(plan.action.value, total=len(plan.steps))

        def progress(done: float, total: float | None, message: str) -> None:
            # The bar's text is Rich markup; progress messages quote names: escape them.
            bar.update(task, completed=done, total=total, description=output.esc(message[:60]))

        result = service.perform(plan, principal=_person(), confirmed=confirmed, progress=progress)
    _render_result(result, json_=json_)


def _render_result(result: ActionResult, *, json_: bool) -> None:
    if json_:
        output.emit_json(result)
    else:
        colour = {"executed": "green", "planned": "cyan"}.get(result.status, "red")
        output.out.print(
            f"[{colour}]{result.status}[/]: {output.esc(result.message)}", highlight=False
        )
        if result.execution:
            for step in result.execution.steps:
                out = ", ".join(f"{k}={v}" for k, v in step.output.items() if k != "timings")
                output.plain(f"  - {step.name}: {step.status} {out}")
    if result.status == "failed":
        raise typer.Exit(_failed_exit_code(result))
    if result.status == "denied":
        raise typer.Exit(errors.PolicyDenied.exit_code)
    if result.status == "approval_required":
        raise typer.Exit(errors.ApprovalRequired.exit_code)


def _failed_exit_code(result: ActionResult) -> int:
    """The exit code of the step error that failed the execution (a corrupt checkpoint is 8,
    a conflict 10...), else 1."""
    error = (result.execution.result.get("error") if result.execution else None) or {}
    code = error.get("exit_code") if isinstance(error, dict) else None
    return code if type(code) is int and code > 0 else errors.OperationFailed.exit_code


# Every action command comes from the catalogue (core.actions): its words, help, target
# argument and options, so the CLI cannot drift from what the service validates.
def _option(name: str, info: FieldInfo) -> Any:
    flag = "--" + name.replace("_", "-")
    if info.annotation is bool and info.default is True:
        flag = f"{flag}/--no-{name.replace('_', '-')}"
    return typer.Option(flag, help=info.description)


def _action_command(spec: actions.ActionSpec) -> Callable[..., None]:
    kw = inspect.Parameter.KEYWORD_ONLY
    target = spec.target.value
    params = [
        inspect.Parameter(target, kw, annotation=Annotated[str, typer.Argument(
            metavar=target.upper(), help=actions.TARGET_HELP[spec.target])]),
    ]  # fmt: skip
    for name in spec.fields():
        info = spec.params.model_fields[name]
        default = ... if info.is_required() else info.default
        params.append(inspect.Parameter(name, kw, default=default,
                                        annotation=Annotated[info.annotation, _option(name, info)]))  # fmt: skip
    for name, other in spec.redirects.items():
        hidden = typer.Option(
            "--" + name, hidden=True, help=f"see {actions.spec(other).cli_command}"
        )
        params.append(
            inspect.Parameter(name, kw, default=False, annotation=Annotated[bool, hidden])
        )
    params += [
        inspect.Parameter("json_", kw, default=False, annotation=JsonOpt),
        inspect.Parameter("yes", kw, default=False, annotation=YesOpt),
        inspect.Parameter("reason", kw, default="", annotation=ReasonOpt),
        inspect.Parameter("dry_run", kw, default=False, annotation=DryRunOpt),
    ]

    def command(**kwargs: Any) -> None:
        ref = kwargs.pop(target)
        flags = {k: kwargs.pop(k) for k in ("json_", "yes", "reason", "dry_run")}
        _act(spec.action, ref, kwargs, **flags)

    command.__name__ = spec.cli[-1].replace("-", "_")
    command.__doc__ = spec.description
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


_GROUPS: dict[tuple[str, ...], typer.Typer] = {(): app, ("nodes",): nodes_app}


def _group(words: tuple[str, ...]) -> typer.Typer:
    """The command group ``words`` names, made on first use (a new action's own group)."""
    if words not in _GROUPS:
        sub = typer.Typer(no_args_is_help=True)
        _group(words[:-1]).add_typer(sub, name=words[-1])
        _GROUPS[words] = sub
    return _GROUPS[words]


for _spec in actions.CATALOGUE.values():
    _group(_spec.cli[:-1]).command(_spec.cli[-1])(_action_command(_spec))


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


@app.command(context_settings={"allow_interspersed_args": False})
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
    json_: JsonOpt = False,
) -> None:
    """Run CMD checkpointably; restores the newest good checkpoint of NAME if there is one
    (if NAME has checkpoints but none verifies, it fails with exit 8 unless --fresh)."""
    if checkpoint_every is not None:
        validate_interval_s(checkpoint_every, what="--checkpoint-every")
    labels = parse_labels(label or [], what="--label")
    settings = _settings()
    engine = engine or settings.checkpoint.default_engine
    check_engine(engine)  # an unknown name is refused here, naming the known ones
    # In a pod of a multi-pod workload (an Indexed Job, a StatefulSet) every pod runs the same
    # --name: the pod's index from its environment makes its lineage its own (NAME-INDEX).
    workload_name = (
        pod_lineage(validate_name(name, what="workload name"), os.environ)
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
    service = bootstrap(settings)
    spec = RunSpec(
        name=workload_name,
        node=node,
        engine=engine,
        checkpoint_every=checkpoint_every,
        command=command,
        cwd=os.getcwd(),
        labels=labels,
        start_mode="fresh" if fresh else "auto",
        home=str(settings.home),
    )
    result = service.run_workload(spec, detach=detach, principal=_person())
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


# --------------------------------------------------------------------------- serve, demo, config
@app.command()
def serve(
    http: Annotated[
        bool, typer.Option("--http", help="Serve streamable HTTP instead of stdio.")
    ] = False,
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default from config, 8765).")] = None,
    toolsets: Annotated[
        str | None,
        typer.Option(
            help="Serve only these toolsets, comma-separated: inventory, signals, "
            "actions, approvals, runbooks (default: all)."
        ),
    ] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Serve only tools that change nothing.")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Run the MCP server (stdio by default)."""
    from mcp_server.http_app import serve_http
    from mcp_server.server import check_toolsets, serve_stdio

    settings = _settings()
    chosen = check_toolsets(toolsets.split(",")) if toolsets is not None else None
    if http:
        serve_http(
            settings,
            host=host or settings.mcp.host,
            port=port or settings.mcp.port,
            toolsets=chosen,
            read_only=read_only,
        )
    else:
        serve_stdio(settings, toolsets=chosen, read_only=read_only)


@app.command()
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


def _click_exception_types(name: str) -> tuple[type[BaseException], ...]:
    """``name`` (ClickException, Exit, Abort) from every click the installed typer may raise.

    typer up to 0.2x re-exports click's classes; newer ones vendor click as ``typer._click``
    and raise their own. Catching by class from both keeps ``main`` right for every typer
    that pyproject allows (and for code that raises click's classes directly).
    """
    found: list[type[BaseException]] = []
    for module_name in ("typer._click.exceptions", "typer.exceptions", "click.exceptions"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException) and cls not in found:
            found.append(cls)
    return tuple(found)


_USAGE_ERRORS = _click_exception_types("ClickException")
_EXITS: tuple[type[BaseException], ...] = (typer.Exit, *_click_exception_types("Exit"))
_ABORTS: tuple[type[BaseException], ...] = (typer.Abort, *_click_exception_types("Abort"))


def main() -> None:
    """The console script: run the app and turn every outcome into the documented exit code.

    ``standalone_mode=False`` makes click hand everything back: the command's return value,
    or the code of a ``typer.Exit`` (returned, not raised, by every click/typer version), and
    usage errors raised as exceptions, which are shown as a usage message (exit 2).
    """
    from core import logs

    logs.configure()  # JSON logs to stderr, so stdout stays clean for --json and stdio MCP
    as_json = "--json" in sys.argv
    try:
        code = app(standalone_mode=False)
    except errors.ClawpointError as exc:
        output.render_error(exc, as_json=as_json)
        sys.exit(exc.exit_code)
    except _EXITS as exc:
        sys.exit(getattr(exc, "exit_code", 1))
    except _ABORTS:
        output.err.print("interrupted")
        sys.exit(130)
    except _USAGE_ERRORS as exc:
        show = getattr(exc, "show", None)  # the class differs between click and typer._click
        if callable(show):
            show()
        sys.exit(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        output.err.print("interrupted")
        sys.exit(130)
    sys.exit(code if type(code) is int else 0)
