"""The runbook YAML schema: typed models, a loader, and a validator with useful errors.

A runbook is a named, versioned list of steps with typed parameters. Each step has a stable
``id`` (the engine persists progress per step id, so a run can stop at an approval gate or a
question and continue later, even after a restart) and is one of:

- ``tool``: call one MCP tool with arguments that may hold ``{{...}}`` references;
- ``check``: evaluate a condition, then continue, stop, fail, or jump forward;
- ``approval``: wait for a person to resolve the approval an earlier action step asked for;
- ``notify``: tell people something; ``ask``: ask a person a multiple-choice question;
- ``wait``: pause for a fixed time.

Limits: this module validates and describes; it runs nothing. Jumps go forward only, so a
run always ends; polling is a tool step's ``until``/``every``/``timeout``. The engine decides
how to deliver notifications and questions. See ``docs/runbooks.md`` for the authoring guide.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)

from core import errors
from core.filecache import FileCache
from core.runbooks import templates, tools

__all__ = [
    "ApprovalStep",
    "AskStep",
    "CheckStep",
    "Choice",
    "Compare",
    "Condition",
    "NotifyStep",
    "ParamSpec",
    "Problem",
    "Runbook",
    "Step",
    "ToolStep",
    "WaitStep",
    "check_file",
    "load_all",
    "load_runbook",
    "parse_duration",
    "validate_runbook",
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


class _Model(BaseModel):
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


_RUNBOOK = TypeAdapter(Runbook)


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a runbook: where (``key``), what, and what to do (``hint``)."""

    key: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        return f"{self.key}: {self.message}" + (f" (hint: {self.hint})" if self.hint else "")


def _key(loc: Iterable[int | str], data: Any) -> str:
    """``('steps', 2, 'tool', 'args')`` -> ``steps[2](migrate).args`` using the raw data."""
    parts: list[str] = []
    node: Any = data
    skip_tag = False
    for item in loc:
        if skip_tag:
            skip_tag = False
            if isinstance(item, str) and item in (
                "tool",
                "check",
                "approval",
                "notify",
                "ask",
                "wait",
            ):
                continue  # the discriminator's name pydantic inserts into the location
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node):
                node = node[item]
                if isinstance(node, Mapping) and isinstance(node.get("id"), str):
                    label += f"({node['id']})"
                    skip_tag = True
            parts.append(label)
        else:
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, Mapping) else None
    return "".join(parts) or "(top level)"


