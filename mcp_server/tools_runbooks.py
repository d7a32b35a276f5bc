"""Runbook tools, prompts and resources for the MCP server.

``register(mcp, service)`` adds five tools over ``core.runbooks.engine`` (``list_runbooks``,
``start_runbook``, ``runbook_status``, ``list_runs``, ``continue_runbook``), one prompt per shipped runbook
(how to run it with those tools), and read-only resources: runbook definitions, the policy in
force, the recent audit log and a workload's checkpoints. The agent that starts a run is its
principal; approvals it meets come from a person (``clawpoint approvals approve ID``).

A run comes back concise: its status, what it waits for, what to do next and one line per
step; ``detail=true`` gives the step records (outputs, errors), messages and parameters.
Resources are compact JSON.

Limits: tool descriptions stay short (the whole tool list has a size budget). Prompts are
registered from the runbooks present when the server starts.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver.prompts.base import Prompt, PromptArgument
from mcp.types import ToolAnnotations
from pydantic import Field

from core import errors
from core.runbooks import schema
from core.runbooks.engine import Engine
from core.runbooks.store import MAX_OFFSET, RunStatus, StepRecord
from core.runbooks.views import RunSummary, RunView
from core.schema_base import Model
from core.service import views
from core.service.facade import Service
from mcp_server.common import READ, Cursor, Detail, Limit, agent, call, page, tool_error
from mcp_server.lean import compact_json

T = TypeVar("T")

# A run may execute actions (through the guardrails): mutating, not idempotent.
RUNS_ACTIONS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)

RunId = Annotated[str, Field(description="Run id from start_runbook", max_length=64)]


class RunbookInfo(Model):
    name: str
    title: str
    triggers: list[str]
    params: dict[str, str] = Field(description="name -> 'type, required|optional: description'")
    description: str | None = None


class RunbookList(Model):
    runbooks: list[RunbookInfo]
    next_cursor: str | None = None


class Run(Model):
    """A runbook run. steps: one line per step ('ID STATUS: what it did'); with detail, the
    step records, messages and params."""

    id: str
    runbook: str
    status: str
    principal: str
    current: str | None = None
    waits_for: str | None = None
    waiting: dict[str, Any] | None = None
    next: str = ""
    steps: list[Any]
    outcome: str | None = None
    error: str | None = None
    messages: list[str] | None = None
    params: dict[str, Any] | None = None


class RunList(Model):
    runs: list[dict[str, Any]] = Field(
        description="id, runbook, status, waits_for, current, next, outcome, updated_at"
    )
    next_cursor: str | None = None


def _step_line(s: StepRecord) -> str:
    """``ID STATUS: what it did``, from the step's output or error."""
    out = s.output
    if s.error:
        said = f"error: {s.error}"
    elif isinstance(out, dict) and isinstance(out.get("result"), dict):
        head = views.line({k: v for k, v in out.items() if k != "result"})
        said = f"{head}; {views.line(out['result'])}"
    else:
        said = views.line(out)
    return views.line(f"{s.id} {s.status}" + (f": {said}" if said else ""))


def _next(v: RunView) -> str:
    w = v.waiting
    if v.status is RunStatus.WAITING_APPROVAL and w is not None and w.approval_id:
        return (
            f"Tell the person what it waits for and wait for them to decide {w.approval_id} "
            f"(they run: clawpoint approvals approve {w.approval_id}); do not approve or request "
            f"it yourself. Then call continue_runbook(run_id={v.id})."
        )
    return v.next


