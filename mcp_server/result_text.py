"""The text copy of a tool result: a one-line summary when the structured content carries
the data, the whole data as compact JSON when nothing else would.

A tool result carries its data twice: ``structuredContent`` and a text block. What a host
hands the model differs (checked against each client's source, see docs/agents.md):
OpenClaw shows the structured content (pretty-printed) and every text block that is not an
identical pretty copy; mcporter's ``call`` prints the structured content; Claude Code and
VS Code hand the model the structured content alone. A full JSON copy in the text is
therefore paid twice by OpenClaw and never read by the others. So the text says in one line
what happened, the ids the agent needs and the next step (``summary``), and the structured
content stays the one full copy.

Limits: a client on a protocol revision older than 2025-06-18 knows no ``structuredContent``
(it ignores the field), so it gets the whole data as compact JSON (``needs_full_text``); so
does every client when the operator sets ``[mcp] result_text = "json"`` (for a host that
negotiates a newer revision but still shows only the text). The summary never carries
anything the structured content lacks: hosts that show only the structured content must
not miss a word of it.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["STRUCTURED_SINCE", "ResultText", "needs_full_text", "summary"]

ResultText = Literal["summary", "json"]

# The first protocol revision with structuredContent; the older ones only have the text.
STRUCTURED_SINCE = "2025-06-18"
_WITHOUT_STRUCTURED = frozenset({"2024-11-05", "2025-03-26"})

# Fields that say what a record is, in the order a summary names them.
_NAMING = ("id", "workload", "node", "state", "status", "level", "action", "target")
_MAX_IDS = 5  # a list's summary names its first few ids; the rest are in the structured copy


def needs_full_text(protocol_version: str | None) -> bool:
    """Whether a client speaking ``protocol_version`` sees only the text content."""
    return protocol_version in _WITHOUT_STRUCTURED


def _one_line(value: Any) -> str:
    return " ".join(str(value).split())


def _ids(data: dict[str, Any]) -> list[str]:
    """``KEY=ID`` for the nested records an agent passes on (approval, execution, ...) and
    ``KEY=VALUE`` for top-level ``*_id`` fields and those of ``waiting``."""
    out: list[str] = []
    for key, value in data.items():
        if key.endswith("_id") and isinstance(value, str):
            out.append(f"{key}={value}")
        elif isinstance(value, dict):
            if isinstance(value.get("id"), str):
                out.append(f"{key}={value['id']}")
            out += [
                f"{k}={v}" for k, v in value.items() if k.endswith("_id") and isinstance(v, str)
            ]
    return out


def _record(data: dict[str, Any]) -> str:
    named = [f"{k}={_one_line(data[k])}" for k in _NAMING if isinstance(data.get(k), str | int)]
    return ", ".join(named)


def _name(record: dict[str, Any]) -> str:
    """What names a record in a list: its id, else its name, workload or node."""
    for key in ("id", "name", "workload", "node"):
        if isinstance(record.get(key), str):
            return str(record[key])
    return ""


def _items(value: list[Any]) -> str:
    """The first few ids of a list of records, or its first few strings."""
    ids = [_name(v) for v in value if isinstance(v, dict) and _name(v)]
    if not ids and len(value) <= 3:  # a few short strings (backends, errors) say themselves
        ids = [_one_line(v)[:80] for v in value if isinstance(v, str | int)]
    more = ", ..." if len(ids) > _MAX_IDS else ""
    return ", ".join(ids[:_MAX_IDS]) + more


def _lists(data: dict[str, Any]) -> list[str]:
    """``N KEY [of TOTAL]: id, id, ...`` for the first list and every other non-empty one,
    ``KEY: k=v, ...`` for small count maps, and where the next page is."""
    out: list[str] = []
    total = data.get("total")
    first = True
    for key, value in data.items():
        if isinstance(value, dict) and 0 < len(value) <= 6:
            if all(isinstance(v, int) for v in value.values()):
                out.append(f"{key}: " + ", ".join(f"{k}={v}" for k, v in value.items()))
            continue
        if not isinstance(value, list) or (not value and not first):
            continue
        first = False
        part = f"{len(value)} {key}"
        if isinstance(total, int) and total != len(value):
            part += f" of {total}"
        items = _items(value)
        out.append(f"{part}: {items}" if items else part)
    if data.get("next_cursor"):
        out.append(f"more with cursor={data['next_cursor']}")
    return out


def summary(data: Any) -> str:
    """One line: what happened (status and message, or the record's name and state, or the
    lists and their sizes), the ids to pass on, and the next step."""
    if not isinstance(data, dict):
        return _one_line(data)[:200]
    parts: list[str] = []
    status, message = data.get("status"), data.get("message") or data.get("summary")
    if isinstance(status, str) and isinstance(message, str):  # an action's outcome
        parts.append(f"{status}: {_one_line(message).rstrip('.')}")
    else:  # a record: what it is, then what it says
        parts += [p for p in (_record(data), message) if isinstance(p, str) and p]
    parts += _ids(data)
    parts += _lists(data)
    if not parts:
        parts.append("fields: " + ", ".join(data))
    line = "; ".join(parts)
    if isinstance(data.get("next"), str) and data["next"]:
        line += f". Next: {_one_line(data['next'])}"
    return line