def _semantic_problems(rb: Runbook) -> list[Problem]:
    problems: list[Problem] = []
    ids = [s.id for s in rb.steps]
    gated = {s.for_ for s in rb.steps if isinstance(s, ApprovalStep)}

    def flow(i: int, field: str, target: str) -> None:
        if target in FLOW_KEYWORDS:
            return
        if target not in ids:
            problems.append(
                Problem(
                    f"steps[{i}]({ids[i]}).{field}",
                    f"{target!r} is neither a step id nor one of {', '.join(FLOW_KEYWORDS)}",
                    "name a later step's id",
                )
            )
        elif ids.index(target) <= i:
            problems.append(
                Problem(
                    f"steps[{i}]({ids[i]}).{field}",
                    f"jumps back to {target!r}",
                    "jumps go forward only; to poll, use a tool step's until/every/timeout",
                )
            )

    def refs(i: int, field: str, value: Any, *, self_ok: bool = False) -> None:
        where = f"steps[{i}]({ids[i]}).{field}"
        try:
            paths = templates.find_refs(value)
        except errors.InvalidInput as exc:
            problems.append(Problem(where, exc.message, exc.hint))
            return
        for path in paths:
            root, _, rest = path.partition(".")
            head = rest.split(".")[0]
            if root == "params" and head not in rb.params:
                problems.append(
                    Problem(
                        where, f"{{{{{path}}}}}: no parameter {head!r}", "declare it under params"
                    )
                )
            elif root == "steps" and (
                head not in ids or ids.index(head) > i or (ids.index(head) == i and not self_ok)
            ):
                problems.append(
                    Problem(
                        where,
                        f"{{{{{path}}}}}: no earlier step {head!r}",
                        "a step can only use results of steps listed before it",
                    )
                )
            elif root == "steps" and "." not in rest:
                problems.append(
                    Problem(where, f"{{{{{path}}}}} names a step, not a field", "add .FIELD")
                )
            elif root == "steps":
                kind = rb.steps[ids.index(head)].kind
                field_name = rest.split(".")[1]
                allowed = STEP_OUTPUTS.get(kind)
                if allowed is not None and field_name not in allowed:
                    problems.append(
                        Problem(
                            where,
                            f"{{{{{path}}}}}: a {kind} step has no field {field_name!r}",
                            f"{kind} steps record: {', '.join(allowed)}",
                        )
                    )
            elif root == "run" and head not in RUN_FIELDS:
                problems.append(
                    Problem(where, f"{{{{{path}}}}}: unknown run field", f"use {RUN_FIELDS}")
                )
            elif root not in templates.REF_ROOTS:
                problems.append(
                    Problem(
                        where, f"{{{{{path}}}}}: unknown root {root!r}", "use params, steps or run"
                    )
                )

    for name, spec in rb.params.items():
        if spec.type == "choice" and not spec.choices:
            problems.append(Problem(f"params.{name}.choices", "a choice parameter needs choices"))
        if spec.default is not None:
            try:
                spec.coerce(spec.default)
            except ValueError as exc:
                problems.append(Problem(f"params.{name}.default", str(exc), f"a {spec.type}"))

    for i, step in enumerate(rb.steps):
        here = f"steps[{i}]({step.id})"
        flow(i, "next", step.next)
        if step.when is not None:
            refs(i, "when", step.when.model_dump(by_alias=True))
        if isinstance(step, ToolStep):
            flow(i, "on_error", step.on_error)
            refs(i, "args", step.args)
            if step.tool not in tools.ALL_TOOLS:
                problems.append(
                    Problem(
                        f"{here}.tool",
                        f"unknown tool {step.tool!r}",
                        "use one of the MCP tools: " + ", ".join(sorted(tools.ALL_TOOLS)),
                    )
                )
            elif step.tool in tools.ENGINE_ONLY_TOOLS:
                problems.append(
                    Problem(
                        f"{here}.tool",
                        f"{step.tool!r} cannot be a step",
                        "the engine runs approved plans and continues runs itself; "
                        "add an approval step after the action instead",
                    )
                )
            elif tools.is_mutating(step.tool):
                reason = step.args.get("reason")
                if not isinstance(reason, str) or not reason.strip():
                    problems.append(
                        Problem(
                            f"{here}.args.reason",
                            f"action tool {step.tool!r} needs a reason",
                            "say why, in words a person reviewing the approval understands",
                        )
                    )
                if step.id not in gated:
                    problems.append(
                        Problem(
                            here,
                            "action step has no approval gate (any action may need approval)",
                            f"add a later step with kind: approval and for: {step.id}",
                        )
                    )
                if step.until is not None:
                    problems.append(Problem(f"{here}.until", "only read-only tools can be polled"))
                if step.retries:
                    problems.append(
                        Problem(
                            f"{here}.retries",
                            "action steps are not retried automatically",
                            "retrying an action could repeat it; use a check and a person instead",
                        )
                    )
            if step.until is not None:
                refs(i, "until", step.until.model_dump(by_alias=True), self_ok=True)
        elif isinstance(step, CheckStep):
            refs(i, "condition", step.condition.model_dump(by_alias=True))
            refs(i, "message", step.message)
            flow(i, "then", step.then)
            flow(i, "else", step.else_)
        elif isinstance(step, ApprovalStep):
            refs(i, "message", step.message)
            flow(i, "on_denied", step.on_denied)
            flow(i, "on_timeout", step.on_timeout)
            target = rb.steps[ids.index(step.for_)] if step.for_ in ids else None
            if target is None or ids.index(step.for_) >= i:
                problems.append(
                    Problem(f"{here}.for", f"no earlier step {step.for_!r}", "name the action step")
                )
            elif not (isinstance(target, ToolStep) and tools.is_mutating(target.tool)):
                problems.append(
                    Problem(
                        f"{here}.for",
                        f"{step.for_!r} is not an action tool step",
                        "approval gates follow action tools ("
                        + ", ".join(sorted(tools.ACTION_TOOLS))
                        + ")",
                    )
                )
        elif isinstance(step, NotifyStep):
            refs(i, "message", step.message)
        elif isinstance(step, AskStep):
            refs(i, "question", step.question)
            flow(i, "on_timeout", step.on_timeout)
            values = [c.value for c in step.choices]
            if len(set(values)) != len(values):
                problems.append(Problem(f"{here}.choices", "two choices share a value"))
            if step.default is not None and step.default not in values:
                problems.append(
                    Problem(
                        f"{here}.default", f"{step.default!r} is not a choice", f"one of {values}"
                    )
                )
    return problems


