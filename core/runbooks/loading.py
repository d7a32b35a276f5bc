"""From runbook YAML to a checked ``Runbook``: loading, validation, and problems by key.

``check_data`` parses loaded YAML into the models of ``core.runbooks.schema`` and then checks
what the models cannot see alone (flow targets, ``{{...}}`` references, approval gates, tool
arguments), reporting every problem with the key it is at (``steps[2](migrate).args``) and a
hint. ``validate_runbook`` raises the first as ``InvalidInput``; ``check_file`` lists them for
``clawpoint runbook check``; ``load_runbook`` and ``load_all`` read files (duplicate YAML keys
refused), parsing each version of a file once (``core.filecache``).

Limits: this module reads and checks; it runs nothing (``core.runbooks.engine`` does). The
first bad file in a directory stops ``load_all``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from core import errors
from core.filecache import FileCache
from core.runbooks import templates, tools
from core.runbooks.schema import (
    FLOW_KEYWORDS,
    RUN_FIELDS,
    SCHEMA_VERSION,
    STEP_OUTPUTS,
    ApprovalStep,
    AskStep,
    CheckStep,
    NotifyStep,
    Runbook,
    ToolStep,
)

__all__ = ["Problem", "check_data", "check_file", "load_all", "load_runbook", "validate_runbook"]

_RUNBOOK = TypeAdapter(Runbook)


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


# libyaml's parser where PyYAML was built with it (the wheels are): the pure-Python one took
# 20 ms per runbook, most of an MCP server's start-up beyond the SDK's own imports. Both build
# the same nodes for the constructor below and refuse the same documents.
_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):  # type: ignore[misc]
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
    mapping: dict[Any, Any] = loader.construct_mapping(node)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _unreadable_name(path: Path, why: str) -> errors.InvalidInput:
    return errors.InvalidInput(
        f"cannot read runbook {str(path)[:120]!r}: {why}",
        hint="give the path of a runbook YAML file, or the name of a runbook",
        code="runbook-invalid",
    )


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise errors.NotFound(
            f"cannot read runbook {path}: {exc.strerror}", hint="check the path"
        ) from exc
    except ValueError as exc:  # a NUL byte: no file can have that name
        raise _unreadable_name(path, str(exc)) from None
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
    if "\0" in str(path):  # the cache's os.stat would raise ValueError, not OSError
        raise _unreadable_name(Path(path), "embedded null byte")
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
