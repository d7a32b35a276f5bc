"""The runbook engine: run a runbook step by step with every bit of progress in SQLite.

``start`` binds the parameters and runs until the run ends or must wait; ``continue_`` picks
a run up again from the database (any process: the MCP server after a restart, the CLI).
A run waits at an ``approval`` gate while its action's approval is pending (a person decides
through ``clawpoint approvals``; the engine never approves), and at an ``ask`` step until
someone passes the person's answer. Tool steps call the service directly
(``core.runbooks.calls``) as the run's principal, so the guardrails apply to every action.

Crash safety: an action step is marked ``started`` before the call and its result recorded
after it. A run found with an action ``started`` but no result is failed with a pointer to
the audit log instead of repeating the action (a read step simply runs again). Approved
plans run through ``execute_approved``, which consumes the approval, so they run once.

Timeouts fire without anyone calling ``continue``: ``advance_due(now)`` moves every waiting
run whose gate or question timed out along its ``on_timeout`` branch (the watch pass and the
MCP server's periodic task call it). A gate that times out withdraws its pending approval, so
a late "approve" can no longer run an action the run has given up on.

What interfaces show of a run (``RunView``, ``RunSummary``, ``RunChange``) is
``core.runbooks.views``'s.

Limits: ``wait`` steps and ``until`` polling sleep in the calling thread (keep them short or
prefer an ask/approval).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from core import errors
from core.guardrails.approvals import ApprovalStatus, session_free
from core.guardrails.notify import slack_escape
from core.model import ExecutionStatus, Principal, PrincipalKind, utcnow
from core.runbooks import loading, schema, templates, tools
from core.runbooks.calls import CALLS, CallContext, ToolCall, check_params
from core.runbooks.store import RunRecord, RunStatus, RunStore, Waiting, new_run_id
from core.runbooks.views import RunChange, RunSummary, RunView, summary, view
from core.service.facade import ActionResult, Service

__all__ = ["Engine", "default_runbooks_dir"]

_OK_ACTION = ("executed", "planned", "approval_required")


def default_runbooks_dir() -> Path:
    """``$CLAWPOINT_RUNBOOKS``, else the ``runbooks/`` folder shipped with clawpoint."""
    env = os.environ.get("CLAWPOINT_RUNBOOKS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "runbooks"


_WAITING = (RunStatus.WAITING_APPROVAL.value, RunStatus.WAITING_ANSWER.value)


class _Wait(Exception):
    """Internal: the current step waits (the run's status and ``waiting`` are set)."""


class Engine:
    def __init__(
        self,
        service: Service,
        *,
        runbooks_dir: Path | None = None,
        calls: Mapping[str, ToolCall] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.service = service
        self.dir = runbooks_dir or default_runbooks_dir()
        self.store = RunStore(service.db)
        self.calls: dict[str, ToolCall] = {**CALLS, **(calls or {})}
        self.calls.setdefault("list_runbooks", lambda _s, _a, _c: self._list_call())
        self.calls.setdefault("runbook_status", lambda _s, a, _c: self._status_call(a))
        self._sleep = sleep

    # ------------------------------------------------------------------ catalogue
    def runbooks(self) -> dict[str, schema.Runbook]:
        return loading.load_all(self.dir)

    def runbook(self, name: str) -> schema.Runbook:
        path = self.dir / f"{name}.yaml"
        # A name outside the runbook pattern never reaches the file system: no path outside
        # the folder, no OSError for a name too long or holding NUL.
        if not re.fullmatch(schema._ID, name) or not path.is_file():
            raise errors.NotFound(
                f"no runbook {name[:80]!r}",
                hint=f"runbooks are: {', '.join(sorted(self.runbooks()))}",
            )
        return loading.load_runbook(path)

    def _list_call(self) -> Any:
        return {"runbooks": sorted(self.runbooks())}

    def _status_call(self, a: Mapping[str, Any]) -> Any:
        return view(self.store.get(str(a.get("run_id")))).model_dump(mode="json")

    # ------------------------------------------------------------------ runs
    def start(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        *,
        principal: Principal,
        dry_run: bool = False,
        trigger: str | None = None,
    ) -> RunView:
        rb = self.runbook(name)
        bound = rb.bind_params(params or {})
        check_params(self.service, {n: p.type for n, p in rb.params.items()}, bound)
        run = RunRecord(id=new_run_id(), runbook=rb.name, digest=rb.digest(),
                        params=bound, principal=principal,
                        current=rb.steps[0].id, dry_run=dry_run, trigger=trigger)  # fmt: skip
        self.service.audit.append("runbook.start", principal=str(principal), subject=run.id,
                                  data={"runbook": rb.name, "params": run.params,
                                        "dry_run": dry_run})  # fmt: skip
        return view(self._advance(self.store.create(run), rb, principal))

    def status(self, run_id: str) -> RunView:
        return view(self.store.get(run_id))

    def runs(self, *, limit: int = 20) -> list[RunView]:
        return [view(r) for r in self.store.list(limit=limit)]

    def list_runs(self, *, limit: int = 20, offset: int = 0,
                  status: str | None = None) -> list[RunSummary]:  # fmt: skip
        """Concise records, newest first; ``status`` filters (``waiting`` = either wait)."""
        if status is not None and status != "waiting" and status not in set(RunStatus):
            raise errors.InvalidInput(
                f"no run status {status!r}",
                hint="use waiting, " + ", ".join(s.value for s in RunStatus),
            )
        statuses = _WAITING if status == "waiting" else ((status,) if status else ())
        runs = self.store.list(limit=limit, offset=offset, statuses=statuses)
        return [summary(r) for r in runs]

    def advance_due(self, now: datetime | None = None) -> list[RunChange]:
        """Advance every waiting run whose gate or question timed out at ``now``.

        A timed-out gate withdraws its pending approval and follows ``on_timeout``; a question
        takes its ``default`` or follows ``on_timeout``; the run then goes on (as its own
        principal) until it ends or waits again. Runs whose wait is not over are untouched.
        One run's error does not stop the others: it is recorded in that run (it fails)."""
        now = now or utcnow()
        changes: list[RunChange] = []
        for run in self.store.list(limit=10_000, statuses=_WAITING):
            w = run.waiting
            if w is None or run.current is None or not self._due(run, w, now):
                continue
            before, at = run.status, run.current
            try:
                rb = self.runbook(run.runbook)
                if rb.digest() != run.digest:
                    run.record(at, "gate", "error", error="runbook changed while waiting")
                    run.error = (
                        f"step {at}: timed out, and the runbook changed since the run started"
                    )
                    self._go(run, rb, at, "fail")
                    run = self.store.save(run)
                else:
                    run.status = RunStatus.RUNNING
                    run = self._advance(run, rb, run.principal, now=now)
            except errors.Conflict:
                continue  # another process moved it meanwhile: its result stands
            except errors.ClawpointError as exc:  # e.g. the runbook file is gone
                changes.append(RunChange(id=run.id, runbook=run.runbook, step=at, before=before,
                                         status=before, current=at,
                                         message=f"could not advance: {exc}"))  # fmt: skip
                continue
            last = run.messages[-1] if run.messages else ""
            changes.append(RunChange(id=run.id, runbook=run.runbook, step=at, before=before,
                                     status=run.status, current=run.current,
                                     message=run.error or last))  # fmt: skip
        return changes

    def _due(self, run: RunRecord, w: Waiting, now: datetime) -> bool:
        try:
            step = self.runbook(run.runbook).step(w.step)
        except errors.ClawpointError:
            return False
        timeout = getattr(step, "timeout", None)
        if timeout is not None and (now - w.since).total_seconds() > float(timeout):
            return True
        if w.approval_id:  # the approval itself expired or was locked
            status = self.service.get_approval(w.approval_id).status
            return status in (ApprovalStatus.EXPIRED, ApprovalStatus.LOCKED)
        return False

    def continue_(
        self, run_id: str, *, principal: Principal, answer: str | None = None,
        confirm: bool = False, code: str | None = None,
    ) -> RunView:  # fmt: skip
        """Go on from where the run waits; a still-pending gate or question says so.

        ``code``: the one-time code a person gave in chat for the approval the run waits on;
        it approves that approval (a wrong code counts an attempt), then the run goes on.

        Only a person or the agent that started the run (any of its sessions: a run outlives
        the session that started it) may continue it, since continuing runs the plans
        approved for the run's principal."""
        run = self.store.get(run_id)
        _require_owner(run, principal)
        if run.status.finished:
            return view(run)
        rb = self.runbook(run.runbook)
        if rb.digest() != run.digest:
            raise errors.Conflict(
                f"runbook {rb.name!r} changed since run {run.id} started",
                hint="start a new run of the current runbook; this one cannot continue safely",
            )
        if code is not None and not (run.status is RunStatus.WAITING_APPROVAL and run.waiting
                                     and run.waiting.approval_id):  # fmt: skip
            raise errors.InvalidInput(f"run {run.id} waits for no approval a code could approve",
                                      hint=view(run).next or "nothing to approve")  # fmt: skip
        if answer is not None and run.status is not RunStatus.WAITING_ANSWER:
            raise errors.InvalidInput(f"run {run.id} does not wait for an answer ({run.status})",
                                      hint=view(run).next or "nothing to answer")  # fmt: skip
        if run.status is RunStatus.WAITING_ANSWER:
            if answer is None:
                return view(run)
            answer = _choice(rb.step(str(run.current)), answer)  # refuse before changing anything
        if code is not None and run.waiting and run.waiting.approval_id:
            # The engine presents the code as the run's principal (the requester of every
            # approval in the run); the caller was checked above. Wrong codes are refused here
            # without changing the run.
            self.service.guard.approvals.approve_with_code(run.waiting.approval_id, code,
                                                           run.principal)  # fmt: skip
        run.status = RunStatus.RUNNING
        return view(self._advance(run, rb, principal, answer=answer, confirm=confirm))

    def cancel(self, run_id: str, *, principal: Principal, why: str = "") -> RunView:
        run = self.store.get(run_id)
        if not run.status.finished:
            run.status, run.current, run.waiting = RunStatus.CANCELLED, None, None
            run.messages.append(f"cancelled by {principal}" + (f": {why}" if why else ""))
            run = self.store.save(run)
        return view(run)

    # ------------------------------------------------------------------ stepping
    def _advance(self, run: RunRecord, rb: schema.Runbook, caller: Principal, *,
                 answer: str | None = None, confirm: bool = False,
                 now: datetime | None = None) -> RunRecord:  # fmt: skip
        while run.status is RunStatus.RUNNING and run.current is not None:
            step = rb.step(run.current)
            try:
                if step.when is not None and not step.when.evaluate(run.context()):
                    run.record(step.id, step.kind, "skipped")
                    target = "continue"
                else:
                    target = self._step(run, step, caller, answer=answer, confirm=confirm,
                                        now=now)  # fmt: skip
                    answer, confirm = None, False
            except _Wait:
                return self.store.save(run)
            except errors.ClawpointError as exc:
                run.record(step.id, step.kind, "error", error=str(exc))
                target = "fail"
                run.error = f"step {step.id}: {exc}"
            self._go(run, rb, step.id, target)
            run = self.store.save(run)
        return run

    def _go(self, run: RunRecord, rb: schema.Runbook, step_id: str, target: str) -> None:
        run.waiting = None
        if target == "continue":
            i = rb.index(step_id) + 1
            run.current = rb.steps[i].id if i < len(rb.steps) else None
            target = "stop" if run.current is None else target
        elif target not in ("stop", "fail"):
            run.current = target
        if target in ("stop", "fail"):
            run.current = None
            run.status = RunStatus.SUCCEEDED if target == "stop" else RunStatus.FAILED
            if target == "fail" and not run.error:
                last = run.last(step_id)
                run.error = (f"step {step_id}: {last.error}" if last is not None and last.error
                             else f"failed at step {step_id}")  # fmt: skip
            self.service.audit.append("runbook.end", principal=str(run.principal),
                                      subject=run.id, data={"status": run.status.value,
                                                            "at": step_id})  # fmt: skip

    def _step(self, run: RunRecord, step: Any, caller: Principal, *, answer: str | None,
              confirm: bool, now: datetime | None = None) -> str:  # fmt: skip
        if isinstance(step, schema.ToolStep):
            return self._tool(run, step)
        if isinstance(step, schema.ApprovalStep):
            return self._gate(run, step, caller, confirm=confirm, now=now or utcnow())
        if isinstance(step, schema.AskStep):
            return self._ask(run, step, caller, answer, now=now or utcnow())
        ctx = run.context()
        if isinstance(step, schema.CheckStep):
            result = step.condition.evaluate(ctx)
            run.record(step.id, step.kind, "ok", {"result": result})
            target: str = step.then if result else step.else_
            if step.message and target in ("stop", "fail"):
                text = str(templates.render(step.message, ctx, strict=False)).strip()
                self._notify(run, step.id, text, "info" if target == "stop" else "warning")
                if target == "fail":
                    run.error = f"step {step.id}: {text}"
            return target
        if isinstance(step, schema.NotifyStep):
            text = templates.render(step.message, ctx, strict=False)
            sent = self._notify(run, step.id, text, step.severity)
            run.record(step.id, step.kind, "ok", {"sent": sent, "message": str(text).strip()})
            return step.next
        if isinstance(step, schema.WaitStep):
            self._sleep(step.duration)
            run.record(step.id, step.kind, "ok", {"waited_s": step.duration})
            return step.next
        raise errors.InvalidInput(f"unknown step kind {step.kind!r}")  # pragma: no cover

    def _tool(self, run: RunRecord, step: schema.ToolStep) -> str:
        call = self.calls.get(step.tool)
        if call is None:
            raise errors.NotSupported(f"tool {step.tool!r} cannot run inside a runbook",
                                      hint="use a person or the MCP tool directly")  # fmt: skip
        acting = tools.is_mutating(step.tool)
        last = run.last(step.id)
        if acting and last is not None and last.status == "started":
            raise errors.Conflict(
                f"action step {step.id!r} was interrupted before its result was recorded",
                hint=f"check the audit log (resource clawpoint://audit/recent, or 'clawpoint audit') and {errors.step('list_approvals')} for what ran, "
                "then start a new run if still needed; actions are never repeated blindly",
            )
        try:
            args = templates.render(step.args, run.context())
        except errors.ClawpointError as exc:
            run.record(step.id, step.kind, "error", error=str(exc))
            return step.on_error
        cctx = CallContext(principal=run.principal, trigger=run.trigger, dry_run=run.dry_run)
        if acting:
            run.record(step.id, step.kind, "started")
            saved = self.store.save(run)
            run.version = saved.version
        deadline = time.monotonic() + (step.timeout or 0)
        attempts = 0
        while True:
            attempts += 1
            try:
                out = call(self.service, args, cctx)
            except errors.ClawpointError as exc:
                if attempts <= step.retries:
                    continue
                run.record(step.id, step.kind, "error", error=str(exc))
                return step.on_error
            if step.until is not None:
                ctx = run.context()
                ctx["steps"] = {**ctx["steps"], step.id: out}
                if not step.until.evaluate(ctx):
                    if step.timeout is None or time.monotonic() + step.every <= deadline:
                        self._sleep(step.every)
                        continue
                    run.record(step.id, step.kind, "error", out, "condition not met in time")
                    return step.on_error
            break
        if acting and isinstance(out, Mapping) and out.get("status") not in _OK_ACTION:
            run.record(step.id, step.kind, "error", out, str(out.get("message", "")))
            return step.on_error
        run.record(step.id, step.kind, "ok", out)
        return step.next

    def _gate(self, run: RunRecord, step: schema.ApprovalStep, caller: Principal, *,
              confirm: bool, now: datetime) -> str:  # fmt: skip
        act = run.last(step.for_)
        out = act.output if act is not None and isinstance(act.output, Mapping) else None
        if out is None or act is None or act.status == "skipped":
            run.record(step.id, step.kind, "skipped")
            return step.next
        if out.get("status") != "approval_required":
            run.record(step.id, step.kind, "ok",
                       {"status": out.get("status"), "approval_id": None, "result": out})  # fmt: skip
            return step.next
        ctx = run.context()
        approval = out.get("approval")
        waited = run.waiting.since if run.waiting and run.waiting.step == step.id else now
        timed_out = (now - waited).total_seconds() > step.timeout
        if approval is None:  # a person started the run: they confirm the plan themselves
            plan_hash = str((out.get("plan") or {}).get("hash"))
            if timed_out:
                run.record(step.id, step.kind, "ok", {"status": "timeout", "approval_id": None})
                return step.on_timeout
            if not (confirm and caller.kind is PrincipalKind.PERSON):
                self._wait(run, step, RunStatus.WAITING_APPROVAL,
                           Waiting(step=step.id, kind="confirm", plan_hash=plan_hash,
                                   since=waited),
                           templates.render(step.message, ctx, strict=False))  # fmt: skip
            plan = self.service.journal.get_plan(plan_hash)
            result = self.service.perform(plan, principal=caller, confirmed=True)
            return self._approved(run, step, None, result)
        approval_id = str(approval["id"])
        status = self.service.get_approval(approval_id).status
        prior = run.last(step.id)
        if status is ApprovalStatus.PENDING and timed_out:
            status = self._withdraw(run, approval_id)
            if status is ApprovalStatus.DENIED:  # withdrawn: nobody can approve it any more
                run.record(step.id, step.kind, "ok", {"status": "timeout", "withdrawn": True,
                                                      "approval_id": approval_id})  # fmt: skip
                return step.on_timeout
        if status is ApprovalStatus.PENDING:
            text = templates.render(step.message, ctx, strict=False)
            self._wait(run, step, RunStatus.WAITING_APPROVAL,
                       Waiting(step=step.id, kind="approval", approval_id=approval_id,
                               how_to_approve=approval.get("how_to_approve") or [],
                               expires_at=approval.get("expires_at"), since=waited),
                       f"{text} Approve: clawpoint approvals approve {approval_id}")  # fmt: skip
        if status is ApprovalStatus.APPROVED:
            run.record(step.id, step.kind, "started", {"approval_id": approval_id})
            run.version = self.store.save(run).version
            result = self.service.execute_approved(approval_id, principal=run.principal)
            return self._approved(run, step, approval_id, result)
        if status is ApprovalStatus.DENIED:
            run.record(step.id, step.kind, "ok", {"status": "denied",
                                                  "approval_id": approval_id})  # fmt: skip
            return step.on_denied
        if status in (ApprovalStatus.EXPIRED, ApprovalStatus.LOCKED):
            run.record(step.id, step.kind, "ok", {"status": "expired",
                                                  "approval_id": approval_id})  # fmt: skip
            return step.on_timeout
        started = prior is not None and prior.status == "started"
        adopted = None if started else self._used_by_run(run, approval_id)
        if adopted is not None:  # executed directly (execute_approved with a chat code)
            return self._approved(run, step, approval_id, adopted)
        raise errors.Conflict(
            f"approval {approval_id} was already used"
            + (" by this run, but its result was not recorded" if started else ""),
            hint="see the audit log (resource clawpoint://audit/recent, or 'clawpoint audit') for the execution; start a new run if still needed",
        )

    def _withdraw(self, run: RunRecord, approval_id: str) -> ApprovalStatus:
        """Withdraw the pending approval of a timed-out gate; its status afterwards (a person
        who approved in the last instant wins: APPROVED is returned and the gate goes on)."""
        try:
            self.service.guard.approvals.cancel(
                approval_id, run.principal, f"runbook run {run.id} stopped waiting (gate timeout)"
            )
        except errors.Conflict:
            pass
        return self.service.get_approval(approval_id).status

    def _used_by_run(self, run: RunRecord, approval_id: str) -> ActionResult | None:
        """The result of an approval the run's own agent already executed outside the run
        (the chat-code route: ``execute_approved`` with the person's code), so the run can go
        on instead of failing with "already used"; None when it was someone else's use."""
        view_ = self.service.get_approval(approval_id)
        if view_.status is not ApprovalStatus.USED:
            return None
        owner = session_free(run.principal.id)
        for ex in self.service.journal.recent(limit=200):
            kind, _, who = ex.principal.partition(":")
            if (ex.plan_hash == view_.plan_hash and kind == run.principal.kind.value
                    and session_free(who) == owner):  # fmt: skip
                ok = ex.status is ExecutionStatus.SUCCEEDED
                return ActionResult(
                    status="executed" if ok else "failed", plan=view_.plan, execution=ex,
                    message=view_.plan.summary + (": done" if ok else f": {ex.error}"),
                )  # fmt: skip
        return None

    def _approved(self, run: RunRecord, step: schema.ApprovalStep, approval_id: str | None,
                  result: ActionResult) -> str:  # fmt: skip
        rec = {"status": "approved", "approval_id": approval_id,
               "result": result.model_dump(mode="json")}  # fmt: skip
        if result.status in ("executed", "planned"):
            run.record(step.id, step.kind, "ok", rec)
            return step.next
        run.record(step.id, step.kind, "error", rec, result.message)
        run.error = f"step {step.id}: approved action {result.status}: {result.message}"
        # The approved action failed: follow its step's on_error when that jumps past the gate.
        ids = [s.id for s in self.runbook(run.runbook).steps]
        on_error = self.runbook(run.runbook).step(step.for_).on_error
        if on_error in ids and ids.index(on_error) > ids.index(step.id):
            return str(on_error)
        return "stop" if on_error == "stop" else "fail"

    def _ask(self, run: RunRecord, step: schema.AskStep, caller: Principal,
             answer: str | None, *, now: datetime) -> str:  # fmt: skip
        waiting = run.waiting if run.waiting and run.waiting.step == step.id else None
        if answer is not None and waiting is not None:
            chosen = _choice(step, answer)
            run.record(step.id, step.kind, "ok", {"answer": chosen, "answered_by": str(caller)})
            return step.next
        since = waiting.since if waiting else now
        if (now - since).total_seconds() > step.timeout:
            if step.default is None:
                run.record(step.id, step.kind, "ok", {"answer": None, "answered_by": "timeout"})
                return step.on_timeout
            run.record(step.id, step.kind, "ok", {"answer": step.default,
                                                  "answered_by": "default (timeout)"})  # fmt: skip
            return step.next
        question = str(templates.render(step.question, run.context(), strict=False)).strip()
        choices = [{"value": c.value, "label": c.label} for c in step.choices]
        self._wait(run, step, RunStatus.WAITING_ANSWER,
                   Waiting(step=step.id, kind="answer", question=question, choices=choices,
                           since=since), question)  # fmt: skip
        raise AssertionError("unreachable")  # pragma: no cover

    def _wait(self, run: RunRecord, step: Any, status: RunStatus, waiting: Waiting,
              text: str) -> None:  # fmt: skip
        """Park the run at ``step``; tell people only the first time it starts waiting."""
        first = not (run.waiting and run.waiting.step == step.id)
        waiting.message = text
        run.status, run.waiting = status, waiting
        if first:
            self._notify(run, step.id, text, "warning")
        raise _Wait

    def _notify(self, run: RunRecord, step_id: str, text: str, severity: str) -> bool:
        run.messages.append(f"[{severity}] {step_id}: {text}".strip())
        notifier = getattr(self.service.guard, "notifier", None)
        if notifier is None or not getattr(notifier, "enabled", False):
            return False
        # The text holds runbook arguments (agent input): Slack must show it, not parse it.
        payload = {"text": slack_escape(f"[{run.runbook} {run.id}] {text}"),
                   "clawpoint": {"run": run.id, "runbook": run.runbook, "step": step_id,
                                 "severity": severity}}  # fmt: skip
        return bool(notifier.send(payload))


def _choice(step: Any, answer: str) -> str:
    """The choice value ``answer`` names (by value or label); ``InvalidInput`` otherwise."""
    if not isinstance(step, schema.AskStep):
        raise errors.InvalidInput(f"step {step.id!r} asks no question")
    values = {c.value: c.value for c in step.choices}
    values.update({c.label.lower(): c.value for c in step.choices})
    chosen = values.get(answer) or values.get(answer.strip().lower())
    if chosen is None:
        raise errors.InvalidInput(
            f"{answer!r} is not an answer to {step.id!r}",
            hint=f"answer one of: {', '.join(c.value for c in step.choices)}",
        )
    return chosen


def _require_owner(run: RunRecord, caller: Principal) -> None:
    """Refuse an agent other than the one that started ``run`` (people may continue any)."""
    owner = run.principal
    if caller.kind is PrincipalKind.PERSON or (
        caller.kind is owner.kind and session_free(caller.id) == session_free(owner.id)
    ):
        return
    raise errors.PolicyDenied(
        f"run {run.id} was started by {owner}; {caller} cannot continue it",
        hint="start your own run, or ask a person: clawpoint runbook continue RUN",
    )
