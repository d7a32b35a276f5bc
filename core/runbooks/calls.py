"""How a runbook's tool step reaches the service: one function per tool name.

Runbooks name MCP tools (``core.runbooks.tools``) but the engine does not go through MCP:
each name maps to a direct ``Service`` call here. Read tools return plain JSON data shaped
for references (``{{steps.health.health}}``, ``{{steps.workloads.count}}``; ``list_pools``
with ``pool``: that pool with the planner's size for it, ``core.runbooks.pool_reading``;
``plan_actions``: its top proposal and whether a standing grant covers it); action tools
call ``service.act`` with the run's principal, so every write inside a runbook passes the
same policy, approvals and audit as the MCP action tools, and return the ``ActionResult``.

Limits: arguments are checked by name (an unknown argument is an error, so a typo in a
runbook does not silently do something else). ``start_runbook``, ``list_runbooks`` and
``runbook_status`` are added by the engine itself; ``execute_approved`` and
``continue_runbook`` are never steps (the validator refuses them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core import actions, errors
from core.config import DAY_S
from core.model import Action, Principal
from core.runbooks.pool_reading import read_pool
from core.service import insights
from core.service.facade import Service
from core.service.projection import projection

__all__ = ["CALLS", "CallContext", "ToolCall", "check_params"]


@dataclass(frozen=True)
class CallContext:
    """Who calls and how: the run's principal, its trigger, and the run-wide dry-run flag."""

    principal: Principal
    trigger: str | None = None
    dry_run: bool = False


ToolCall = Callable[[Service, dict[str, Any], CallContext], Any]


def _args(tool: str, args: Mapping[str, Any], allowed: set[str], required: set[str]) -> None:
    unknown = sorted(set(args) - allowed)
    if unknown:
        raise errors.InvalidInput(
            f"tool {tool!r} has no argument {', '.join(unknown)}",
            hint=f"its arguments are: {', '.join(sorted(allowed)) or '(none)'}",
        )
    missing = sorted(r for r in required if args.get(r) in (None, ""))
    if missing:
        raise errors.InvalidInput(f"tool {tool!r} needs {', '.join(missing)}",
                                  hint="pass it in the step's args")  # fmt: skip


