"""MCP action tools: each plans, asks the guardrails, and acts only when allowed.

Every action tool takes ``dry_run`` (return the plan only) and ``reason`` (shown to people,
audited) and returns one ``ActionResult``: ``executed | approval_required | denied | failed |
planned``. For ``approval_required`` the result names the approval id, its expiry and the
exact ways a person can approve; it never contains the one-time code (that goes only to
people). Only when the operator allows it (``[mcp] elicitation_approval``, for the named
clients and transports) and the client declares elicitation is the client's user asked
first (a resolver runs before the tool body, using the guard's side-effect-free preview);
such an answer is recorded as confirmed by the client's user, never as a person. Otherwise
a pending approval waits for a person. No tool approves anything: ``execute_approved`` only
runs a plan approved for this session (or whose one-time code a person typed into the chat).
"""

# No "from __future__ import annotations": the SDK evaluates tool annotations at
# registration, and the resolvers below are local to register().
import inspect
from typing import Annotated, Any, cast

import anyio.from_thread
from mcp.server import MCPServer
from mcp.server.elicitation import (
    AcceptedElicitation,
    CancelledElicitation,
    DeclinedElicitation,
)
from mcp.server.mcpserver import Context, Elicit, Resolve
from mcp.types import ToolAnnotations
from pydantic import Field
from pydantic.fields import FieldInfo

from core import actions, errors
from core.guardrails.approvals import ApprovalView
from core.model import Action, Plan, RiskClass
from core.schema_base import Model
from core.service import views
from core.service.facade import ClientAnswer, ClientAsker, Service
from mcp_server import registered as registered_tools
from mcp_server.common import (
    READ,
    ActionOut,
    Cursor,
    Detail,
    Limit,
    Reason,
    action_out,
    agent,
    call,
    dry_run_out,
    transport,
)

ACT = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)

DryRun = Annotated[bool, Field(description="Plan only")]


class PersonDecision(Model):
    """What the human at the client is asked (flat primitives only)."""

    approve: bool = Field(description="Run this plan now?")
    note: str = Field(default="", description="Optional note for the audit log")


class ApprovalList(Model):
    """Approvals: id, status, requester, expires_at, decided_by, plan (never codes)."""

    approvals: list[dict[str, Any]]
    next_cursor: str | None = None


def _question(plan: Plan) -> str:
    lines = [plan.summary + ".", f"Risk: {plan.risk.value}."]
    if plan.expected_pause_s is not None:
        lines.append(f"Expected pause: about {plan.expected_pause_s:.0f} s.")
    for label, text in (("Saves", plan.saves), ("Cost", plan.cost_effect), ("Undo", plan.undo())):
        if text:
            lines.append(f"{label}: {text}.")
    lines.append("Approve this exact plan?")
    return " ".join(lines)


def _client_name(ctx: Context) -> str:
    """The name the client declares (clientInfo.name): unverified, chosen by the client."""
    try:
        info = ctx.request_context.session.client_params
        return info.client_info.name if info and info.client_info else "unknown"
    except Exception:  # no request context: nothing was declared
        return "unknown"


def _asker(outcome: Any, ctx: Context, asked_hash: str | None) -> ClientAsker | None:
    """Turn a resolved elicitation into the service's ``ask_client`` (or None).

    The SDK hands a resolver that did not ask as an accepted outcome without data: that is
    "nobody was asked", never a yes. A yes only counts for the plan the user was shown
    (``asked_hash``); if the plan the tool makes differs (the world changed while the user
    read the question), the answer is not used and the approval waits for a person. The
    service checks again whether the operator lets this client's answers approve."""
    if outcome is None or (isinstance(outcome, AcceptedElicitation) and outcome.data is None):
        return None

    def ask(plan: Plan, view: ApprovalView) -> ClientAnswer | None:
        if asked_hash is None or plan.hash != asked_hash:
            return None
        if isinstance(outcome, AcceptedElicitation):
            data = outcome.data
            if not isinstance(data, PersonDecision):
                return None
            return ClientAnswer(approved=data.approve, note=data.note)
        return ClientAnswer(
            approved=False, note="declined" if outcome.action == "decline" else "cancelled"
        )

    return ClientAsker(client=_client_name(ctx), transport=transport(), ask=ask)


