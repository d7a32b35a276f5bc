"""The guard: the one object the service asks "may this plan run, and if not, who can say yes?".

Flow (``core.service``): seal a plan -> ``decide`` -> allow: execute / approve:
``request_approval`` and return the paths to the caller / deny: refuse with the reason.
After a person approves, the service calls ``consume`` right before executing, which
succeeds once per approval and only for the exact plan hash.

``decide`` combines the policy (``policy.evaluate``: dry-run, protections, limits, rules,
defaults) with standing grants: a policy "approve" becomes "allow" when a grant covers the
plan and has budget left (the use is counted atomically and audited with the grant id). A
grant scoped to a trigger covers a plan only on evidence clawpoint observed itself
(``core.guardrails.evidence``); the ``trigger`` a caller passes is audited as its claim and
never matched, and the evidence used goes into the decision, its reason and the audit.
``preview`` is the same answer without any side effect (no grant use, no audit entry): it
serves dry runs and the question "would a person be asked?" (the elicitation preview), so
only a real execution ever spends a grant's budget. An approved plan is re-checked with
``decide(..., approved=True)``: limits and denials still apply, and no grant is spent on it.
``request_approval`` fails closed: if no person can be reached (no CLI path, no page, the
webhook absent or failing, no elicitation) the request is withdrawn and PolicyDenied is
raised. Every decision, approval event and grant use goes to the audit log.
Limits: the guard trusts the ``PolicyContext`` the service builds (counts, pool sizes).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from core import errors, logs
from core.guardrails.approval_codes import load_or_create_secret
from core.guardrails.approvals import (
    ApprovalsConfig,
    ApprovalStore,
    ApprovalView,
)
from core.guardrails.audit import AuditLog
from core.guardrails.grants import Grant, GrantStore
from core.guardrails.notify import Notifier, NotifyConfig, build_payload
from core.guardrails.policy import (
    PERSON_ONLY_RULE,
    ApprovalKind,
    Decision,
    Outcome,
    PolicyConfig,
    PolicyContext,
    evaluate,
)
from core.guardrails.prompts import ApprovalPath, approval_text
from core.guardrails.request_facts import Situation
from core.model import Plan, Principal
from core.state.db import Database

log = logs.get_logger(__name__)


class Guard:
    def __init__(
        self,
        *,
        policy: PolicyConfig,
        approvals: ApprovalStore,
        grants: GrantStore,
        audit: AuditLog,
        notifier: Notifier | None = None,
    ) -> None:
        self.policy = policy
        self.approvals = approvals
        self.grants = grants
        self.audit = audit
        self.notifier = notifier
        # What the world says about a plan (deadline, checkpoint, nodes), for the webhook
        # message; set by the service (``Service.situation``). None: the plan's words only.
        self.situation: Callable[[Plan], Situation] | None = None

    @classmethod
    def open(
        cls,
        db: Database,
        *,
        home: Path,
        policy: PolicyConfig | None = None,
        approvals: ApprovalsConfig | None = None,
        notify: NotifyConfig | None = None,
    ) -> Guard:
        """Wire everything from settings; the code key lives in ``home/approval.key`` (0600)."""
        audit = AuditLog(db)
        return cls(
            policy=policy or PolicyConfig(),
            approvals=ApprovalStore(
                db,
                secret=load_or_create_secret(home / "approval.key"),
                audit=audit,
                config=approvals,
            ),
            grants=GrantStore(db, audit=audit),
            audit=audit,
            notifier=Notifier(notify) if notify and notify.webhook_url else None,
        )

    def preview(
        self,
        plan: Plan,
        principal: Principal,
        context: PolicyContext,
        *,
        trigger: str | None = None,
    ) -> Decision:
        """What ``decide`` would answer now, changing nothing: no grant use, no audit entry.

        A grant that covers the plan shows as "allow" with its id; the use it would cost is
        only claimed when the plan really runs (``decide``), and may by then be gone."""
        _require_sealed(plan)
        decision = self._policy(plan, principal, context)
        if decision.outcome is Outcome.APPROVE and _grantable(decision):
            grant = self.grants.match(plan, trigger, principal)
            if grant is not None:
                decision = _covered(decision, grant, uses=grant.used_last_hour + 1)
        return decision

    def decide(
        self,
        plan: Plan,
        principal: Principal,
        context: PolicyContext,
        *,
        trigger: str | None = None,
        dry_run: bool = False,
        approved: bool = False,
    ) -> Decision:
        """The decision for running ``plan`` now, audited.

        ``dry_run``: nothing will run, so it is ``preview`` (no grant use). ``approved``: a
        person already approved this plan; only the policy's refusals (limits, dry-run mode)
        matter, and no grant is spent. Otherwise a grant covering an "approve" is claimed."""
        _require_sealed(plan)
        if dry_run:
            decision = self.preview(plan, principal, context, trigger=trigger)
        else:
            decision = self._policy(plan, principal, context)
            if decision.outcome is Outcome.APPROVE and not approved and _grantable(decision):
                grant = self.grants.claim(plan, principal, trigger)
                if grant is not None:
                    decision = _covered(decision, grant, uses=grant.used_last_hour)
        self.audit.for_plan(
            "decision",
            plan,
            principal,
            {
                "action": plan.action.value,
                "outcome": decision.outcome.value,
                "reason": decision.reason,
                "rule_id": decision.rule_id,
                "grant_id": decision.grant_id,
                "evidence": decision.evidence,
                "risk": decision.risk.value,
                "trigger": trigger,
                **({"passed_limit": decision.passed_limit} if decision.passed_limit else {}),
                **({"dry_run": True} if dry_run else {}),
                **({"approved": True} if approved else {}),
            },
        )
        return decision

    def _situation(self, plan: Plan) -> Situation | None:
        """The situation for the message; a world that cannot be read never stops a request."""
        if self.situation is None:
            return None
        try:
            return self.situation(plan)
        except Exception as exc:  # noqa: BLE001 - the message falls back to the plan's words
            log.warning("no situation for the approval message", error=str(exc))
            return None

    def _policy(self, plan: Plan, principal: Principal, context: PolicyContext) -> Decision:
        context = context.model_copy(update={"principal_kind": principal.kind})
        return evaluate(plan, self.policy, context)

    def request_approval(
        self,
        plan: Plan,
        principal: Principal,
        reason: str,
        *,
        elicitation_available: bool = False,
        needs: ApprovalKind = "any",
    ) -> tuple[ApprovalView, list[ApprovalPath]]:
        """Create a pending approval (or return the same one already waiting), notify people
        of a new one, and say exactly how a person can approve.

        ``elicitation_available``: the caller may ask the user of its own client (the
        operator allowed it); ignored when the request ``needs`` out-of-band approval.
        Raises PolicyDenied (and leaves nothing pending) when no person can be reached.
        """
        _require_sealed(plan)
        elicitation_available = elicitation_available and needs != "out-of-band"
        cfg = self.approvals.config
        webhook = self.notifier is not None and self.notifier.enabled
        if not (cfg.cli_enabled or cfg.page_url or webhook or elicitation_available):
            self.audit.for_plan("approval.no-path", plan, principal)
            raise _no_path(plan)
        # The same request already waiting is returned as it is, and nobody is notified
        # again: asking twice must not make a person decide twice (``ApprovalStore.request``).
        view, created = self.approvals.request(plan, principal, reason, needs=needs)
        paths: list[ApprovalPath] = []
        if elicitation_available:
            paths.append(
                ApprovalPath(
                    kind="elicitation",
                    how="the user of your chat client confirms the question it shows them",
                )
            )
        if cfg.cli_enabled:
            paths.append(
                ApprovalPath(
                    kind="cli",
                    how=f"on the clawpoint host run: {cfg.cli_command} approvals show {view.id} "
                    f"then {cfg.cli_command} approvals approve {view.id}",
                )
            )
        if cfg.page_url:
            paths.append(
                ApprovalPath(kind="page", how=f"open {cfg.page_url.rstrip('/')}/{view.id}")
            )
        if webhook and not created:
            paths.append(
                ApprovalPath(kind="webhook", how="people were notified when it was first asked")
            )
        elif webhook and self.notifier is not None:
            # The message needs the paths known so far (page, CLI), then reports its own fate.
            code = self.approvals.delivery_code(view.id)
            announced = [*paths, _chat_path(view.id)]
            text = approval_text(plan, view, announced, self._situation(plan))
            delivered = self.notifier.send(build_payload(view, text, code, announced))
            paths.append(
                ApprovalPath(
                    kind="webhook",
                    how="a person was notified in the team channel"
                    if delivered
                    else "the webhook notification failed",
                    available=delivered,
                )
            )
        # The chat code only helps if some people path shows the code to a person.
        if any(p.available and p.kind in ("cli", "page", "webhook") for p in paths):
            paths.append(_chat_path(view.id))
        self.audit.append(
            "approval.paths",
            principal=str(principal),
            subject=view.id,
            data={"paths": [p.kind for p in paths if p.available]},
        )
        if not any(p.available for p in paths):
            self.approvals.cancel(view.id, principal, "no approval path could reach a person")
            raise _no_path(plan)
        return view, paths

    def consume(self, approval_id: str, plan: Plan, principal: Principal) -> ApprovalView:
        """Use an approval for this exact plan, once; call right before executing."""
        _require_sealed(plan)
        return self.approvals.consume(approval_id, plan.hash, principal)


def _grantable(decision: Decision) -> bool:
    """A standing grant may cover it: not when a person must vouch for a fact each time."""
    return not decision.rule_id.startswith(f"{PERSON_ONLY_RULE}:")


def _covered(decision: Decision, grant: Grant, *, uses: int) -> Decision:
    seen = grant.evidence
    basis = (
        f" It rests on {seen.trigger} observed for {seen.subject} by {seen.source} at "
        f"{seen.observed_at:%H:%M:%S} UTC (evidence {seen.id}, until {seen.expires_at:%H:%M:%S})."
        if seen is not None
        else ""
    )
    return decision.model_copy(
        update={
            "outcome": Outcome.ALLOW,
            "grant_id": grant.id,
            "evidence": seen.brief() if seen is not None else None,
            "reason": f"Standing approval {grant.id} by {grant.granted_by} covers this "
            f"({grant.reason}); use {uses} of {grant.max_per_hour} this hour.{basis}",
        }
    )


def _chat_path(approval_id: str) -> ApprovalPath:
    return ApprovalPath(
        kind="chat-code",
        how=f"tell the agent the one-time code from the approval message; it submits it "
        f"for approval {approval_id}",
    )


def _require_sealed(plan: Plan) -> None:
    if not plan.hash or plan.hash != plan.compute_hash():
        raise errors.InvalidInput(
            "the plan is not sealed: its hash is missing or does not match its content",
            hint="plan again (plans are sealed when made) and pass the plan unchanged",
        )


def _no_path(plan: Plan) -> errors.PolicyDenied:
    return errors.PolicyDenied(
        f"the {plan.action.value} of {plan.target} needs a person's approval, and no person "
        "can be reached to give it, so it is refused",
        hint="configure an approval path: [approvals] page_url, [notify] webhook_url, or "
        "enable the CLI path ([approvals] cli_enabled = true)",
    )
