"""The runbook YAML schema: typed models of runbooks, their steps, conditions and parameters.

A runbook is a named, versioned list of steps with typed parameters. Each step has a stable
``id`` (the engine persists progress per step id, so a run can stop at an approval gate or a
question and continue later, even after a restart) and is one of:

- ``tool``: call one MCP tool with arguments that may hold ``{{...}}`` references;
- ``check``: evaluate a condition, then continue, stop, fail, or jump forward;
- ``approval``: wait for a person to resolve the approval an earlier action step asked for;
- ``notify``: tell people something; ``ask``: ask a person a multiple-choice question;
- ``wait``: pause for a fixed time.

Loading files and checking what the models cannot see alone (flow targets, references) is
``core.runbooks.loading``'s.

Limits: this module describes; it runs nothing. Jumps go forward only, so a
run always ends; polling is a tool step's ``until``/``every``/``timeout``. The engine decides
how to deliver notifications and questions. See ``docs/runbooks.md`` for the authoring guide.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BeforeValidator, ConfigDict, Field, field_validator

from core import errors
from core.runbooks import templates
from core.schema_base import Model

__all__ = [
    "ApprovalStep",
    "AskStep",
    "CheckStep",
    "Choice",
    "Compare",
    "Condition",
    "NotifyStep",
    "ParamSpec",
    "Runbook",
    "Step",
    "ToolStep",
    "WaitStep",
    "parse_duration",
]

SCHEMA_VERSION = 1
FLOW_KEYWORDS = ("continue", "stop", "fail")
RUN_FIELDS = ("id", "runbook", "started_at", "dry_run")
# Fields the engine records for the non-tool steps; tool steps expose the tool's own result.
STEP_OUTPUTS: dict[str, tuple[str, ...]] = {
    "check": ("result",),
    "approval": ("status", "approval_id", "result"),
    "ask": ("answer", "answered_by"),
    "notify": ("sent",),
    "wait": ("waited_s",),
}

_ID = r"^[a-z][a-z0-9_-]{0,47}$"
_WORKLOAD = re.compile(r"^[a-z][a-z0-9_-]*:\S+$")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: object) -> float:
    """Seconds from ``90``, ``"90s"``, ``"5m"``, ``"2h"`` or ``"1d"``; rejects negatives."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or text like '90s', '5m', '2h'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    else:
        raise ValueError(f"{value!r} is not a duration; write e.g. 90, '90s', '5m' or '2h'")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]
StepId = Annotated[str, Field(pattern=_ID)]
# "continue" | "stop" | "fail" | the id of a later step
Next = Annotated[str, Field(pattern=_ID)]


class _Model(Model):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# --------------------------------------------------------------------------- conditions

CompareOp = Literal[
    "eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "contains", "exists", "missing",
    "truthy", "falsy",
]  # fmt: skip
_UNARY = {"exists", "missing", "truthy", "falsy"}


class Compare(_Model):
    """``left OP right``; ``left``/``right`` may be references. Unary ops ignore ``right``."""

    left: Any
    op: CompareOp
    right: Any = None

    def evaluate(self, context: Mapping[str, Any]) -> bool:
        left = templates.render(self.left, context, strict=False)
        right = templates.render(self.right, context, strict=False)
        if self.op in _UNARY:
            present = not (left is None or left is templates.MISSING)
            return {
                "exists": present,
                "missing": not present,
                "truthy": bool(left),
                "falsy": not left,
            }[self.op]
        if self.op == "eq":
            return bool(left == right)
        if self.op == "ne":
            return bool(left != right)
        if self.op in ("in", "not_in"):
            inside = isinstance(right, list | tuple | str | dict) and left in right
            return inside if self.op == "in" else not inside
        if self.op == "contains":
            return isinstance(left, list | tuple | str | dict) and right in left
        if left is None or right is None:
            return False  # ordering against a missing value is never true
        try:
            return bool(
                {"lt": left < right, "le": left <= right, "gt": left > right, "ge": left >= right}[
                    self.op
                ]
            )
        except TypeError:
            return False


