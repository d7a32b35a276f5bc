"""Shared pieces of the MCP tools: argument types, the principal, error translation, concise
action results and list pages.

Every list tool pages the same way (``page``): ``limit`` records from ``cursor`` on, and a
``next_cursor`` while more are left. The cursor is the id of the last record returned, so a
record added or removed meanwhile neither repeats nor skips the others; a cursor whose
record went away is refused with a hint to list again.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from core import errors
from core.guardrails.approvals import SESSION_SEP
from core.model import MAX_REASON_CHARS, Principal, PrincipalKind
from core.schema_base import Model
from core.service import views
from core.service.facade import ActionResult, Service
from core.service.projection import projection

T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)

# The one annotation of every read tool: it changes nothing, so repeating it is harmless.
READ = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

WorkloadId = Annotated[str, Field(description="e.g. local:train-1", max_length=128)]
Reason = Annotated[str, Field(description="Why (audited)", max_length=MAX_REASON_CHARS)]
Detail = Annotated[bool, Field(description="Full records")]
Limit = Annotated[int, Field(ge=1, le=200)]
Cursor = Annotated[str | None, Field(description="From next_cursor", max_length=200)]


def tool_error(exc: errors.ClawpointError) -> ToolError:
    text = f"{exc.message} (error: {exc.code})"
    if exc.hint:
        text += f" Next step: {exc.hint}"
    return ToolError(text)


async def call(fn: Callable[[], T]) -> T:
    """Run a blocking service call off the event loop; translate our errors once, here."""
    try:
        return await anyio.to_thread.run_sync(fn)
    except errors.ClawpointError as exc:
        raise tool_error(exc) from exc


# A stdio server process serves exactly one client: the process is the session.
_STDIO_SESSION = secrets.token_hex(4)


def agent() -> Principal:
    """Whoever calls a tool is an agent, one principal per session or configured identity.

    Over HTTP the token names the agent (``mcp:clawpoint-agent``, or ``mcp:NAME`` for each
    ``[mcp] agent_tokens`` entry): streamable HTTP on the current protocol has no sessions,
    so the token is the identity. Over stdio each server process is one client's session
    (``mcp:stdio/3fa9c2d1``). Approvals are bound to this principal (see
    ``core.guardrails.approvals``), so one session cannot execute another's approved plan."""
    token = get_access_token()
    if token is not None:
        return Principal(id=f"mcp:{token.client_id}", kind=PrincipalKind.AGENT)
    return Principal(id=f"mcp:stdio{SESSION_SEP}{_STDIO_SESSION}", kind=PrincipalKind.AGENT)


def transport() -> str:
    """``http`` for a caller authenticated by a bearer token, else ``stdio`` (or in memory)."""
    return "http" if get_access_token() is not None else "stdio"


# --- compact output schemas -------------------------------------------------------------
# The full pydantic models (plans, executions, node and workload records) would make the
# tool list cost ~25k tokens of every agent's context. Tools therefore declare small typed
# envelopes whose records are open objects; docs/mcp-tools.md documents the record fields.


class OpenRecord(Model):
    model_config = ConfigDict(extra="allow")


class WorkloadOut(OpenRecord):
    """A workload: id, state, node, engine, pid, labels, last_checkpoint, message, ..."""


class PlanOut(OpenRecord):
    """A plan: action, target, steps, risk, summary, expected_pause_s, saves, rollback, hash."""


class ApprovalOut(OpenRecord):
    """An approval: id, status, plan_hash, summary, risk, requester, expires_at (never a code)."""


class StatusOut(OpenRecord):
    """Cluster status: backends, nodes, workloads_by_state, checkpoints, engine."""


class ActionOut(Model):
    status: Literal["executed", "approval_required", "denied", "failed", "planned"]
    message: str
    next: str | None = None
    plan: dict[str, Any] | None = None
    approval: dict[str, Any] | None = None
    execution: dict[str, Any] | None = None


def open_record(cls: type[R], model: BaseModel) -> R:
    return cls.model_validate(model.model_dump(mode="json"))


def action_out(result: ActionResult, *, detail: bool = False) -> ActionOut:
    """The action result for an agent: the compact plan (one line per step), the approval's
    id, expiry and ways to approve, one line per executed step, and what to do next; with
    ``detail``, the full plan and execution records."""
    plan = views.plan(result.plan, detail=detail) if result.plan is not None else None
    execution = None
    if result.execution is not None:
        execution = views.execution(result.execution, detail=detail)
    approval = None
    if result.approval is not None:
        a = result.approval
        approval = views.compact({
            "id": a.get("id"), "status": a.get("status"), "expires_at": a.get("expires_at"),
            "how_to_approve": [{"kind": p.get("kind"), "how": p.get("how")}
                               for p in a.get("how_to_approve") or [] if p.get("available", True)],
        })  # fmt: skip
    return ActionOut(status=result.status, message=result.message, next=_next(result),
                     plan=plan, approval=approval, execution=execution)  # fmt: skip


async def dry_run_out(service: Service, result: ActionResult) -> ActionOut:
    """``action_out``; for a dry run (``planned``) the plan also carries its ``projection``:
    the workload's projected finish and slack against its deadline after the move, and
    what would help when it still misses (absent without a deadline)."""
    out = action_out(result)
    plan = result.plan
    if result.status == "planned" and plan is not None and out.plan is not None:
        out.plan["projection"] = await call(lambda: projection(service, plan))
    return out


def _next(result: ActionResult) -> str | None:
    if result.status == "approval_required" and result.approval is not None:
        aid = result.approval.get("id")
        return (
            f"Tell the person what the plan does and wait for them to decide {aid}; do not "
            f"request it again. Once they approved it, call execute_approved(approval_id={aid})."
        )
    if result.status == "planned":
        return "Nothing was changed; call the same tool without dry_run to act."
    return None


def page(
    items: Sequence[T], *, limit: int, cursor: str | None, key: Any = None
) -> tuple[list[T], str | None]:
    """``limit`` items after the one whose id (``key(item)``, default ``item.id``) is
    ``cursor``, and the cursor of the next page (None: this page is the last)."""
    ident = key or (lambda item: str(item.id))
    start = 0
    if cursor:
        ids = [ident(i) for i in items]
        if cursor not in ids:
            raise tool_error(
                errors.InvalidInput(
                    f"cursor {cursor[:80]!r} names no record of this list any more",
                    hint="list again without a cursor (the record it named went away)",
                )
            )
        start = ids.index(cursor) + 1
    chunk = list(items[start : start + limit])
    more = start + limit < len(items)
    return chunk, (ident(chunk[-1]) if more and chunk else None)
