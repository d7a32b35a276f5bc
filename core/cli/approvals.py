"""``clawpoint approvals ...`` and ``clawpoint audit ...``: the approver's tools.

Everything here runs as the person at the terminal (a PERSON principal named after the OS
user). A person cannot approve a request they made themselves; agents never reach these
commands (they have no MCP equivalent).
"""

from __future__ import annotations

import getpass
from datetime import datetime
from typing import Annotated

import typer

from core import errors
from core.cli import output, wording
from core.config import load_settings
from core.guardrails.approvals import MAX_PAGE, ApprovalStatus
from core.model import Action, Principal, PrincipalKind
from core.service.facade import Service, bootstrap

approvals_app = typer.Typer(help="Review, approve and deny requests; grant standing approvals.",
                            no_args_is_help=True)  # fmt: skip
audit_app = typer.Typer(
    help="Show and verify the hash-chained audit log.", invoke_without_command=True
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]


def _service() -> Service:
    return bootstrap(load_settings())


# Budgets beyond this per hour are a typo, not a policy (and must fit the database).
MAX_GRANT_PER_HOUR = 10_000
# `audit --limit`: past SQLite's integer range the query itself failed (found by fuzzing).
AUDIT_LIMIT = 1_000_000


def _person() -> Principal:
    return Principal(id=getpass.getuser(), kind=PrincipalKind.PERSON)


