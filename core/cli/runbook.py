"""``clawpoint runbook ...``: list, run, inspect, continue and check runbooks.

Runs started here belong to the person at the terminal (a PERSON principal): where an action
needs approval, the run waits and that person confirms the exact plan with
``clawpoint runbook continue RUN --yes`` (or another person approves an agent's request with
``clawpoint approvals approve ID``, then anyone continues the run). Parsing and rendering
only: the engine is ``core.runbooks.engine``.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Annotated

import typer

from core import errors, logs
from core.cli import output, wording
from core.config import load_settings
from core.model import Principal, PrincipalKind
from core.runbooks import loading
from core.runbooks.engine import Engine
from core.runbooks.store import MAX_OFFSET, RunStatus
from core.runbooks.views import RunView
from core.service.facade import bootstrap

runbook_app = typer.Typer(help="Run YAML runbooks with approval gates.", no_args_is_help=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
RunArg = Annotated[str, typer.Argument(metavar="RUN", help="Run id, e.g. run-1a2b3c4d5e6f")]


def _engine() -> Engine:
    logs.configure()  # signal probes log; keep stdout for the result (--json)
    return Engine(bootstrap(load_settings()))


def _person() -> Principal:
    return Principal(id=getpass.getuser(), kind=PrincipalKind.PERSON)


def _show(run: RunView, *, json_: bool) -> None:
    run = run.in_words(wording.cli)  # its next step as the command to type
    if json_:
        output.emit_json(run)
    else:
        # Runbook messages quote their arguments (agent input): data, never markup.
        esc = output.esc
        output.out.print(
            f"[bold]{esc(run.id)}[/] {esc(run.runbook)}: {run.status.value}", highlight=False
        )
        output.table(
            "Steps",
            ["step", "kind", "status", "detail"],
            [(s.id, s.kind, s.status, s.error or _brief(s.output)) for s in run.steps],
        )
        for m in run.messages:
            output.plain(m)
        if run.error:
            output.err.print(f"[red]error[/]: {esc(run.error)}", highlight=False)
        if run.next:
            output.out.print(f"[yellow]next[/]: {esc(run.next)}", highlight=False)
    if run.status in (RunStatus.FAILED, RunStatus.CANCELLED):
        raise typer.Exit(1)


def _brief(value: object) -> str:
    if isinstance(value, dict):
        for key in ("status", "answer", "result", "count", "health", "state"):
            if key in value:
                return f"{key}={value[key]}"
    return "" if value is None else str(value)[:60]


@runbook_app.command("list")
def list_(json_: JsonOpt = False) -> None:
    """Runbooks available, with their parameters."""
    books = _engine().runbooks()
    if json_:
        return output.emit_json(
            [{"name": b.name, "title": b.title, "triggers": b.triggers,
              "params": {n: p.model_dump(mode="json") for n, p in b.params.items()}}
             for b in books.values()]
        )  # fmt: skip
    output.table(
        "Runbooks",
        ["name", "title", "params (* = required)"],
        [(b.name, b.title, ", ".join(n + ("*" if p.is_required() else "")
                                       for n, p in b.params.items()))
         for b in books.values()],
    )  # fmt: skip


@runbook_app.command()
def run(
    name: Annotated[str, typer.Argument(help="Runbook name (see 'clawpoint runbook list').")],
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="KEY=VALUE, repeatable.")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Plan every action only.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Start a run; it goes on until it ends or waits for an approval or an answer."""
    values: dict[str, str] = {}
    for item in param or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise errors.InvalidInput(f"--param {item!r} is not KEY=VALUE",
                                      hint="e.g. --param workload=local:train-1")  # fmt: skip
        values[key] = value
    _show(_engine().start(name, values, principal=_person(), dry_run=dry_run), json_=json_)


