"""Next steps in the words of the command line.

Errors name what to do next in an interface-neutral form (``core.errors.step`` and
``core.errors.arg``: an MCP tool and its arguments). MCP and runbooks show the tool call;
the command line renders the same text as the command a person types, with ``cli``:

- an action tool (``migrate_workload``) becomes its command from the action catalogue
  (``clawpoint migrate local:a --to node-b``): the target is positional, a true boolean a
  flag, other arguments options;
- a read tool becomes the command in ``READS`` (``list_checkpoints`` ->
  ``clawpoint checkpoints``), an argument spelled differently there as in ``SPELLED``
  (``detail=true`` -> ``--json``, ``status=all`` -> ``--all``);
- an argument becomes its option (``to`` -> ``--to``).

Limits: a name in neither table is shown as the tool call (a test pins both tables to the
live tool list and the CLI's commands, so that happens only for a tool with no command).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core import actions

if TYPE_CHECKING:
    from core.model import Plan

__all__ = ["READS", "cli", "plan_in_cli_words"]

# Read tools -> (the command's words, the argument given positionally, if any).
READS: dict[str, tuple[str, str | None]] = {
    "list_nodes": ("nodes", None),
    "list_pools": ("pools", None),
    "list_workloads": ("workloads", None),
    "list_checkpoints": ("checkpoints", "workload"),
    "list_approvals": ("approvals list", None),
    "get_approval": ("approvals show", "approval_id"),
    "list_runs": ("runbook runs", None),
    "runbook_status": ("runbook status", "run_id"),
    "continue_runbook": ("runbook continue", "run_id"),
}
# ``ARG=VALUE`` written another way on the command line than ``--ARG VALUE``.
SPELLED: dict[str, str] = {"detail=true": "--json", "status=all": "--all"}


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def cli(name: str, args: dict[str, str]) -> str:
    """``core.errors.StepRenderer`` for the command line (see the module docstring)."""
    if name.startswith("-"):
        return _option(name[1:])
    spec = actions.by_tool(name)
    positional: str | None
    if spec is not None:
        words, positional = " ".join(spec.cli), spec.target.value
    elif name in READS:
        words, positional = READS[name]
    else:
        return f"{name}({', '.join(f'{k}={v}' for k, v in args.items())})" if args else name
    said = ["clawpoint", words]
    if positional is not None and positional in args:
        said.append(args[positional])
    for key, value in args.items():
        if key == positional or value == "false":
            continue
        spelled = SPELLED.get(f"{key}={value}")
        if spelled is None:
            spelled = _option(key) if value == "true" else f"{_option(key)} {value}"
        said.append(spelled)
    return "'" + " ".join(said) + "'"


def plan_in_cli_words(plan: Plan) -> Plan:
    """``plan`` with its rollback named as the command (it is recorded neutrally)."""
    return plan.model_copy(update={"rollback": plan.undo(cli)})