def _run(v: RunView, *, detail: bool = False) -> Run:
    w = v.waiting
    waits = None
    waiting = None
    if w is not None and not v.status.finished:
        waits = f"approval {w.approval_id}" if w.approval_id else w.kind
        waiting = views.compact({
            "step": w.step, "approval_id": w.approval_id, "expires_at": _second(w.expires_at),
            "message": " ".join(w.message.split()), "question": w.question,
            "choices": [c.get("value") for c in w.choices],
        })  # fmt: skip
        if detail:
            waiting = w.model_dump(mode="json")
    outcome = None
    if v.status.finished:
        outcome = v.error or (v.messages[-1] if v.messages else None)
    steps: list[Any] = (
        [s.model_dump(mode="json") for s in v.steps] if detail else [_step_line(s) for s in v.steps]
    )
    return Run(
        id=v.id, runbook=v.runbook, status=v.status.value, principal=v.principal,
        current=v.current, waits_for=waits, waiting=waiting, next=_next(v), steps=steps,
        outcome=outcome, error=v.error if v.error != outcome else None,
        messages=v.messages if detail else None, params=v.params if detail else None,
    )  # fmt: skip


def _summary(r: RunSummary) -> dict[str, Any]:
    return views.compact({
        "id": r.id, "runbook": r.runbook, "status": r.status.value, "waits_for": r.waits_for,
        "current": r.current, "next": r.next if r.waits_for else None, "outcome": r.outcome,
        "updated_at": r.updated_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    })  # fmt: skip


def _info(rb: schema.Runbook, *, detail: bool = False) -> RunbookInfo:
    params = {
        n: f"{p.type}, {'required' if p.is_required() else 'optional'}: {p.description}"
        for n, p in rb.params.items()
    }
    return RunbookInfo(name=rb.name, title=rb.title, triggers=list(rb.triggers), params=params,
                       description=" ".join(rb.description.split()) if detail else None)  # fmt: skip


def _second(stamp: str | None) -> str | None:
    """An ISO time to the second, in UTC (``2026-05-01T12:00:00Z``); other text unchanged."""
    if not stamp:
        return stamp
    try:
        return datetime.fromisoformat(stamp).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return stamp


def _offset(cursor: str | None) -> int:
    if not cursor:
        return 0
    if not (cursor.isascii() and cursor.isdigit()) or int(cursor) > MAX_OFFSET:
        raise tool_error(errors.InvalidInput(
            f"cursor {cursor[:40]!r} is not one list_runs gave",
            hint="pass the next_cursor of the previous page, or no cursor for the first page",
        ))  # fmt: skip
    return int(cursor)


def _prompt_text(rb: schema.Runbook, args: dict[str, Any]) -> str:
    given = {k: v for k, v in args.items() if v not in (None, "")}
    steps = "\n".join(f"- {s.id} ({s.kind})" for s in rb.steps)
    return (
        f"Run the clawpoint runbook '{rb.name}': {rb.title}.\n{rb.description.strip()}\n\n"
        f"Call start_runbook with name='{rb.name}' and params={json.dumps(given)}. "
        "If the run waits for approval, tell the person what it wants to do, the approval id "
        "and how to approve (clawpoint approvals approve ID); never approve it yourself. After "
        "they decide, call continue_runbook. If it waits for an answer, ask the person the "
        "question and call continue_runbook with their answer. Report the outcome and the "
        f"run's messages.\n\nSteps:\n{steps}"
    )


def _add_prompt(mcp: MCPServer[Any], rb: schema.Runbook) -> None:
    def render(**kwargs: Any) -> str:
        return _prompt_text(rb, kwargs)

    mcp.add_prompt(
        Prompt(
            name=rb.name,
            title=rb.title,
            description=rb.description.strip()[:300],
            arguments=[
                PromptArgument(name=n, description=p.description, required=p.is_required())
                for n, p in rb.params.items()
            ],
            fn=render,
        )
    )


