"""Runs a sealed plan step by step against its backend, journaling every step.

A step's arguments may name an earlier step's output as ``$STEP.FIELD`` (the migrate plan's
restore step takes ``$checkpoint.checkpoint_id``). Outputs are persisted before the next
step starts, so ``resume`` can pick up an execution whose process died: it asks the backend
whether the interrupted step completed (``recover_step``) and goes on from there. When a step
reports an error, the backend is first asked whether it took effect anyway
(``reconcile_step``: a lost answer is not a failure); only when it did not, the plan's
``on_failure`` steps run best-effort (restart the workload where it was) and
the execution is marked failed or rolled back.
"""

from __future__ import annotations

import os
import signal
from datetime import datetime
from typing import Any

from core import errors, logs
from core.backends.base import REQUESTER, Backend, ProgressFn, no_progress
from core.backends.step_models import references
from core.model import Execution, ExecutionStatus, Plan, PlanStep, utcnow
from core.service.journal import Journal, OnFinish

log = logs.get_logger("clawpoint.executor")


def resolve_args(args: dict[str, Any], outputs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``args`` with each ``$STEP.FIELD`` replaced by that earlier output (the backend checked
    the references when the plan was made; a journal edited by hand is refused here)."""
    resolved = dict(args)
    for key, step, field in references(args):
        if step not in outputs or field not in outputs[step]:
            raise errors.OperationFailed(
                f"step argument {key}={args[key]} refers to an output that does not exist",
                hint="this is a bug in the backend's plan; report it with the plan JSON",
            )
        resolved[key] = outputs[step][field]
    return resolved


def _as_error(step: PlanStep, exc: Exception) -> errors.ClawpointError:
    if isinstance(exc, errors.ClawpointError):
        return exc
    log.error("step crashed", step=step.name, exc_info=exc)
    return errors.OperationFailed(
        f"step {step.name} crashed: {exc!r}", hint="see the log; the journal has the details"
    )


def _reconcile(
    backend: Backend,
    step: PlanStep,
    args: dict[str, Any],
    started: datetime,
    error: errors.ClawpointError,
) -> dict[str, Any] | None:
    """A step that reported ``error`` may still have taken effect (its answer was lost, a
    timeout fired as it finished): ask the backend what really happened before declaring it
    failed and compensating. Its output, marked as reconciled, or None."""
    try:
        found = backend.reconcile_step(step.op, args, started)
    except Exception as exc:  # the check itself failing leaves the step failed
        log.warning("reconcile check failed", step=step.name, error=str(exc))
        return None
    if found is None:
        return None
    log.warning("step reported an error but took effect", step=step.name, error=str(error))
    return {**found, "reconciled": True, "reported_error": error.message}


def _run_step(
    backend: Backend, step: PlanStep, args: dict[str, Any], progress: ProgressFn, principal: str
) -> dict[str, Any]:
    """Run one step with its execution's principal as ``REQUESTER`` (what the step makes may
    record who asked for it)."""
    token = REQUESTER.set(principal)
    try:
        return backend.run_step(step.op, args, progress)
    finally:
        REQUESTER.reset(token)


def _test_kill_at(plan: Plan, step: PlanStep, when: str) -> None:
    """Fault injection for tests only (never set in production; inert when unset):
    ``CLAWPOINT_TEST_KILL_AT=ACTION:STEP:before|after`` SIGKILLs this process just before
    the named step of a plan of that action runs (journaled as started) or just after its
    output is journaled, so the fault-matrix tests can interrupt every step for real."""
    wanted = os.environ.get("CLAWPOINT_TEST_KILL_AT")
    if wanted and wanted == f"{plan.action.value}:{step.name}:{when}":
        os.kill(os.getpid(), signal.SIGKILL)


class Executor:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def run(
        self,
        plan: Plan,
        backend: Backend,
        *,
        principal: str,
        progress: ProgressFn = no_progress,
        then: OnFinish | None = None,
    ) -> Execution:
        """Run the plan; ``then`` runs in the transaction that finishes it (``Journal.finish``)."""
        execution = self.journal.start(plan, principal)
        return self._continue(
            plan, backend, execution, outputs={}, first=0, progress=progress, then=then
        )

    def resume(
        self, execution: Execution, plan: Plan, backend: Backend, *, then: OnFinish | None = None
    ) -> Execution:
        """Finish an execution whose process died; steps already done are not run again."""
        outputs: dict[str, dict[str, Any]] = {}
        first = 0
        for idx, record in enumerate(execution.steps):
            step = plan.steps[idx]
            if record.status == "done":
                outputs[step.name] = record.output
                first = idx + 1
                continue
            if record.status == "started" and record.started_at is not None:
                args = resolve_args(step.args, outputs)
                recovered = backend.recover_step(step.op, args, record.started_at)
                if recovered is not None:
                    self.journal.step_finished(execution.id, idx, status="done", output=recovered)
                    outputs[step.name] = recovered
                    first = idx + 1
                    continue
            break
        log.info("resuming execution", execution=execution.id, from_step=first)
        return self._continue(
            plan, backend, execution, outputs=outputs, first=first, progress=no_progress, then=then
        )

    def _continue(
        self,
        plan: Plan,
        backend: Backend,
        execution: Execution,
        *,
        outputs: dict[str, dict[str, Any]],
        first: int,
        progress: ProgressFn,
        then: OnFinish | None,
    ) -> Execution:
        total = len(plan.steps)
        for idx in range(first, total):
            step = plan.steps[idx]
            started = utcnow()  # not after the journal's: reconciliation looks from here on
            self.journal.step_started(execution.id, idx)

            def step_progress(
                done: float, of: float | None, message: str, _i: int = idx, _name: str = step.name
            ) -> None:
                # Scale the step's own progress into the plan's: step i covers [i, i+1).
                fraction = (done / of) if of else 0.0
                progress(_i + min(max(fraction, 0.0), 1.0), float(total), f"{_name}: {message}")

            progress(float(idx), float(total), f"{step.name}: {step.description}")
            try:
                args = resolve_args(step.args, outputs)
            except errors.ClawpointError as exc:
                return self._fail(plan, backend, execution, idx, exc, outputs, then)
            _test_kill_at(plan, step, "before")
            try:
                output = _run_step(backend, step, args, step_progress, execution.principal)
            except Exception as exc:  # a bug must not leave the journal "running" forever
                error = _as_error(step, exc)
                found = _reconcile(backend, step, args, started, error)
                if found is None:
                    return self._fail(plan, backend, execution, idx, error, outputs, then)
                output = found
            outputs[step.name] = output
            self.journal.step_finished(execution.id, idx, status="done", output=output)
            _test_kill_at(plan, step, "after")
        progress(float(total), float(total), "done")
        result = {name: out for name, out in outputs.items()}
        self.journal.finish(
            execution.id, status=ExecutionStatus.SUCCEEDED, result=result, then=then
        )
        return self.journal.get(execution.id)

    def _fail(
        self,
        plan: Plan,
        backend: Backend,
        execution: Execution,
        idx: int,
        exc: errors.ClawpointError,
        outputs: dict[str, dict[str, Any]],
        then: OnFinish | None,
    ) -> Execution:
        # Neutral next steps (core.errors): the journal renders them for whoever reads it.
        error = exc.neutral_text()
        self.journal.step_finished(execution.id, idx, status="failed", output={}, error=error)
        status = ExecutionStatus.FAILED
        compensation: list[dict[str, Any]] = []
        if plan.on_failure and idx > 0:
            ok = True
            for step in plan.on_failure:
                compensation.append(self._compensate(step, backend, outputs))
                ok = ok and compensation[-1].get("ok", False)
            if ok:
                status = ExecutionStatus.ROLLED_BACK
        self.journal.finish(
            execution.id,
            status=status,
            result={
                "outputs": outputs,
                "compensation": compensation,
                "error": exc.to_dict(neutral=True),
            },
            error=error,
            then=then,
        )
        return self.journal.get(execution.id)

    def _compensate(
        self, step: PlanStep, backend: Backend, outputs: dict[str, dict[str, Any]]
    ) -> dict[str, Any]:
        try:
            out = backend.run_step(step.op, resolve_args(step.args, outputs), no_progress)
            return {"step": step.name, "ok": True, "output": out}
        except Exception as exc:  # best effort: record and go on
            log.error("compensation failed", step=step.name, error=str(exc))
            return {"step": step.name, "ok": False, "error": str(exc)}
