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
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.elicitation import (
    AcceptedElicitation,
    CancelledElicitation,
    DeclinedElicitation,
)
from mcp.server.mcpserver import Context, Elicit, Resolve
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from core.guardrails.approvals import ApprovalView
from core.model import Action, Plan
from core.service.facade import ClientAnswer, ClientAsker, Service
from mcp_server.common import (
    ActionOut,
    ApprovalOut,
    Reason,
    WorkloadId,
    action_out,
    agent,
    call,
    open_record,
    records,
    transport,
)

ACT = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
READ = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
RETURN = ToolAnnotations(  # gives capacity back; moves and loses nothing
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

To = Annotated[
    str | None, Field(description="Target node name; omit to let clawpoint choose", max_length=64)
]
DryRun = Annotated[bool, Field(description="Only return the plan; change nothing")]
CheckpointId = Annotated[
    str, Field(description="Checkpoint id BACKEND:WORKLOAD@SEQ", max_length=140)
]
NodeId = Annotated[str, Field(description="Node id BACKEND:NODE, e.g. slurm:n1", max_length=128)]


class PersonDecision(BaseModel):
    """What the human at the client is asked (flat primitives only)."""

    approve: bool = Field(description="Run this plan now?")
    note: str = Field(default="", description="Optional note for the audit log")


class ApprovalList(BaseModel):
    """Approvals: id, status, summary, risk, requester, expires_at, decided_by (never codes)."""

    approvals: list[dict[str, Any]]


def _question(plan: Plan) -> str:
    lines = [plan.summary + ".", f"Risk: {plan.risk.value}."]
    if plan.expected_pause_s is not None:
        lines.append(f"Expected pause: about {plan.expected_pause_s:.0f} s.")
    for label, text in (("Saves", plan.saves), ("Cost", plan.cost_effect), ("Undo", plan.rollback)):
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
        import inspect

        parameters = [
            inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context)
        ]
        for name in (target_arg, *extra, "dry_run"):
            parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None))
        resolve.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        return resolve

    async def act(action: Action, target: str, params: dict[str, Any], *, dry_run: bool, reason: str,
                  asked: Any, ctx: Context) -> ActionOut:  # fmt: skip
        principal = agent()
        ask = _asker(asked, ctx, asked_plans.pop(ctx.request_id, None))
        return action_out(await call(lambda: service.act(action, target, params, principal=principal, reason=reason,
                                        dry_run=dry_run, ask_client=ask)))  # fmt: skip

    # Spelled as an explicit union: the SDK passes the whole outcome (accepted, declined or
    # cancelled) only when every arm is an elicitation result class; with the aliased
    # ``ElicitationResult[...] | None`` it would unwrap it, failing declined answers as errors
    # and handing the tool a bare model on accept.
    Asked = AcceptedElicitation[PersonDecision] | DeclinedElicitation | CancelledElicitation | None

    @mcp.tool(title="Migrate a workload", annotations=ACT)
    async def migrate_workload(
        workload: WorkloadId, ctx: Context, to: To = None, dry_run: DryRun = False, reason: Reason = "",
        asked: Annotated[Asked, Resolve(resolver(Action.MIGRATE, "workload", ("to",)))] = None,
    ) -> ActionOut:  # fmt: skip
        """Checkpoint a running workload, stop it, restore it on another node (disruptive)."""
        return await act(
            Action.MIGRATE,
            workload,
            {"to": to},
            dry_run=dry_run,
            reason=reason,
            asked=asked,
            ctx=ctx,
        )

    @mcp.tool(title="Preempt a workload", annotations=ACT)
    async def preempt_workload(
        workload: WorkloadId, ctx: Context, dry_run: DryRun = False, reason: Reason = "",
        asked: Annotated[Asked, Resolve(resolver(Action.PREEMPT, "workload"))] = None,
    ) -> ActionOut:  # fmt: skip
        """Checkpoint and stop a workload, freeing its node; resume it later (disruptive)."""
        return await act(
            Action.PREEMPT, workload, {}, dry_run=dry_run, reason=reason, asked=asked, ctx=ctx
        )

    @mcp.tool(title="Resume a workload", annotations=ACT)
    async def resume_workload(
        workload: WorkloadId, ctx: Context, to: To = None, dry_run: DryRun = False, reason: Reason = "",
        asked: Annotated[Asked, Resolve(resolver(Action.RESUME, "workload", ("to",)))] = None,
    ) -> ActionOut:  # fmt: skip
        """Resume a preempted workload from its newest good checkpoint (disruptive)."""
        return await act(
            Action.RESUME,
            workload,
            {"to": to},
            dry_run=dry_run,
            reason=reason,
            asked=asked,
            ctx=ctx,
        )

    @mcp.tool(title="Restore a checkpoint", annotations=ACT)
    async def restore_checkpoint(
        checkpoint: CheckpointId, ctx: Context, to: To = None, dry_run: DryRun = False, reason: Reason = "",
        asked: Annotated[Asked, Resolve(resolver(Action.RESTORE, "checkpoint", ("to",)))] = None,
    ) -> ActionOut:  # fmt: skip
        """Restore a stopped or failed workload from a given checkpoint (disruptive)."""
        return await act(
            Action.RESTORE,
            checkpoint,
            {"to": to},
            dry_run=dry_run,
            reason=reason,
            asked=asked,
            ctx=ctx,
        )

    @mcp.tool(title="Fail over a workload", annotations=ACT)
    async def failover_workload(
        workload: WorkloadId, ctx: Context, to: To = None, dry_run: DryRun = False, reason: Reason = "",
        asked: Annotated[Asked, Resolve(resolver(Action.FAILOVER, "workload", ("to",)))] = None,
    ) -> ActionOut:  # fmt: skip
        """A workload died: restore its newest good checkpoint on another node (disruptive)."""
        return await act(
            Action.FAILOVER,
            workload,
            {"to": to},
            dry_run=dry_run,
            reason=reason,
            asked=asked,
            ctx=ctx,
        )

    @mcp.tool(title="Drain a node", annotations=ACT)
    async def drain_node(
        node: NodeId, ctx: Context, to: To = None, dry_run: DryRun = False, reason: Reason = "",
        asked: Annotated[Asked, Resolve(resolver(Action.DRAIN_NODE, "node", ("to",)))] = None,
    ) -> ActionOut:  # fmt: skip
        """Save and move every workload off a node, then mark it unschedulable (disruptive)."""
        return await act(Action.DRAIN_NODE, node, {"to": to, "reason": reason or None}, dry_run=dry_run,
                         reason=reason, asked=asked, ctx=ctx)  # fmt: skip

    @mcp.tool(title="Undrain a node", annotations=RETURN)
    async def undrain_node(
        node: NodeId, ctx: Context, dry_run: DryRun = False, reason: Reason = "",
        asked: Annotated[Asked, Resolve(resolver(Action.UNDRAIN_NODE, "node"))] = None,
    ) -> ActionOut:  # fmt: skip
        """Return a drained or down node to service so work may land there again (safe)."""
        return await act(Action.UNDRAIN_NODE, node, {}, dry_run=dry_run, reason=reason, asked=asked,
                         ctx=ctx)  # fmt: skip

    @mcp.tool(title="Scale a workload", annotations=ACT)
    async def scale_workload(
        workload: WorkloadId, ctx: Context,
        replicas: Annotated[int, Field(ge=0, le=10000, description="Desired replicas")],
        dry_run: DryRun = False, reason: Reason = "",
        asked: Annotated[Asked, Resolve(resolver(Action.SCALE, "workload", ("replicas",)))] = None,
    ) -> ActionOut:  # fmt: skip
        """Change a workload's replica count (backends that support it; others: denied)."""
        return await act(Action.SCALE, workload, {"replicas": replicas}, dry_run=dry_run, reason=reason,
                         asked=asked, ctx=ctx)  # fmt: skip

    @mcp.tool(title="Delete a checkpoint", annotations=ACT)
    async def delete_checkpoint(
        checkpoint: CheckpointId, ctx: Context, dry_run: DryRun = False, reason: Reason = "",
        asked: Annotated[Asked, Resolve(resolver(Action.DELETE_CHECKPOINT, "checkpoint"))] = None,
    ) -> ActionOut:  # fmt: skip
        """Delete a checkpoint image for good (destructive; the newest good one of a live workload is protected)."""
        return await act(
            Action.DELETE_CHECKPOINT,
            checkpoint,
            {},
            dry_run=dry_run,
            reason=reason,
            asked=asked,
            ctx=ctx,
        )

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
        status: Annotated[str | None, Field(description="pending|approved|denied|expired|used|locked; omit for all")] = "pending",
    ) -> ApprovalList:  # fmt: skip
        """Approval requests and their status (never their codes)."""
        return ApprovalList(
            approvals=records(await call(lambda: service.list_approvals(status=status)))
        )

    @mcp.tool(title="Get an approval", annotations=READ)
    async def get_approval(
        approval_id: Annotated[str, Field(description="Approval id", max_length=64)],
    ) -> ApprovalOut:
        """One approval request: plan, status, who decided, expiry (never its code)."""
        return open_record(ApprovalOut, await call(lambda: service.get_approval(approval_id)))
