"""``{{...}}`` references in runbook arguments and conditions: find them, resolve them.

A reference names a value the engine knows at run time: ``{{params.NAME}}``,
``{{steps.ID.FIELD}}`` (any depth: ``{{steps.plan.plan.target}}``, list items by index) or
``{{run.FIELD}}`` (``id``, ``runbook``, ``started_at``). A string that is exactly one
reference resolves to the referenced value with its type kept (a number stays a number);
a reference inside longer text is rendered as text. Limits: no expressions, filters or
defaults inside the braces, on purpose: logic belongs in ``check`` steps and conditions,
where it is typed and validated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from core import errors

__all__ = ["MISSING", "REF_ROOTS", "find_refs", "lookup", "render"]

REF_ROOTS: Final[tuple[str, ...]] = ("params", "steps", "run")

_REF = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*)\s*\}\}")
_WHOLE = re.compile(r"^\s*" + _REF.pattern + r"\s*$")
_BRACES = re.compile(r"\{\{|\}\}")


class _Missing:
    """Marker for a reference with no value (a skipped step, an absent field)."""

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing()


def find_refs(value: object) -> list[str]:
    """Every reference path (``steps.x.status``) inside strings of ``value``, in order.

    Raises ``InvalidInput`` for braces that do not form a reference (``{{ oops``), so a typo
    fails at load time instead of reaching a tool as literal text.
    """
    found: list[str] = []
    _collect(value, found)
    return found


def _collect(value: object, found: list[str]) -> None:
    if isinstance(value, str):
        refs = _REF.findall(value)
        if len(_BRACES.findall(value)) != 2 * len(refs):
            raise errors.InvalidInput(
                f"malformed reference in {value!r}",
                hint="write references as {{params.NAME}}, {{steps.ID.FIELD}} or {{run.FIELD}}",
                code="runbook-bad-reference",
            )
        found.extend(refs)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, found)


def lookup(path: str, context: Mapping[str, Any]) -> Any:
    """The value at a dotted ``path`` in ``context``, or ``MISSING`` when any part is absent."""
    current: Any = context
    for part in path.split("."):
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        elif isinstance(current, list | tuple) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return MISSING
    return current


def render(value: Any, context: Mapping[str, Any], *, strict: bool = True) -> Any:
    """``value`` with every reference replaced from ``context`` (recursing into lists/maps).

    With ``strict`` a reference without a value raises ``InvalidInput``; without it the
    reference becomes ``None`` (whole-string) or empty text (inside longer text).
    """
    if isinstance(value, str):
        whole = _WHOLE.match(value)
        if whole:
            return _resolve(whole.group(1), context, strict=strict)
        return _REF.sub(lambda m: _as_text(_resolve(m.group(1), context, strict=strict)), value)
    if isinstance(value, Mapping):
        return {k: render(v, context, strict=strict) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [render(v, context, strict=strict) for v in value]
    return value


def _resolve(path: str, context: Mapping[str, Any], *, strict: bool) -> Any:
    found = lookup(path, context)
    if found is MISSING:
        if strict:
            raise errors.InvalidInput(
                f"reference {{{{{path}}}}} has no value",
                hint="the step it names may have been skipped or did not return that field; "
                "guard the step with a `when: {left: '{{...}}', op: exists}` condition",
                code="runbook-missing-value",
            )
        return None
    return found


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    return json.dumps(value, sort_keys=True, default=str)
