"""Shared pieces of the MCP tools: argument types, the principal, and error translation."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, ConfigDict, Field

from core import errors
from core.guardrails.approvals import SESSION_SEP
from core.model import MAX_REASON_CHARS, Principal, PrincipalKind
from core.service.facade import ActionResult

T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)

WorkloadId = Annotated[
    str, Field(description="Workload id BACKEND:NAME, e.g. local:train-1", max_length=128)
]
Reason = Annotated[
    str, Field(description="Why (shown to people and audited)", max_length=MAX_REASON_CHARS)
]


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


class OpenRecord(BaseModel):
    model_config = ConfigDict(extra="allow")


class WorkloadOut(OpenRecord):
    """A workload: id, state, node, engine, pid, labels, last_checkpoint, message, ..."""


class PlanOut(OpenRecord):
    """A plan: action, target, steps, risk, summary, expected_pause_s, saves, rollback, hash."""


class ApprovalOut(OpenRecord):
    """An approval: id, status, plan_hash, summary, risk, requester, expires_at (never a code)."""


class StatusOut(OpenRecord):
    """Cluster status: backends, nodes, workloads_by_state, checkpoints, engine."""


class ActionOut(BaseModel):
    status: Literal["executed", "approval_required", "denied", "failed", "planned"]
    message: str
    plan: dict[str, Any] | None = None
    approval: dict[str, Any] | None = None
    execution: dict[str, Any] | None = None


def open_record(cls: type[R], model: BaseModel) -> R:
    return cls.model_validate(model.model_dump(mode="json"))


def records(models: list[Any]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json") if isinstance(m, BaseModel) else m for m in models]


def action_out(result: ActionResult) -> ActionOut:
    """The action result for an agent: the plan without its step arguments' noise."""
    plan = None
    if result.plan is not None:
        p = result.plan
        plan = {
            "action": p.action.value, "target": p.target, "hash": p.hash, "risk": p.risk.value,
            "summary": p.summary, "steps": [s.description for s in p.steps],
            "expected_pause_s": p.expected_pause_s, "saves": p.saves, "rollback": p.rollback,
            "cost_effect": p.cost_effect,
        }  # fmt: skip
    execution = None
    if result.execution is not None:
        e = result.execution
        execution = {
            "id": e.id, "status": e.status.value, "error": e.error,
            "steps": [{"name": s.name, "status": s.status, "output": s.output} for s in e.steps],
        }  # fmt: skip
    return ActionOut(status=result.status, message=result.message, plan=plan,
                     approval=result.approval, execution=execution)  # fmt: skip