def _json(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


def require_node(svc: Service, node: str) -> tuple[str, str]:
    """(backend, name) of a node that exists, given as ``NAME`` or ``BACKEND:NAME``;
    ``NotFound`` naming the known nodes otherwise (``InvalidInput`` for an ambiguous name)."""
    backend, name = svc.resolve_node(node)
    known = backend.nodes()
    if not any(n.name == name for n in known):
        raise errors.NotFound(
            f"no node {backend.name}:{name}",
            hint=f"nodes of {backend.name}: {', '.join(n.name for n in known) or '(none)'}",
        )
    return backend.name, name


def check_params(svc: Service, types: Mapping[str, str], params: Mapping[str, Any]) -> None:
    """Refuse a run whose ``node`` parameters name nodes that do not exist (before any step:
    a typo must not read as "healthy" or "empty")."""
    for name, kind in types.items():
        if kind == "node" and params.get(name):
            require_node(svc, str(params[name]))


# --------------------------------------------------------------------------- read tools


def _cluster_status(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("cluster_status", a, {"node"}, set())
    out = _json(svc.cluster_status())
    if a.get("node"):
        backend, name = require_node(svc, a["node"])
        match = [n for n in svc.nodes(backend) if n.name == name]
        if not match:
            raise errors.NotFound(f"no node {a['node']}", hint="list nodes with list_nodes")
        out["node"] = _json(match[0])
    return out


def _list_nodes(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("list_nodes", a, {"backend"}, set())
    nodes = [_json(n) for n in svc.nodes(a.get("backend"))]
    return {"nodes": nodes, "count": len(nodes)}


def _list_workloads(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("list_workloads", a, {"backend", "node", "state"}, set())
    backend, node = (None, None)
    if a.get("node"):
        backend, node = require_node(svc, a["node"])
    items = svc.workloads(a.get("backend") or backend)
    if node:
        items = [w for w in items if w.node == node]
    if a.get("state"):
        items = [w for w in items if w.state.value == a["state"]]
    return {"workloads": [_json(w) for w in items], "count": len(items)}


def _get_workload(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("get_workload", a, {"workload"}, {"workload"})
    return _json(svc.get_workload(a["workload"]))


def _list_checkpoints(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("list_checkpoints", a, {"workload"}, set())
    items = svc.checkpoints(a.get("workload"))
    return {"checkpoints": [_json(c) for c in items], "count": len(items)}


def _queue_depth(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("queue_depth", a, {"backend", "partition"}, set())
    queues = insights.queue_depth(svc, a.get("backend"))
    if a.get("partition"):
        known = sorted({q.partition for q in queues if q.partition})
        queues = [q for q in queues if q.partition == a["partition"]]
        if not queues:  # an unknown partition is a mistake, not an empty queue
            raise errors.NotFound(
                f"no partition or queue {a['partition']!r}",
                hint=f"partitions with a queue: {', '.join(known) or '(none on these backends)'}",
            )
    ages = [q.oldest_pending_age_s for q in queues if q.oldest_pending_age_s is not None]
    return {
        "pending": sum(q.pending for q in queues),
        "running": sum(q.running for q in queues),
        "oldest_wait_minutes": round(max(ages) / 60, 1) if ages else 0.0,
        "backlog": any(q.backlog for q in queues),
        "queues": [_json(q) for q in queues],
    }


def _sla_risk(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("sla_risk", a, {"workload"}, set())
    risks = insights.sla_risk(svc)
    if not a.get("workload"):
        return {"risks": [_json(r) for r in risks], "count": len(risks)}
    for r in risks:
        if r.workload == a["workload"]:
            late_s = -r.slack_s if r.slack_s is not None else -r.time_left_s
            return {**_json(r), "minutes_late": round(max(0.0, late_s) / 60, 1)}
    svc.get_workload(a["workload"])  # unknown workload -> NotFound rather than "on time"
    return {"workload": a["workload"], "level": "none", "minutes_late": 0.0,
            "message": "no deadline (or not running): no SLA to rescue"}  # fmt: skip


def _spot_market(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("spot_market", a, set(), set())
    return _json(insights.spot_market(svc))


def _cluster_health(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("cluster_health", a, {"node"}, set())
    report = insights.cluster_health(svc)
    if not a.get("node"):
        return _json(report)
    backend, name = require_node(svc, a["node"])
    for sig in report.nodes:
        if sig.backend == backend and sig.node in (name, a["node"]):
            return {**_json(sig), "reason": "; ".join(sig.reasons) or "no reason reported"}
    raise errors.NotFound(f"no health signal for node {a['node']}",
                          hint="check the node id with list_nodes")  # fmt: skip


def _plan_actions(svc: Service, a: dict[str, Any], ctx: CallContext) -> Any:
    _args("plan_actions", a, {"goal", "partition", "target"}, set())
    report = insights.propose(svc)
    proposals = report.proposals
    if a.get("goal"):
        goal = str(a["goal"]).replace("-", "_")
        proposals = [p for p in proposals if p.trigger.replace("-", "_") == goal]
    if a.get("target"):
        proposals = [p for p in proposals if p.target == a["target"]]
    top = proposals[0] if proposals else None
    return {
        "count": len(proposals),
        "proposals": [_json(p) for p in proposals],
        "action": top.action.value if top else None,
        "workload": top.target if top else None,
        "summary": f"{top.action.value} {top.target}: {top.reason}" if top else "no proposal",
        "granted": insights.grant_covers(
            svc, top, ctx.principal, interface=actions.Interface.RUNBOOK
        )
        if top
        else False,
    }


def _plan(action: Action) -> ToolCall:
    def call(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
        _args(f"plan_{action.value}", a, {"workload", "to", "reason"}, {"workload"})
        params = {"to": a.get("to") or None}
        plan = svc.plan(action, a["workload"], params, reason=a.get("reason") or "",
                        interface=actions.Interface.RUNBOOK)  # fmt: skip
        out = _json(plan)
        out["projection"] = projection(svc, plan)
        return out

    return call


def _list_pools(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("list_pools", a, {"backend", "pool", "min_wait_minutes"}, set())
    if a.get("pool"):
        wait = a.get("min_wait_minutes")
        if wait is None:
            return read_pool(svc, str(a["pool"]))
        # As [capacity] grow_after_wait_s: at most a day (an infinite wait meant "never").
        if (
            isinstance(wait, bool)
            or not isinstance(wait, int | float)
            or not 0 <= wait <= DAY_S / 60
        ):
            raise errors.InvalidInput(
                f"min_wait_minutes must be a number from 0 to {DAY_S / 60:g}, not {wait!r}",
                hint="e.g. 1 (the planner's own threshold)",
            )
        return read_pool(svc, str(a["pool"]), min_wait_s=float(wait) * 60)
    pools = svc.pools(a.get("backend"))
    return {"pools": [_json(p) for p in pools], "count": len(pools)}


def _list_approvals(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("list_approvals", a, {"status"}, set())
    items = svc.list_approvals(status=a.get("status"))
    return {"approvals": [_json(v) for v in items], "count": len(items)}


def _get_approval(svc: Service, a: dict[str, Any], _: CallContext) -> Any:
    _args("get_approval", a, {"approval_id"}, {"approval_id"})
    return _json(svc.get_approval(a["approval_id"]))


# --------------------------------------------------------------------------- action tools


def _action(spec: actions.ActionSpec) -> ToolCall:
    """The runbook call of a catalogue action: its target, its parameters (checked by the
    service against the catalogue, so an unknown or redirected one is refused with the
    valid arguments), ``reason`` (required: runbook steps always say why) and ``dry_run``."""
    target_arg = spec.target.value
    allowed = {target_arg, "reason", "dry_run", *spec.fields(), *spec.redirects}

    def call(svc: Service, a: dict[str, Any], ctx: CallContext) -> Any:
        _args(spec.runbook_call, a, allowed, {target_arg, "reason"})
        params = {k: v for k, v in a.items() if k not in (target_arg, "reason", "dry_run")}
        result = svc.act(
            spec.action,
            a[target_arg],
            params,
            principal=ctx.principal,
            reason=a["reason"],
            dry_run=ctx.dry_run or a.get("dry_run") is True,
            trigger=ctx.trigger,
            interface=actions.Interface.RUNBOOK,
        )
        return _json(result)

    return call


CALLS: dict[str, ToolCall] = {
    "cluster_status": _cluster_status,
    "list_nodes": _list_nodes,
    "list_workloads": _list_workloads,
    "get_workload": _get_workload,
    "list_checkpoints": _list_checkpoints,
    "queue_depth": _queue_depth,
    "sla_risk": _sla_risk,
    "spot_market": _spot_market,
    "cluster_health": _cluster_health,
    "plan_actions": _plan_actions,
    "list_pools": _list_pools,
    "plan_migration": _plan(Action.MIGRATE),
    "plan_failover": _plan(Action.FAILOVER),
    "list_approvals": _list_approvals,
    "get_approval": _get_approval,
    **{spec.runbook_call: _action(spec) for spec in actions.CATALOGUE.values()},
}