@approvals_app.command("list")
def list_(
    all_: Annotated[bool, typer.Option("--all", help="Include decided and expired ones.")] = False,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", min=1, max=MAX_PAGE, help=f"At most this many, newest first (1-{MAX_PAGE})."
        ),
    ] = 50,
    cursor: Annotated[
        str | None,
        typer.Option("--cursor", help="Continue after this id (the previous page's next_cursor)."),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Pending approval requests (or all with --all), newest first, a page at a time."""
    items, more, total = _service().page_approvals(
        status=None if all_ else "pending", limit=limit, cursor=cursor
    )
    if json_:
        return output.emit_json({"approvals": items, "next_cursor": more, "total": total})
    output.table(
        f"Approvals ({len(items)} of {total})" if more or cursor else "Approvals",
        ["id", "status", "risk", "what", "requested by", "expires (UTC)"],
        [
            (a.id, a.status.value, a.risk.value, a.summary, a.requester, f"{a.expires_at:%H:%M:%S}")
            for a in items
        ],
    )
    if more:
        output.plain(f"More: clawpoint approvals list{' --all' if all_ else ''} --cursor {more}")


@approvals_app.command()
def show(approval_id: Annotated[str, typer.Argument(metavar="ID")], json_: JsonOpt = False) -> None:
    """The full request as a person should read it: a pending one with its one-time code,
    any other (approved, denied, used, expired, locked) with its state, for review."""
    service = _service()
    view = service.get_approval(approval_id)
    view = view.model_copy(update={"plan": wording.plan_in_cli_words(view.plan)})
    text = service.approval_text(approval_id, principal=_person())
    if json_:
        return output.emit_json({"approval": view, "text": text})
    # The request holds the agent's own words (its reason, names): data, never markup.
    output.plain(text)
    output.plain("\nSteps:")
    for i, step in enumerate(view.plan.steps, 1):
        output.plain(f"  {i}. {step.description}")
    if view.status is ApprovalStatus.PENDING:  # a decided request is shown for review only
        output.plain(
            f"\nApprove: clawpoint approvals approve {view.id}   Deny: clawpoint approvals deny {view.id} --why ..."
        )


@approvals_app.command()
def approve(
    approval_id: Annotated[str, typer.Argument(metavar="ID")],
    any_session: Annotated[
        bool,
        typer.Option(
            "--any-session",
            help="Let any session of the requesting agent execute it, not only the session "
            "that asked.",
        ),
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """Approve a pending request (you must not be its requester)."""
    view = _service().approve(approval_id, principal=_person(), via="cli", any_session=any_session)
    if json_:
        return output.emit_json(view)
    output.out.print(
        f"[green]approved[/] {output.esc(view.id)}: {output.esc(view.summary)}. "
        + ("Any session of the requesting agent" if any_session else "The requesting session")
        + " can now execute it once.",
        highlight=False,
    )


@approvals_app.command()
def deny(
    approval_id: Annotated[str, typer.Argument(metavar="ID")],
    why: Annotated[
        str,
        typer.Option("--why", help="Reason, shown to the requester.", callback=output.check_reason),
    ] = "",
    json_: JsonOpt = False,
) -> None:
    """Deny a pending request."""
    view = _service().deny(approval_id, principal=_person(), why=why or "denied", via="cli")
    if json_:
        return output.emit_json(view)
    output.out.print(
        f"[red]denied[/] {output.esc(view.id)}: {output.esc(view.summary)}", highlight=False
    )


@approvals_app.command()
def grant(
    action: Annotated[str, typer.Option("--action", help="e.g. preempt, migrate, checkpoint")],
    scope: Annotated[
        list[str] | None,
        typer.Option(
            "--scope", help="KEY=VALUE, repeatable: partition=gpu, trigger=spot-interruption"
        ),
    ] = None,
    max_: Annotated[str, typer.Option("--max", help="Budget, e.g. 20/h")] = "10/h",
    expires: Annotated[str, typer.Option("--expires", help="e.g. 8h, 7d")] = "24h",
    reason: Annotated[
        str | None,
        typer.Option(
            "--reason", help="Why (audited); an empty one is refused.", callback=output.check_reason
        ),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Pre-authorise a class of plans within a scope, a budget and an expiry."""
    if reason is not None and not reason.strip():  # e.g. --reason "$WHY" with WHY unset
        raise errors.InvalidInput(
            "--reason is empty", hint="say why, e.g. --reason 'spot notices', or leave it out"
        )
    try:
        act = Action(action.replace("-", "_"))
    except ValueError:
        raise errors.InvalidInput(
            f"unknown action {action!r}", hint=f"one of: {', '.join(a.value for a in Action)}"
        ) from None
    pairs: dict[str, str] = {}
    for item in scope or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise errors.InvalidInput(
                f"scope {item!r} is not KEY=VALUE", hint="e.g. --scope partition=gpu"
            )
        if key in pairs:
            raise errors.InvalidInput(
                f"scope key {key!r} is given twice", hint="give each key once: all must match"
            )
        pairs[key] = value
    count, sep, unit = max_.partition("/")
    if (
        not (count.isascii() and count.isdigit())
        or not 1 <= int(count) <= MAX_GRANT_PER_HOUR
        or (sep and unit not in ("h", "hour"))
    ):
        raise errors.InvalidInput(
            f"--max {max_!r} is not N/h with N from 1 to {MAX_GRANT_PER_HOUR}",
            hint="e.g. --max 20/h",
        )
    g = _service().grant(act, pairs, max_per_hour=int(count), expires=expires,
                         reason="standing approval" if reason is None else reason,
                         principal=_person())  # fmt: skip
    if json_:
        return output.emit_json(g)
    output.out.print(f"[green]granted[/] {output.esc(g.id)}: {g.action.value} where "
                     f"{output.esc(pairs or 'anywhere')}, max {g.max_per_hour}/h until "
                     f"{g.expires_at:%Y-%m-%d %H:%M} UTC", highlight=False)  # fmt: skip


@approvals_app.command()
def grants(
    all_: Annotated[bool, typer.Option("--all", help="Include revoked and expired.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Standing approvals."""
    items = _service().grants(include_inactive=all_)
    if json_:
        return output.emit_json(items)
    output.table(
        "Standing approvals",
        ["id", "action", "scope", "used/h", "expires (UTC)", "by", "reason"],
        [(g.id, g.action.value, ",".join(f"{k}={v}" for k, v in g.scope.items()),
          f"{g.used_last_hour}/{g.max_per_hour}", f"{g.expires_at:%Y-%m-%d %H:%M}", g.granted_by, g.reason)
         for g in items],
    )  # fmt: skip


@approvals_app.command()
def revoke(grant_id: Annotated[str, typer.Argument(metavar="ID")], json_: JsonOpt = False) -> None:
    """Revoke a standing approval."""
    g = _service().revoke_grant(grant_id, principal=_person())
    if json_:
        return output.emit_json(g)
    output.plain(f"revoked {g.id}")


@audit_app.callback()
def audit(
    ctx: typer.Context,
    since: Annotated[str | None, typer.Option(help="ISO time, e.g. 2026-11-29T10:00")] = None,
    limit: Annotated[
        int,
        typer.Option(min=1, max=AUDIT_LIMIT, help=f"Most recent N entries (1-{AUDIT_LIMIT})."),
    ] = 50,
    json_: JsonOpt = False,
) -> None:
    """The audit log (plans, decisions, approvals, executions)."""
    if ctx.invoked_subcommand is not None:
        return
    when = None
    if since:
        try:
            when = datetime.fromisoformat(since)
        except ValueError:
            raise errors.InvalidInput(
                f"--since {since!r} is not an ISO time", hint="e.g. --since 2026-11-29T10:00"
            ) from None
    entries = _service().audit.entries(since=when, limit=limit)
    if json_:
        return output.emit_json(entries)
    output.table(
        "Audit",
        ["#", "time (UTC)", "kind", "principal", "subject", "detail"],
        [(e.seq, f"{e.ts:%m-%d %H:%M:%S}", e.kind, e.principal, e.subject,
          str(e.data.get("outcome") or e.data.get("status") or e.data.get("summary") or "")[:60]) for e in entries],
    )  # fmt: skip


@audit_app.command()
def verify(json_: JsonOpt = False) -> None:
    """Check the hash chain: any edit, deletion or reordering names the first bad entry."""
    result = _service().audit.verify()
    if json_:
        output.emit_json(result)
    elif result.ok:
        output.out.print(f"[green]ok[/]: {result.entries} entries, chain intact")
    else:
        output.err.print(
            f"[red]audit log tampered[/]: entry {result.first_bad_seq}: "
            f"{output.esc(result.problem)}",
            highlight=False,
        )
    if not result.ok:
        raise typer.Exit(errors.PolicyDenied.exit_code)
