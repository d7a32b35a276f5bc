"""What every backend's step-argument models share: the base model, ``Later``, and how a
plan builds a step from a model (``build``) and a step reads its arguments back (``read``).

Each backend keeps one model per step op in its own ``step_args`` module (op -> model in
its ``ARGS``); this module holds only the plumbing, so the backends stay independent of one
another. The JSON a step records is the model's fields that were given (``as_args``):
exactly what plans recorded before the models, so plan hashes are unchanged.
Limits: shapes only; whether a job, pod or node exists is the plan's and the step's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from core import errors
from core.model import PlanStep

Later = Annotated[str, StringConstraints(pattern=r"^\$[A-Za-z0-9_-]+\.[A-Za-z0-9_]+$")]
"""An earlier step's output (``$step.field``), resolved when the step runs."""


class StepArgs(BaseModel):
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
