"""Label and field selectors, parsed and matched as the API server does.

Label selectors (``labelSelector=``): ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``,
``k notin (a,b)``, ``k`` (exists), ``!k`` (does not exist), joined by commas; ``!=`` and
``notin`` also match objects without the label. Field selectors (``fieldSelector=``):
``f=v``, ``f==v``, ``f!=v`` on the fields the resource supports; any other field is a 400
``field label not supported: F``, as the server answers. Also the structured
``metav1.LabelSelector`` (matchLabels / matchExpressions) that PDBs and workloads carry.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.k8s.emulator import status

Matcher = Callable[[dict[str, Any]], bool]

_REQ = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9./_-]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<val>[A-Za-z0-9._-]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<set>[^)]*)\))?\s*$"
)


def _split_top(expr: str) -> list[str]:
    """Split at commas that are not inside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in expr:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def labels_of(obj: dict[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def parse_labels(expr: str | None) -> Matcher:
    """A matcher for a ``labelSelector`` string; 400 BadRequest when it does not parse."""
    if not expr or not expr.strip():
        return lambda obj: True
    tests: list[Callable[[dict[str, str]], bool]] = []
    for part in _split_top(expr):
        m = _REQ.match(part)
        if not m or (m.group("neg") and (m.group("op") or m.group("setop"))):
            raise status.bad_request(f"unable to parse requirement: {part.strip()!r}")
        key, neg, val = m.group("key"), bool(m.group("neg")), m.group("val")
        if m.group("setop"):
            values = {v.strip() for v in m.group("set").split(",") if v.strip()}
            if m.group("setop") == "in":
                tests.append(lambda lab, k=key, vs=values: k in lab and lab[k] in vs)
            else:
                tests.append(lambda lab, k=key, vs=values: k not in lab or lab[k] not in vs)
        elif m.group("op") in ("=", "=="):
            tests.append(lambda lab, k=key, v=val: lab.get(k) == v)
        elif m.group("op") == "!=":
            tests.append(lambda lab, k=key, v=val: lab.get(k) != v)
        elif neg:
            tests.append(lambda lab, k=key: k not in lab)
        else:
            tests.append(lambda lab, k=key: k in lab)
    return lambda obj: all(t(labels_of(obj)) for t in tests)


def match_label_selector(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A ``metav1.LabelSelector``; an empty selector matches everything, None matches nothing."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key"), req.get("operator"), set(req.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def selector_string(selector: dict[str, Any] | None) -> str:
    """The text form of a ``metav1.LabelSelector`` (what Scale.status.selector carries)."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for req in selector.get("matchExpressions") or []:
        key, op, values = req["key"], req["operator"], ",".join(sorted(req.get("values") or []))
        parts.append(
            {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})"}.get(
                op, key if op == "Exists" else f"!{key}"
            )
        )
    return ",".join(parts)


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string the server compares a field selector with (booleans as true/false)."""
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if cur is None:
        # Unset booleans select as "false" (spec.unschedulable), unset strings as "".
        return "false" if path in ("spec.unschedulable", "spec.hostNetwork") else ""
    return str(cur)


def parse_fields(expr: str | None, supported: frozenset[str]) -> Matcher:
    if not expr or not expr.strip():
        return lambda obj: True
    tests: list[Matcher] = []
    for part in expr.split(","):
        m = re.match(r"^\s*([A-Za-z0-9._-]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise status.bad_request(f"invalid selector: '{expr}'; can't understand '{part}'")
        path, op, value = m.groups()
        if path not in supported:
            raise status.bad_request(f"field label not supported: {path}")
        if op == "!=":
            tests.append(lambda obj, p=path, v=value: field_value(obj, p) != v)
        else:
            tests.append(lambda obj, p=path, v=value: field_value(obj, p) == v)
    return lambda obj: all(t(obj) for t in tests)