def _progress(ctx: Context) -> Any:
    """A progress callback that reports to the client (best effort, from a worker thread)."""

    def progress(done: float, total: float | None, message: str) -> None:
        try:
            anyio.from_thread.run(lambda: ctx.report_progress(done, total=total, message=message))
        except Exception:  # progress is best effort; never fail the action for it
            pass

    return progress


def _annotations(spec: actions.ActionSpec) -> ToolAnnotations:
    # Risk at the defaults: a safe action (a leave-running checkpoint, an undrain) is not
    # destructive; a parameter that raises the risk (fresh, save=false) is the guard's call.
    safe = spec.risk({}) is RiskClass.SAFE
    return ToolAnnotations(read_only_hint=False, destructive_hint=not safe,
                           idempotent_hint=False, open_world_hint=False)  # fmt: skip


def _register_action(
    mcp: MCPServer[Any], spec: actions.ActionSpec, act: Any, resolver: Any, asked_type: Any
) -> None:
    """Register ``spec``'s MCP tool: target, the model's fields, ``dry_run``, ``reason``.

    The function's signature is built from the catalogue (the SDK reads ``__signature__``
    and ``__annotations__``). Redirected arguments (``checkpoint_workload``'s ``stop``) are
    accepted but left out of the advertised schema, so a call that uses one gets the
    service's error naming the right tool instead of a bare "unexpected argument"."""
    target = spec.target.value
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter(target, kw, annotation=Annotated[str, Field(
            description=actions.TARGET_HELP[spec.target], max_length=140)]),
        inspect.Parameter("ctx", kw, annotation=Context),
    ]  # fmt: skip
    for arg in spec.arguments():
        described: Any = Annotated[arg.annotation, FieldInfo.merge_field_infos(arg.info)]
        default = inspect.Parameter.empty if arg.required else arg.default
        params.append(inspect.Parameter(arg.name, kw, default=default, annotation=described))
    for name, other in spec.redirects.items():
        hidden = Annotated[bool | None, Field(description=f"use {actions.spec(other).mcp_tool}")]
        params.append(inspect.Parameter(name, kw, default=None, annotation=hidden))
    params += [
        inspect.Parameter("dry_run", kw, default=False, annotation=DryRun),
        inspect.Parameter("reason", kw, default="", annotation=Reason),
        inspect.Parameter("asked", kw, default=None, annotation=Annotated[
            asked_type, Resolve(resolver(spec.action, target, tuple(spec.fields())))]),
    ]  # fmt: skip

    async def tool(**kwargs: Any) -> ActionOut:
        ctx = kwargs.pop("ctx")
        ref = kwargs.pop(target)
        dry_run, reason, asked = kwargs.pop("dry_run"), kwargs.pop("reason"), kwargs.pop("asked")
        return cast(ActionOut, await act(spec.action, ref, kwargs, dry_run=dry_run,
                                         reason=reason, asked=asked, ctx=ctx))  # fmt: skip

    doc = errors.render(spec.description)  # next steps named as tools
    actions.signed(tool, name=spec.mcp_tool, doc=doc, params=params, returns=ActionOut)
    mcp.tool(name=spec.mcp_tool, title=spec.title, annotations=_annotations(spec))(tool)
    if spec.redirects:
        registered = registered_tools.find(mcp, spec.mcp_tool)
        if registered is not None:
            for name in spec.redirects:
                registered.parameters.get("properties", {}).pop(name, None)


