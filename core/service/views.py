"""Concise views of records, for callers that pay for every byte they read (agents over MCP).

A full record (a checkpoint with its file digests and CRIU counters, a plan with its step
arguments and scope, an approval with its whole plan) costs an agent around a thousand
tokens; the concise view keeps what an agent decides with and drops the rest: empty and
null fields, digests, counters, step arguments. Every view takes ``detail``: with it, the
full record (the pydantic model as JSON) comes back unchanged.

Limits: pure functions over the domain models (no I/O); the values are JSON-ready. Times
are ISO 8601 in UTC, to the second. The lists of kept fields are the contract: tests pin
the size of a concise checkpoint record, and docs/mcp-tools.md names the fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from core.guardrails.approvals import ApprovalView
from core.model import CheckpointInfo, Execution, NodeInfo, Plan, PoolInfo, WorkloadInfo
from core.sizes import memory_text

__all__ = [
    "approval",
    "checkpoint",
    "compact",
    "execution",
    "line",
    "node",
    "plan",
    "pool",
    "records",
    "workload",
]

# A step output or a message longer than this is cut in a concise view (with an ellipsis).
MAX_TEXT = 160
_FIRST = ("status", "id", "approval_id", "state", "node", "answer", "count", "result")


def compact(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` without null, empty-string, empty-list and empty-dict fields (recursively
    in mappings; list items are kept, only their own fields are compacted)."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        v = _compact(v)
        if v is None or v == "" or v == [] or v == {}:
            continue
        out[k] = v
    return out


def _compact(value: Any) -> Any:
    if isinstance(value, Mapping):
        return compact(value)
    if isinstance(value, list | tuple):
        return [_compact(v) for v in value]
    return value


def _time(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _full(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def node(n: NodeInfo, *, detail: bool = False) -> dict[str, Any]:
    """id, state, health, schedulable, spot, price_per_hour, gpus, gpu_class, labels, reason,
    workloads."""
    if detail:
        return _full(n)
    return compact({
        "id": n.id, "state": n.state, "health": n.health.value, "schedulable": n.schedulable,
        "spot": n.spot, "price_per_hour": n.price_per_hour, "gpus": n.gpus or None,
        "gpu_class": n.gpu_class, "labels": n.labels, "reason": n.reason, "workloads": n.workloads,
    })  # fmt: skip


def pool(p: PoolInfo) -> dict[str, Any]:
    """id, size, min_size, max_size, spot, price_per_hour, idle, released (the nodes up are
    in list_nodes)."""
    return compact({
        "id": p.id, "size": p.size, "min_size": p.min_size, "max_size": p.max_size,
        "spot": p.spot, "price_per_hour": p.price_per_hour, "idle": p.idle,
        "released": p.released,
    })  # fmt: skip


def workload(w: WorkloadInfo, *, detail: bool = False) -> dict[str, Any]:
    """id, state, node, engine, its size where limited (cpus, memory, gpus, gpu_class),
    labels, last_checkpoint, checkpoint_every (and checkpoint_auto when its wrapper
    re-times it), message."""
    if detail:
        return _full(w)
    last = w.last_checkpoint
    if last and ":" not in last:  # backends record LINEAGE@SEQ; ids are BACKEND:LINEAGE@SEQ
        last = f"{w.backend}:{last}"
    return compact({
        "id": w.id, "state": w.state.value, "node": w.node, "engine": w.engine,
        "cpus": w.cpus, "memory": memory_text(w.memory_mb) if w.memory_mb else None,
        "gpus": w.gpus or None, "gpu_class": w.gpu_class, "labels": w.labels,
        "last_checkpoint": last,
        "checkpoint_every": w.checkpoint_every, "checkpoint_auto": w.checkpoint_auto or None,
        "exit_status": w.exit_status,
        "message": _cut(w.message) if w.message else None,
    })  # fmt: skip


def checkpoint(c: CheckpointInfo, *, detail: bool = False) -> dict[str, Any]:
    """id, status, engine, node, created_at, size_bytes, leave_running, step (the workload's
    progress when it was taken, if it reports one), reason (why it is not good). Files,
    digests and CRIU counters only with ``detail``."""
    if detail:
        return _full(c)
    progress = c.extra.get("progress") if isinstance(c.extra, Mapping) else None
    step = progress.get("step") if isinstance(progress, Mapping) else None
    return compact({
        "id": c.id, "status": c.status.value, "engine": c.engine, "node": c.node,
        "created_at": _time(c.created_at), "size_bytes": c.size_bytes,
        "leave_running": c.leave_running, "step": step, "reason": c.reason(),
    })  # fmt: skip


def plan(p: Plan, *, detail: bool = False) -> dict[str, Any]:
    """What a person approves: action, target, destination node (``to``), risk, summary,
    one line per step, expected pause, what it saves, cost effect, how to undo it, and the
    hash approvals bind to."""
    if detail:
        return _full(p)
    return compact({
        "action": p.action.value, "target": p.target, "to": p.scope.target_node,
        "risk": p.risk.value, "summary": p.summary, "steps": [s.description for s in p.steps],
        "expected_pause_s": p.expected_pause_s, "saves": p.saves,
        "cost_effect": p.cost_effect, "rollback": p.undo(), "hash": p.hash,
    })  # fmt: skip


def approval(v: ApprovalView, *, detail: bool = False) -> dict[str, Any]:
    """id, status, requester, expires_at, who decided and how, and the compact plan."""
    if detail:
        return _full(v)
    return compact({
        "id": v.id, "status": v.status.value, "requester": v.requester,
        "reason": v.reason, "expires_at": _time(v.expires_at),
        "decided_by": v.decided_by, "decided_via": v.decided_via, "note": v.note,
        "used_at": _time(v.used_at), "plan": plan(v.plan),
    })  # fmt: skip


def execution(e: Execution, *, detail: bool = False) -> dict[str, Any]:
    """id, status, error, and one line per step (``name: status``, with the step's scalar
    outputs such as the checkpoint id, or its error)."""
    if detail:
        return _full(e)
    steps = []
    for s in e.steps:
        said = s.error or ", ".join(f"{k}={v}" for k, v in s.output.items() if _scalar(v))
        steps.append(_cut(f"{s.name}: {s.status}" + (f" ({said})" if said else "")))
    return compact({"id": e.id, "status": e.status.value, "error": e.error, "steps": steps})


def line(value: Any) -> str:
    """A one-line digest of a tool's output (a step of a runbook run): an action result's
    status and message, a summary or message field, a count, or the first scalar fields."""
    if not isinstance(value, Mapping):
        return _cut(str(value)) if value not in (None, "") else ""
    if isinstance(value.get("status"), str) and isinstance(value.get("message"), str):
        return _cut(f"{value['status']}: {value['message']}")
    for key in ("summary", "message", "advice"):
        if isinstance(value.get(key), str) and value[key]:
            return _cut(value[key])
    # A stable order (a record read back from the database has its keys sorted): the fields
    # that say most first, then the rest by name.
    keys = sorted(value, key=lambda k: (_FIRST.index(k) if k in _FIRST else len(_FIRST), k))
    scalars = [f"{k}={value[k]}" for k in keys if _scalar(value[k])]
    return _cut(", ".join(scalars[:6]))


def _scalar(value: Any) -> bool:
    return isinstance(value, bool | int | float) or (isinstance(value, str) and len(value) <= 64)


def records(models: list[Any]) -> list[dict[str, Any]]:
    """Full records as JSON (models dumped, anything else as it is): what ``detail`` shows."""
    return [m.model_dump(mode="json") if isinstance(m, BaseModel) else m for m in models]
