"""The action commands (``checkpoint``, ``migrate``, ``nodes cordon``...): plan, confirm, perform.

Every action command comes from the catalogue (``core.actions``): its words, help, target
argument and options, so the CLI cannot drift from what the service validates. Each shows
the plan, asks for confirmation of a disruptive or destructive one (or takes ``--yes``), then
performs it with a progress bar on stderr and renders the result; the exit code is the
failed step's own (a corrupt checkpoint 8, a conflict 10...), 5 when denied, 6 when an
approval is needed.

``COMMANDS`` holds the top-level action commands (and a group for each first word of a
multi-word action that no other module owns); ``add_actions`` mounts the actions under a
group that another module owns (``nodes``).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from core import actions, errors
from core.actions import Interface
from core.cli import output, wording
from core.cli.common import DryRunOpt, JsonOpt, ReasonOpt, YesOpt, person, service
from core.model import Action, Plan, RiskClass

if TYPE_CHECKING:
    from pydantic.fields import FieldInfo

    from core.service.facade import ActionResult

# Groups whose module mounts its own actions with ``add_actions``.
GROUPS_ELSEWHERE = frozenset({"nodes"})


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
    for label, text in (
        ("saves", plan.saves),
        ("cost", plan.cost_effect),
        ("undo", plan.undo(wording.cli)),
    ):
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
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    svc = service()
    plan = svc.plan(action, target, params, reason=reason, interface=Interface.CLI)
    confirmed = yes
    if not json_:
        _show_plan(plan)
    if dry_run:
        result = svc.perform(plan, principal=person(), dry_run=True)
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

        result = svc.perform(plan, principal=person(), confirmed=confirmed, progress=progress)
    _render_result(result, json_=json_)


def in_cli_words(result: ActionResult) -> ActionResult:
    """``result`` with the next steps of its execution's errors and its plan's rollback named
    as commands (``core.cli.wording``) instead of MCP tools, as they are recorded neutrally."""

    def cli(text: str | None, neutral: str | None) -> str | None:
        return errors.render(neutral, wording.cli) if neutral else text

    ex = result.execution
    if ex is not None:
        steps = [s.model_copy(update={"error": cli(s.error, s.error_neutral)}) for s in ex.steps]
        said: dict[str, Any] = {"error": cli(ex.error, ex.error_neutral), "steps": steps}
        if ex.result_error_neutral is not None:
            error = {k: errors.render(v, wording.cli) if isinstance(v, str) else v
                     for k, v in ex.result_error_neutral.items()}  # fmt: skip
            said["result"] = {**ex.result, "error": error}
        ex = ex.model_copy(update=said)
    message = cli(result.message, result.message_neutral) or result.message
    plan = wording.plan_in_cli_words(result.plan) if result.plan is not None else None
    return result.model_copy(update={"execution": ex, "message": message, "plan": plan})


def _render_result(result: ActionResult, *, json_: bool) -> None:
    result = in_cli_words(result)
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
    for arg in spec.arguments():
        option: Any = Annotated[arg.annotation, _option(arg.name, arg.info)]
        default = ... if arg.required else arg.default
        params.append(inspect.Parameter(arg.name, kw, default=default, annotation=option))
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

    name = spec.cli[-1].replace("-", "_")
    # Next steps in the description named as commands (core.cli.wording), not MCP tools.
    doc = errors.render(spec.description, wording.cli)
    return actions.signed(command, name=name, doc=doc, params=params)


def add_actions(group: typer.Typer, prefix: tuple[str, ...]) -> None:
    """Mount on ``group`` (the command group ``prefix`` names) every catalogue action under
    it, making a subgroup for each deeper word on first use."""
    made: dict[tuple[str, ...], typer.Typer] = {prefix: group}

    def sub(words: tuple[str, ...]) -> typer.Typer:
        if words not in made:
            new = typer.Typer(no_args_is_help=True)
            sub(words[:-1]).add_typer(new, name=words[-1])
            made[words] = new
        return made[words]

    for spec in actions.CATALOGUE.values():
        if spec.cli[: len(prefix)] == prefix and len(spec.cli) > len(prefix):
            sub(spec.cli[:-1]).command(spec.cli[-1])(_action_command(spec))


def _no_op() -> None:
    """Actions on this kind of target."""


def _top_level() -> dict[str, typer.Typer]:
    commands: dict[str, typer.Typer] = {}
    for spec in actions.CATALOGUE.values():
        word = spec.cli[0]
        if word in commands or word in GROUPS_ELSEWHERE:
            continue
        commands[word] = typer.Typer(no_args_is_help=len(spec.cli) > 1, add_completion=False)
        if len(spec.cli) == 1:
            commands[word].command(word)(_action_command(spec))
        else:  # a group (the callback makes it one even with a single action under it)
            commands[word].callback()(_no_op)
            add_actions(commands[word], (word,))
    return commands


COMMANDS = _top_level()