class AllOf(_Model):
    all: list[Condition] = Field(min_length=1)

    def evaluate(self, context: Mapping[str, Any]) -> bool:
        return all(c.evaluate(context) for c in self.all)


class AnyOf(_Model):
    any: list[Condition] = Field(min_length=1)

    def evaluate(self, context: Mapping[str, Any]) -> bool:
        return any(c.evaluate(context) for c in self.any)


class NotOf(_Model):
    not_: Condition = Field(alias="not")

    def evaluate(self, context: Mapping[str, Any]) -> bool:
        return not self.not_.evaluate(context)


Condition = Union[Compare, AllOf, AnyOf, NotOf]  # noqa: UP007 (recursive alias)
for _cls in (AllOf, AnyOf, NotOf):
    _cls.model_rebuild()


# --------------------------------------------------------------------------- parameters

ParamType = Literal[
    "string", "integer", "number", "boolean", "workload", "node", "checkpoint", "duration",
    "choice",
]  # fmt: skip


class ParamSpec(_Model):
    """One typed parameter. ``required`` defaults to true unless a ``default`` is given."""

    type: ParamType
    description: str = Field(min_length=1, max_length=300)
    required: bool | None = None
    default: Any = None
    choices: list[str] | None = None

    def is_required(self) -> bool:
        return self.default is None if self.required is None else self.required

    def coerce(self, value: Any) -> Any:
        """``value`` checked and converted to this parameter's type; ``ValueError`` if not."""
        t = self.type
        if t == "boolean":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            raise ValueError(f"{value!r} is not true/false")
        if t == "integer":
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise ValueError(f"{value!r} is not an integer")
            return int(value)
        if t == "number":
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise ValueError(f"{value!r} is not a number")
            return float(value)
        if t == "duration":
            return parse_duration(value)
        if not isinstance(value, str) or not value:
            raise ValueError(f"{value!r} is not a non-empty string")
        if t in ("workload", "node") and not _WORKLOAD.match(value):
            raise ValueError(f"{value!r} is not a {t} id of the form BACKEND:NAME")
        if t == "choice" and value not in (self.choices or []):
            raise ValueError(f"{value!r} is not one of {self.choices}")
        return value


# --------------------------------------------------------------------------- steps


class _StepBase(_Model):
    id: StepId
    title: str = ""
    when: Condition | None = None  # skip the step unless this holds
    next: Next = "continue"  # where to go when the step ends normally (checks use then/else)


class ToolStep(_StepBase):
    """Call one MCP tool. Action tools must say why (``reason``) and need an approval gate."""

    kind: Literal["tool"]
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    on_error: Next = "fail"  # a raised error, or an action status of denied / failed
    retries: int = Field(default=0, ge=0, le=5)
    until: Condition | None = None  # read-only tools: call again until this holds
    every: Duration = 30.0
    timeout: Duration | None = None  # with ``until``: give up (-> on_error) after this


class CheckStep(_StepBase):
    kind: Literal["check"]
    condition: Condition
    then: Next = "continue"
    else_: Next = Field(default="stop", alias="else")
    message: str = ""  # recorded (and notified on stop/fail) when the check decides the run


class ApprovalStep(_StepBase):
    """Gate on an earlier action step.

    When that step answered ``approval_required`` the engine persists the run, tells people
    ``message`` with the approval id and how to approve, and waits. A person approves or
    denies (never the agent or the engine). Once approved, the engine calls
    ``execute_approved`` once and this step's ``result`` is that call's answer. When the
    action did not need approval, the gate passes straight through.
    """

    kind: Literal["approval"]
    for_: StepId = Field(alias="for")
    message: str = Field(min_length=1)
    timeout: Duration = 1800.0
    on_denied: Next = "stop"
    on_timeout: Next = "stop"