def register(mcp: MCPServer[Any], service: Service) -> None:
    asked_plans: dict[str, str] = {}  # request id -> hash of the plan its person was asked about

    def resolver(action: Action, target_arg: str, extra: tuple[str, ...] = ()) -> Any:
        def resolve(ctx: Context, **kwargs: Any) -> Any:
            caps = ctx.client_capabilities
            if kwargs.get("dry_run") or caps is None or caps.elicitation is None:
                return None  # cannot ask this client's human: a pending approval will wait
            params = {k: kwargs.get(k) for k in extra}
            plan = service.plan_needing_person(
                action,
                kwargs[target_arg],
                params,
                principal=agent(),
                client=_client_name(ctx),
                transport=transport(),
            )
            if plan is None:
                return None
            while len(asked_plans) > 256:  # questions never answered leave an entry behind
                asked_plans.pop(next(iter(asked_plans)))
            asked_plans[ctx.request_id] = plan.hash
            return Elicit(_question(plan), PersonDecision)

        # The SDK matches resolver parameters to tool arguments by name.
        parameters = [
            inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context)
        ]
        for name in (target_arg, *extra, "dry_run"):
            parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None))
        return actions.signed(resolve, name="resolve", doc="", params=parameters)

    async def act(action: Action, target: str, params: dict[str, Any], *, dry_run: bool, reason: str,
                  asked: Any, ctx: Context) -> ActionOut:  # fmt: skip
        principal = agent()
        ask = _asker(asked, ctx, asked_plans.pop(ctx.request_id, None))
        progress = _progress(ctx)
        return await dry_run_out(service, await call(lambda: service.act(action, target, params, principal=principal,
                                 reason=reason, dry_run=dry_run, ask_client=ask, progress=progress)))  # fmt: skip

    # Spelled as an explicit union: the SDK passes the whole outcome (accepted, declined or
    # cancelled) only when every arm is an elicitation result class; with the aliased
    # ``ElicitationResult[...] | None`` it would unwrap it, failing declined answers as errors
    # and handing the tool a bare model on accept.
    Asked = AcceptedElicitation[PersonDecision] | DeclinedElicitation | CancelledElicitation | None

    # Every action tool comes from the catalogue (core.actions): its name, title,
    # description, target argument and parameters (with their descriptions), so the tools
    # cannot drift from what the service validates.
    for spec in actions.CATALOGUE.values():
        _register_action(mcp, spec, act, resolver, Asked)

    @mcp.tool(title="Execute an approved plan", annotations=ACT)
    async def execute_approved(
        approval_id: Annotated[str, Field(description="The approval id from approval_required", max_length=64)],
        code: Annotated[str | None, Field(description="One-time code a person typed in the chat, if any", max_length=32)] = None,
    ) -> ActionOut:  # fmt: skip
        """Run, once, the exact plan a person approved (or whose code the person gave you)."""
        principal = agent()
        return action_out(
            await call(
                lambda: service.execute_approved(approval_id, principal=principal, code=code)
            )
        )

    @mcp.tool(title="List approvals", annotations=READ)
    async def list_approvals(
        status: Annotated[str, Field(description="all: every state")] = "pending",
        limit: Limit = 20, cursor: Cursor = None, detail: Detail = False,
    ) -> ApprovalList:  # fmt: skip
        """Approval requests, newest first, each with its compact plan (never their codes)."""
        # Paged in the database (keyset on an index): fast with thousands of requests.
        wanted = None if status == "all" else status
        chunk, more, _total = await call(
            lambda: service.page_approvals(status=wanted, limit=limit, cursor=cursor)
        )
        return ApprovalList(approvals=[views.approval(v, detail=detail) for v in chunk],
                            next_cursor=more)  # fmt: skip

    @mcp.tool(title="Get an approval", annotations=READ)
    async def get_approval(
        approval_id: Annotated[str, Field(description="Approval id", max_length=64)],
        detail: Detail = False,
    ) -> dict[str, Any]:
        """One approval request: status, who decided, expiry, compact plan (never its code)."""
        return views.approval(await call(lambda: service.get_approval(approval_id)), detail=detail)