def check_data(data: Any, *, source: str = "<runbook>") -> tuple[Runbook | None, list[Problem]]:
    """Parse ``data`` (the loaded YAML) into a ``Runbook``; every problem found, by key."""
    if not isinstance(data, Mapping):
        return None, [Problem("(top level)", "a runbook is a mapping", "start with `version: 1`")]
    try:
        rb = _RUNBOOK.validate_python(data)
    except ValidationError as exc:
        return None, [Problem(_key(e["loc"], data), e["msg"], _hint_for(e)) for e in exc.errors()]
    return rb, _semantic_problems(rb)


def _hint_for(err: Any) -> str:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return "remove it or check its spelling (see docs/runbooks.md)"
    if kind == "union_tag_invalid":
        return "kind is one of: tool, check, approval, notify, ask, wait"
    if kind == "missing":
        return "this key is required"
    if kind == "literal_error" and tuple(err.get("loc", ())) == ("version",):
        return f"use version: {SCHEMA_VERSION}"
    return ""


def validate_runbook(data: Any, *, source: str = "<runbook>") -> Runbook:
    """A valid ``Runbook`` from loaded YAML, or ``InvalidInput`` naming source and keys."""
    rb, problems = check_data(data, source=source)
    if problems or rb is None:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise errors.InvalidInput(
            f"{source}: {first.key}: {first.message}{more}",
            hint=first.hint or "see docs/runbooks.md for the runbook schema",
            code="runbook-invalid",
            details={"file": source, "problems": [str(p) for p in problems]},
        )
    return rb


class _UniqueKeyLoader(yaml.SafeLoader):
    """Safe YAML loading that refuses duplicate keys (PyYAML keeps the last one silently)."""


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise errors.NotFound(
            f"cannot read runbook {path}: {exc.strerror}", hint="check the path"
        ) from exc
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise errors.InvalidInput(
            f"{path}: not valid YAML: {exc}",
            hint="fix the YAML syntax at the line shown",
            code="runbook-invalid",
            details={"file": str(path)},
        ) from exc


def check_file(path: Path) -> list[Problem]:
    """Every problem in the runbook file at ``path`` (empty when it is valid)."""
    data = _read_yaml(path)
    rb, problems = check_data(data, source=str(path))
    if rb is not None and rb.name != path.stem:
        problems.insert(
            0,
            Problem("name", f"{rb.name!r} differs from the file name {path.stem!r}", "rename one"),
        )
    return problems


def load_runbook(path: Path | str) -> Runbook:
    """The runbook in the YAML file at ``path``; its ``name`` must equal the file's stem.

    Parsed once per version of the file (``core.filecache``): the server lists and starts
    runbooks on every call, and parsing and validating the YAML was most of that time."""
    return _PARSED.get(Path(path))


def _parse_runbook(path: Path) -> Runbook:
    rb = validate_runbook(_read_yaml(path), source=str(path))
    if rb.name != path.stem:
        raise errors.InvalidInput(
            f"{path}: name: {rb.name!r} differs from the file name {path.stem!r}",
            hint=f"rename the file to {rb.name}.yaml or set name: {path.stem}",
            code="runbook-invalid",
            details={"file": str(path)},
        )
    return rb


# Runbooks are frozen models, so one parsed copy can be handed to every caller.
_PARSED: FileCache[Runbook] = FileCache(_parse_runbook)


def load_all(directory: Path | str) -> dict[str, Runbook]:
    """Every ``*.yaml`` / ``*.yml`` runbook in ``directory`` by name; the first bad file raises."""
    directory = Path(directory)
    if not directory.is_dir():
        raise errors.NotFound(
            f"runbook directory {directory} does not exist",
            hint="create it or point the runbooks setting at the right folder",
        )
    found: dict[str, Runbook] = {}
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        rb = load_runbook(path)
        if rb.name in found:
            raise errors.InvalidInput(
                f"{path}: runbook {rb.name!r} is defined twice in {directory}",
                hint="keep one of the .yaml / .yml files",
                code="runbook-invalid",
            )
        found[rb.name] = rb
    return found
