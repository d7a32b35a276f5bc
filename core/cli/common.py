"""What the command modules share: the common options and the way to the service.

Role: every command that reads or changes state goes through ``service()`` (the settings, the
one service facade, recovery of interrupted executions) and acts as ``person()`` (the OS
user). Limits: imports the service only when a command calls ``service()``, so a module that
imports this one for its options stays cheap to load.
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Annotated

import typer

from core.cli import output

if TYPE_CHECKING:
    from core.config import Settings
    from core.model import Principal
    from core.service.facade import Service

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


def settings() -> Settings:
    from core.config import load_settings

    return load_settings()


def service(*, recover: bool = True) -> Service:
    """The service over this user's settings; with ``recover``, interrupted executions are
    finished or rolled back first (and said so on stderr)."""
    from core.service.facade import bootstrap

    svc = bootstrap(settings())
    if recover:
        for execution in svc.recover():
            output.err.print(
                f"recovered interrupted execution {execution.id}: {execution.status.value}"
            )
    return svc


def person() -> Principal:
    """The person at the terminal."""
    from core.model import Principal, PrincipalKind

    return Principal(id=getpass.getuser(), kind=PrincipalKind.PERSON)