class NotifyStep(_StepBase):
    kind: Literal["notify"]
    message: str = Field(min_length=1)
    severity: Literal["info", "warning", "critical"] = "info"
    to: str | None = None  # a channel name from configuration; default: the run's channel


class Choice(_Model):
    value: Annotated[str, Field(pattern=_ID)]
    label: str = Field(min_length=1, max_length=120)


class AskStep(_StepBase):
    """Ask a person a question with 2-4 answers; the answer is ``steps.ID.answer``.

    An answer is a choice, not an approval: actions still pass the policy and its gates.
    """

    kind: Literal["ask"]
    question: str = Field(min_length=1, max_length=500)
    choices: list[Choice] = Field(min_length=2, max_length=4)
    default: str | None = None  # used on timeout; without it a timeout goes to on_timeout
    timeout: Duration = 900.0
    on_timeout: Next = "stop"


class WaitStep(_StepBase):
    kind: Literal["wait"]
    duration: Duration


Step = Annotated[
    ToolStep | CheckStep | ApprovalStep | NotifyStep | AskStep | WaitStep,
    Field(discriminator="kind"),
]

Trigger = Literal[
    "manual", "schedule", "spot_interruption", "spot_price", "node_health", "sla_risk",
    "queue_backlog", "maintenance",
]  # fmt: skip


class Runbook(_Model):
    version: Literal[1]
    name: Annotated[str, Field(pattern=_ID)]
    title: str = Field(min_length=1, max_length=120)
    description: str = Field(min_length=1, max_length=1000)
    triggers: list[Trigger] = Field(default_factory=lambda: list[Trigger](["manual"]))
    params: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")], ParamSpec] = Field(
        default_factory=dict
    )
    steps: list[Step] = Field(min_length=1)

    @field_validator("steps")
    @classmethod
    def _unique_ids(cls, steps: list[Any]) -> list[Any]:
        seen: set[str] = set()
        for step in steps:
            if step.id in seen:
                raise ValueError(f"step id {step.id!r} is used twice; ids must be unique")
            if step.id in FLOW_KEYWORDS:
                raise ValueError(f"step id {step.id!r} is reserved ({', '.join(FLOW_KEYWORDS)})")
            seen.add(step.id)
        return steps

    def step(self, step_id: str) -> Any:
        """The step with this id (``NotFound`` if none)."""
        for s in self.steps:
            if s.id == step_id:
                return s
        raise errors.NotFound(
            f"runbook {self.name!r} has no step {step_id!r}",
            hint=f"steps are: {', '.join(s.id for s in self.steps)}",
        )

    def index(self, step_id: str) -> int:
        return [s.id for s in self.steps].index(self.step(step_id).id)

    def digest(self) -> str:
        """A stable hash of the runbook's content: a persisted run records it, so the engine
        can refuse to continue a run whose runbook changed underneath it."""
        canonical = json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()

    def bind_params(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Given parameters checked, converted and completed with defaults."""
        unknown = sorted(set(values) - set(self.params))
        if unknown:
            raise errors.InvalidInput(
                f"runbook {self.name!r} has no parameter {', '.join(unknown)}",
                hint=f"parameters are: {', '.join(self.params) or '(none)'}",
            )
        bound: dict[str, Any] = {}
        for name, spec in self.params.items():
            if name in values and values[name] is not None:
                try:
                    bound[name] = spec.coerce(values[name])
                except ValueError as exc:
                    raise errors.InvalidInput(
                        f"runbook {self.name!r} parameter {name!r}: {exc}",
                        hint=spec.description,
                    ) from exc
            elif spec.default is not None:
                bound[name] = spec.coerce(spec.default)
            elif spec.is_required():
                raise errors.InvalidInput(
                    f"runbook {self.name!r} needs parameter {name!r} ({spec.type})",
                    hint=spec.description,
                )
            else:
                bound[name] = None
        return bound