@runbook_app.command()
def status(
    run_id: Annotated[
        str | None, typer.Argument(metavar="[RUN]", help="Omit to list runs.")
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """One run in detail, or the recent runs."""
    engine = _engine()
    if run_id is not None:
        return _show(engine.status(run_id), json_=json_)
    runs = [r.in_words(wording.cli) for r in engine.runs()]
    if json_:
        return output.emit_json(runs)
    output.table(
        "Runbook runs",
        ["id", "runbook", "status", "at step", "by", "started (UTC)"],
        [(r.id, r.runbook, r.status.value, r.current, r.principal, f"{r.started_at:%m-%d %H:%M}")
         for r in runs],
    )  # fmt: skip


@runbook_app.command()
def runs(
    status_: Annotated[
        str | None,
        typer.Option("--status", help="waiting, running, succeeded, failed, cancelled, ..."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most N runs.")] = 20,
    offset: Annotated[
        int,
        typer.Option(
            "--offset", min=0, max=MAX_OFFSET, help=f"Skip the N newest (0-{MAX_OFFSET})."
        ),
    ] = 0,
    json_: JsonOpt = False,
) -> None:
    """Runs newest first, one line each: status, what it waits for, what comes next."""
    found = [r.in_words(wording.cli) for r in _engine().list_runs(limit=limit, offset=offset,
                                                                  status=status_)]  # fmt: skip
    if json_:
        return output.emit_json(found)
    output.table(
        "Runbook runs",
        ["id", "runbook", "status", "waits for", "next", "started (UTC)"],
        [(r.id, r.runbook, r.status.value, r.waits_for or "", r.next or (r.outcome or ""),
          f"{r.started_at:%m-%d %H:%M}") for r in found],
    )  # fmt: skip


@runbook_app.command()
def advance(json_: JsonOpt = False) -> None:
    """Move on every run whose gate or question timed out (what watch does each pass)."""
    changes = _engine().advance_due()
    if json_:
        return output.emit_json(changes)
    for c in changes:
        output.plain(f"{c.id} {c.runbook}: {c.step} timed out -> {c.status.value}: {c.message}")


@runbook_app.command("continue")
def continue_(
    run_id: RunArg,
    answer: Annotated[str | None, typer.Option("--answer", help="Answer to the question.")] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Confirm the plan your own run waits on.")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Resume a waiting run (after an approval, with an answer, or confirming a plan)."""
    engine = _engine()
    _show(engine.continue_(run_id, principal=_person(), answer=answer, confirm=yes), json_=json_)


@runbook_app.command()
def cancel(run_id: RunArg, json_: JsonOpt = False) -> None:
    """Stop a run where it is (actions already done are not undone)."""
    run = _engine().cancel(run_id, principal=_person())
    if json_:
        return output.emit_json(run)
    output.plain(f"{run.id}: {run.status.value}")


@runbook_app.command()
def check(
    file: Annotated[str, typer.Argument(metavar="FILE", help="A runbook YAML file or name.")],
    json_: JsonOpt = False,
) -> None:
    """Validate a runbook file; every problem with its key and a hint."""
    path = Path(file)
    try:
        exists = path.exists()
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte
        raise errors.InvalidInput(
            f"cannot read runbook file {file[:80]!r}: {getattr(exc, 'strerror', None) or exc}",
            hint="give the path of a runbook YAML file, or a runbook name ('clawpoint runbook list')",
        ) from None
    if not exists and "/" not in file and not file.endswith((".yaml", ".yml")):
        path = _engine().dir / f"{file}.yaml"
    problems = loading.check_file(path)
    if json_:
        output.emit_json({"file": str(path), "ok": not problems,
                          "problems": [str(p) for p in problems]})  # fmt: skip
    elif problems:
        for p in problems:
            output.plain(f"{path}: {p}", stderr=True)
    else:
        output.out.print(f"[green]ok[/]: {output.esc(path)}", highlight=False)
    if problems:
        raise typer.Exit(errors.InvalidInput.exit_code)
