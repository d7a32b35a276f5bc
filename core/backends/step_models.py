"""What every backend's step models share: the bases, ``Later``, and the checks that use them.

Each backend keeps, in its own ``step_args`` module, one model per step op for what the step
takes (``ARGS``) and one for what it reports (``OUTPUTS``); this module holds only the
plumbing, so the backends stay independent of one another.

- Arguments: a plan builds a step from its model (``build``), a step reads them back
  (``read``). The JSON a step records is the model's fields that were given (``as_args``):
  exactly what plans recorded before the models, so plan hashes are unchanged.
- References: an argument may be ``$STEP.FIELD``, an earlier step's output, resolved by the
  executor right before the step runs. ``check_references`` refuses, when the plan is made,
  a reference to a step that does not come earlier or to a field that step's op does not
  declare in its output model; before it, a misspelt field failed only mid-execution, after
  the workload had been stopped.
- Outputs: ``check_output`` holds a step's answer to its op's model (the fields later steps
  and readers rely on, typed); fields a model does not declare are kept (the timings, the
  handoff's report: informative, for people).

Limits: shapes only; whether a job, pod or node exists is the plan's and the step's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import ConfigDict, StringConstraints, ValidationError

from core import errors
from core.model import PlanStep
from core.schema_base import Model

Later = Annotated[str, StringConstraints(pattern=r"^\$[A-Za-z0-9_-]+\.[A-Za-z0-9_]+$")]
"""An earlier step's output (``$step.field``), resolved when the step runs."""


class StepOutput(Model):
    """What a step reports. Subclasses declare the fields later steps (``$step.field``) and
    readers rely on; others are kept as given (informative: timings, reports).
    ``recovered``: the output was read back after a crash instead of answered by the step."""

    model_config = ConfigDict(extra="allow", frozen=True)

    recovered: bool = False


class StepArgs(Model):
    model_config = ConfigDict(extra="forbid", frozen=True)

    def as_args(self) -> dict[str, Any]:
        """The JSON a plan records: the fields that were given."""
        return self.model_dump(mode="json", exclude_unset=True)


M = TypeVar("M", bound=StepArgs)


def build(
    table: Mapping[str, type[StepArgs]], name: str, op: str, args: StepArgs, description: str
) -> PlanStep:
    """A plan step running ``op`` with ``args`` (the model ``table`` names for ``op``)."""
    if type(args) is not table[op]:
        raise TypeError(f"step {op!r} takes {table[op].__name__}, not {type(args).__name__}")
    return PlanStep(name=name, op=op, args=args.as_args(), description=description)


def read(model: type[M], args: Mapping[str, Any]) -> M:
    """A step's arguments as ``model``; InvalidInput (nothing runs) when they do not fit,
    e.g. a journal edited by hand."""
    try:
        return model.model_validate(dict(args))
    except ValidationError as exc:
        raise errors.InvalidInput(
            f"the step's arguments do not fit {model.__name__}: {exc}",
            hint="re-plan the action",
        ) from exc


def references(args: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The ``$STEP.FIELD`` values of ``args`` as (argument, step, field)."""
    out = []
    for key, value in args.items():
        if isinstance(value, str) and value.startswith("$") and "." in value:
            step, _, field = value[1:].partition(".")
            out.append((key, step, field))
    return out


def check_references(
    outputs: Mapping[str, type[StepOutput]],
    steps: list[PlanStep],
    on_failure: list[PlanStep],
) -> list[str]:
    """What is wrong with the plan's references (empty: nothing): each must name a step that
    runs before it (for an ``on_failure`` step: any of the plan's steps; one that did not
    finish fails that compensation alone) and a field its op's output model declares."""
    problems: list[str] = []
    earlier: dict[str, str] = {}
    everything = {s.name: s.op for s in steps}
    for s, seen in [*((s, None) for s in steps), *((s, everything) for s in on_failure)]:
        before = earlier if seen is None else seen
        for key, name, field in references(s.args):
            op = before.get(name)
            model = outputs.get(op) if op is not None else None
            if op is None:
                problems.append(f"step {s.name!r}: {key}=${name}.{field} names no earlier step")
            elif model is None or field not in model.model_fields:
                problems.append(
                    f"step {s.name!r}: {key}=${name}.{field}: the {op!r} step reports no {field!r}"
                )
        if seen is None:
            earlier[s.name] = s.op
    return problems


def check_output(model: type[StepOutput] | None, output: Mapping[str, Any]) -> str | None:
    """Why ``output`` does not fit ``model`` (None: it fits, or the op declares nothing)."""
    if model is None:
        return None
    try:
        model.model_validate(dict(output))
    except ValidationError as exc:
        return str(exc)
    return None
