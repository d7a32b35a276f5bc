"""Dispatch tables: how a backend routes a catalogue action to its plan and a step to its code.

A backend keeps two tables instead of if-chains:

- ``PlanTable``: ``Action`` -> ``PlanEntry`` (the function that drafts the plan from the
  target's name and the parameter model it reads). The backend's ``capabilities()`` is the
  table's keys (``capabilities``), so what it declares and what it plans cannot drift;
  ``disagreements`` says where an entry reads another parameter model than the catalogue
  (``core.actions``) gives its action (a test pins that there is none).
- ``StepTable``: step op -> the function that runs it (``run_step``); an op not in the
  table is refused before anything runs (a journal could name anything).
- ``ArgsTable``: step op -> the model of its arguments; ``plan`` checks every step of a
  draft against it, so a plan never records arguments its step cannot read.
- ``OutputTable``: step op -> the model of what it reports; ``plan`` checks that every
  ``$STEP.FIELD`` reference names an earlier step and a field its op reports, and
  ``run_step`` holds each answer to its model (``core.backends.step_models``).

The functions receive the backend's narrow context (a protocol of what plans and steps
need: its client, settings, inventory reads), never the backend class, so the modules
that hold them do not import the backend. Limits: the tables are module-level data, one
per backend; a plan function still resolves its target itself (a node, a job, a pod).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from core import actions as catalogue
from core import errors
from core.actions import ActionParams
from core.backends.base import PlanDraft, ProgressFn, not_supported
from core.backends.step_models import StepOutput, check_output, check_references
from core.model import Action

C = TypeVar("C")  # the backend's context protocol
Obj = dict[str, Any]


@dataclass(frozen=True)
class PlanEntry(Generic[C]):
    """One action of a backend: ``plan(context, target, params)`` with ``params`` an
    instance of ``params`` (the model the function reads)."""

    plan: Callable[[C, str, Any], PlanDraft]
    params: type[ActionParams]


PlanTable = Mapping[Action, PlanEntry[C]]
StepFn = Callable[[C, Obj, ProgressFn], Obj]
StepTable = Mapping[str, StepFn[C]]
ArgsTable = Mapping[str, type[BaseModel]]
OutputTable = Mapping[str, type[StepOutput]]


def capabilities(table: PlanTable[Any]) -> frozenset[Action]:
    """What a backend can do: exactly the actions its plan table holds."""
    return frozenset(table)


def plan(
    table: PlanTable[C],
    context: C,
    action: Action,
    target: str,
    params: ActionParams | Mapping[str, Any] | None,
    *,
    backend: str,
    why_not: Mapping[Action, str] | None = None,
    args: ArgsTable | None = None,
    outputs: OutputTable | None = None,
) -> PlanDraft:
    """The draft of ``action`` on ``target``: NotSupported (with ``why_not[action]`` when the
    backend says why) for an action not in the table; parameters of another action's model
    are refused (``core.actions.parse``) before the plan function runs. With ``args``, each
    step's arguments are checked against their op's model (``check_args``); with ``outputs``,
    its references to earlier steps' outputs too."""
    entry = table.get(action)
    if entry is None:
        raise not_supported(backend, action, (why_not or {}).get(action, ""))
    typed = catalogue.expect(catalogue.parse(action, params), entry.params)
    draft = entry.plan(context, target, typed)
    if args is not None:
        check_args(args, draft, backend=backend)
    if outputs is not None:
        problems = check_references(outputs, draft.steps, draft.on_failure)
        if problems:
            raise _plan_bug(backend, "; ".join(problems))
    return draft


def _plan_bug(backend: str, what: str) -> errors.OperationFailed:
    return errors.OperationFailed(
        f"the {backend} plan {what}",
        hint="this is a bug in the backend's plan; report it with the action and target",
    )


def check_args(table: ArgsTable, draft: PlanDraft, *, backend: str) -> None:
    """OperationFailed (a bug in the backend: no plan is made) when a step of ``draft`` has
    an op without an arguments model, or arguments its model refuses."""
    for s in [*draft.steps, *draft.on_failure]:
        model = table.get(s.op)
        try:
            if model is None:
                raise ValueError(f"no arguments model for the op {s.op!r}")
            model.model_validate(s.args)
        except (ValueError, ValidationError) as exc:
            raise _plan_bug(
                backend, f"has a step {s.name!r} whose op refuses its arguments: {exc}"
            ) from exc


def run_step(
    table: StepTable[C],
    context: C,
    op: str,
    args: Obj,
    progress: ProgressFn,
    *,
    backend: str,
    outputs: OutputTable | None = None,
) -> Obj:
    """Run the step ``op``; InvalidInput (nothing runs) for an op not in the table. With
    ``outputs``, an answer that does not fit its op's model is OperationFailed (a bug in the
    step: the executor then asks the backend whether the step took effect, as for any error,
    so the workload is never left half-moved because of a report's shape)."""
    fn = table.get(op)
    if fn is None:
        raise errors.InvalidInput(f"unknown {backend} step {op!r}", hint="re-plan the action")
    out = fn(context, args, progress)
    wrong = check_output(outputs.get(op), out) if outputs is not None else None
    if wrong is not None:
        raise errors.OperationFailed(
            f"the {backend} step {op!r} answered with an output its model refuses: {wrong}",
            hint="this is a bug in the backend's step; report it with the execution's journal",
            details={"output": out},
        )
    return out


def disagreements(table: PlanTable[Any]) -> list[str]:
    """Where the table and the catalogue disagree: an entry whose function reads a parameter
    model the catalogue's model for that action is not (so a field it reads could never be
    given, or one given would be refused). Empty when they agree."""
    out: list[str] = []
    for action, entry in table.items():
        given = catalogue.spec(action).params
        if not issubclass(given, entry.params):
            out.append(
                f"{action.value}: the plan reads {entry.params.__name__}, the catalogue "
                f"gives {given.__name__}"
            )
    return out