def register(
    mcp: MCPServer[Any], service: Service, *, engine: Engine | None = None, prompts: bool = True
) -> Engine:
    """Add the runbook tools, resources and (with ``prompts``) one prompt per runbook to
    ``mcp``; returns the engine used."""
    eng = engine or Engine(service)

    @mcp.tool(title="List runbooks", annotations=READ)
    async def list_runbooks(
        limit: Limit = 50, cursor: Cursor = None, detail: Detail = False
    ) -> RunbookList:
        """Runbooks you can start, with their parameters."""
        books = list((await call(eng.runbooks)).values())
        chunk, more = page(books, limit=limit, cursor=cursor, key=lambda rb: rb.name)
        return RunbookList(runbooks=[_info(rb, detail=detail) for rb in chunk], next_cursor=more)

    @mcp.tool(title="Start a runbook", annotations=RUNS_ACTIONS)
    async def start_runbook(
        name: Annotated[str, Field(description="Runbook name (list_runbooks)", max_length=64)],
        params: Annotated[
            dict[str, Any] | None, Field(description="Runbook parameters by name")
        ] = None,
        dry_run: Annotated[bool, Field(description="Plan every action, change nothing")] = False,
        detail: Detail = False,
    ) -> Run:
        """Run a runbook until it ends or waits for a person's approval or answer.
        Its actions pass the guardrails as you."""
        principal = agent()
        return _run(
            await call(lambda: eng.start(name, params or {}, principal=principal, dry_run=dry_run)),
            detail=detail,
        )

    @mcp.tool(title="Runbook run status", annotations=READ)
    async def runbook_status(run_id: RunId, detail: Detail = False) -> Run:
        """A run's status, what it waits for, the next step, one line per step."""
        return _run(await call(lambda: eng.status(run_id)), detail=detail)

    @mcp.tool(title="List runbook runs", annotations=READ)
    async def list_runs(
        status: Annotated[
            str | None,
            Field(description="Omit for all",
                  max_length=32),
        ] = None,
        limit: Limit = 20,
        cursor: Cursor = None,
    ) -> RunList:  # fmt: skip
        """Runs, newest first: status, what each waits for, the next step."""
        offset = _offset(cursor)
        runs = await call(lambda: eng.list_runs(limit=limit + 1, offset=offset, status=status))
        more = len(runs) > limit
        return RunList(runs=[_summary(r) for r in runs[:limit]],
                       next_cursor=str(offset + limit) if more else None)  # fmt: skip

    @mcp.tool(title="Continue a runbook run", annotations=RUNS_ACTIONS)
    async def continue_runbook(
        run_id: RunId,
        answer: Annotated[
            str | None,
            Field(description="The person's answer to the run's question", max_length=200),
        ] = None,
        code: Annotated[
            str | None,
            Field(description="One-time approval code the person typed in chat", max_length=32),
        ] = None,
        detail: Detail = False,
    ) -> Run:
        """Resume a waiting run once the person decided its approval, or with their approval
        code or answer. A still-pending approval is reported."""
        principal = agent()
        return _run(
            await call(
                lambda: eng.continue_(run_id, principal=principal, answer=answer, code=code)
            ),
            detail=detail,
        )

    try:
        for rb in eng.runbooks().values() if prompts else ():
            _add_prompt(mcp, rb)
    except errors.ClawpointError:
        pass  # a broken runbook file must not stop the server; list_runbooks reports it

    @mcp.resource(
        "clawpoint://runbooks/{name}", title="Runbook definition", mime_type="application/yaml"
    )
    def runbook_definition(name: str) -> str:
        """The YAML of one runbook."""
        rb = eng.runbook(name)  # validates the name and the file
        return (eng.dir / f"{rb.name}.yaml").read_text(encoding="utf-8")

    @mcp.resource("clawpoint://policy", title="Policy in force", mime_type="application/json")
    def policy() -> str:
        """The guardrails policy this server enforces (defaults, rules, limits)."""
        return compact_json(service.guard.policy.model_dump(mode="json"))

    @mcp.resource("clawpoint://audit/recent", title="Recent audit", mime_type="application/json")
    def audit_recent() -> str:
        """The 50 most recent audit entries (plans, decisions, approvals, executions)."""
        entries = service.audit.entries(limit=50)
        return compact_json([e.model_dump(mode="json") for e in entries])

    @mcp.resource(
        "clawpoint://workloads/{workload}/checkpoints",
        title="Workload checkpoints",
        mime_type="application/json",
    )
    def workload_checkpoints(workload: str) -> str:
        """Checkpoints of one workload (id BACKEND:NAME), newest first."""
        items = service.checkpoints(workload)
        return compact_json([views.checkpoint(c) for c in items])

    return eng
