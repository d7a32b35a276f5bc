"""Runbook tools, prompts and resources for the MCP server.

``register(mcp, service)`` adds five tools over ``core.runbooks.engine`` (``list_runbooks``,
``start_runbook``, ``runbook_status``, ``list_runs``, ``continue_runbook``), one prompt per shipped runbook
(how to run it with those tools), and read-only resources: runbook definitions, the policy in
force, the recent audit log and a workload's checkpoints. The agent that starts a run is its
principal; approvals it meets come from a person (``clawpoint approvals approve ID``).

Limits: tool descriptions stay short (the whole tool list has a size budget). Prompts are
registered from the runbooks present when the server starts.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver.prompts.base import Prompt, PromptArgument
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from core import errors
from core.runbooks import schema
from core.runbooks.engine import Engine, RunView
from core.service.facade import Service
from mcp_server.common import agent, call

T = TypeVar("T")

READ = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
# A run may execute actions (through the guardrails): mutating, not idempotent.
RUNS_ACTIONS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)

RunId = Annotated[str, Field(description="Run id from start_runbook", max_length=64)]


class RunbookInfo(BaseModel):
    name: str
    title: str
    triggers: list[str]
    params: dict[str, str] = Field(description="name -> 'type, required|optional: description'")


class RunbookList(BaseModel):
    runbooks: list[RunbookInfo]


class Run(BaseModel):
    """A runbook run (``core.runbooks.engine.RunView``) with a compact schema."""

    id: str
    runbook: str
    status: str
    principal: str
    current: str | None
    waiting: dict[str, Any] | None
    steps: list[dict[str, Any]]
    messages: list[str]
    error: str | None
    next: str


class RunList(BaseModel):
    runs: list[dict[str, Any]] = Field(
        description="id, runbook, status, principal, waits_for, current, next, outcome"
    )
    next_offset: int | None = Field(description="pass as offset for more; null: no more")


def _run(v: RunView) -> Run:
    data = v.model_dump(mode="json", exclude={"params", "started_at", "updated_at"})
    return Run.model_validate(data)


def _info(rb: schema.Runbook) -> RunbookInfo:
    params = {
        n: f"{p.type}, {'required' if p.is_required() else 'optional'}: {p.description}"
        for n, p in rb.params.items()
    }
    return RunbookInfo(name=rb.name, title=rb.title, triggers=list(rb.triggers), params=params)


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


def register(mcp: MCPServer[Any], service: Service, *, engine: Engine | None = None) -> Engine:
    """Add the runbook tools, prompts and resources to ``mcp``; returns the engine used."""
    eng = engine or Engine(service)

    @mcp.tool(title="List runbooks", annotations=READ)
    async def list_runbooks() -> RunbookList:
        """Runbooks you can start, with their parameters."""
        books = await call(eng.runbooks)
        return RunbookList(runbooks=[_info(rb) for rb in books.values()])

    @mcp.tool(title="Start a runbook", annotations=RUNS_ACTIONS)
    async def start_runbook(
        name: Annotated[str, Field(description="Runbook name (list_runbooks)", max_length=64)],
        params: Annotated[
            dict[str, Any] | None, Field(description="Runbook parameters by name")
        ] = None,
        dry_run: Annotated[bool, Field(description="Plan every action, change nothing")] = False,
    ) -> Run:
        """Run a runbook until it ends or waits for a person's approval or answer.
        Its actions pass the guardrails as you."""
        principal = agent()
        return _run(
            await call(lambda: eng.start(name, params or {}, principal=principal, dry_run=dry_run))
        )

    @mcp.tool(title="Runbook run status", annotations=READ)
    async def runbook_status(run_id: RunId) -> Run:
        """A run's status, step outputs, messages, and what it waits for."""
        return _run(await call(lambda: eng.status(run_id)))

    @mcp.tool(title="List runbook runs", annotations=READ)
    async def list_runs(
        status: Annotated[
            str | None,
            Field(description="waiting, running, succeeded, failed, ... (all if empty)",
                  max_length=32),
        ] = None,
        limit: Annotated[int, Field(ge=1, le=100)] = 20,
        offset: Annotated[int, Field(ge=0, le=100_000)] = 0,
    ) -> RunList:  # fmt: skip
        """Runs, newest first: status, what each waits for, the next step. Page with offset."""
        runs = await call(lambda: eng.list_runs(limit=limit + 1, offset=offset, status=status))
        more = len(runs) > limit
        return RunList(runs=[r.model_dump(mode="json") for r in runs[:limit]],
                       next_offset=offset + limit if more else None)  # fmt: skip

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
    ) -> Run:
        """Resume a waiting run: after a person decided its approval, with the approval code
        they gave you, or with their answer. A still-pending approval is reported."""
        principal = agent()
        return _run(
            await call(lambda: eng.continue_(run_id, principal=principal, answer=answer, code=code))
        )

    try:
        for rb in eng.runbooks().values():
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
        return json.dumps(service.guard.policy.model_dump(mode="json"), indent=1)

    @mcp.resource("clawpoint://audit/recent", title="Recent audit", mime_type="application/json")
    def audit_recent() -> str:
        """The 50 most recent audit entries (plans, decisions, approvals, executions)."""
        entries = service.audit.entries(limit=50)
        return json.dumps([e.model_dump(mode="json") for e in entries], indent=1)

    @mcp.resource(
        "clawpoint://workloads/{workload}/checkpoints",
        title="Workload checkpoints",
        mime_type="application/json",
    )
    def workload_checkpoints(workload: str) -> str:
        """Checkpoints of one workload (id BACKEND:NAME), newest first."""
        items = service.checkpoints(workload)
        return json.dumps([c.model_dump(mode="json") for c in items], indent=1)

    return eng
