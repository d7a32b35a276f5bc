"""The deadline projection of a plan that moves a workload: where it would finish after the
move, and what else would help when the move alone does not meet its deadline.

What a migration's dry run shows an agent (``plan_migrate`` in runbooks, ``planned``
results of the MCP action tools). Reads only: SLA risk from ``core.service.insights``,
node speeds from the inventory.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from core.model import Plan, utcnow
from core.service import insights
from core.service.facade import Service
from core.signals.sla import node_speed


def projection(svc: Service, plan: Plan, *, now: datetime | None = None) -> dict[str, Any] | None:
    """When ``plan`` moves a workload that has a deadline: its projected finish and slack
    where it runs now and after the move, and whether the move brings it inside the deadline.

    Work left scales with 1/speed (label ``clawpoint.io/speed``), plus the plan's pause. When
    the move does not meet the deadline, ``options`` names what would: the speed needed and
    the nodes that have it, lower-priority work to preempt on such nodes, or more capacity.
    None when the workload has no deadline or its progress is unknown."""
    now = now or utcnow()
    risk = next((r for r in insights.sla_risk(svc, now=now) if r.workload == plan.target), None)
    if risk is None or risk.remaining_s is None:
        return None
    nodes = {n.name: n for n in svc.nodes(plan.backend)}
    dest = plan.scope.target_node
    target = nodes.get(dest) if dest else None
    to_speed = node_speed(target)
    pause = float(plan.expected_pause_s or 0.0)
    left = risk.remaining_s * risk.node_speed / to_speed + pause
    finish = now + timedelta(seconds=left)
    slack = risk.time_left_s - left
    out: dict[str, Any] = {
        "deadline": risk.deadline.isoformat(),
        "finish_now": risk.eta.isoformat() if risk.eta else None,
        "slack_now_s": round(risk.slack_s or 0.0, 1),
        "target_node": dest,
        "target_speed": to_speed,
        "projected_finish": finish.isoformat(),
        "slack_s": round(slack, 1),
        "minutes_late": round(max(0.0, -slack) / 60, 1),
        "meets_deadline": slack >= 0,
        "options": [],
        "advice": "",
    }
    if slack >= 0:
        out["advice"] = f"the move finishes {slack / 60:.0f} min before the deadline"
        return out
    budget = risk.time_left_s - pause
    needed = risk.remaining_s * risk.node_speed / budget if budget > 0 else None
    options: list[str] = []
    if needed is None:
        options.append("no node can finish it in time: ask for a later deadline")
    else:
        fast = [n for n in nodes.values() if node_speed(n) >= needed and n.name != risk.node]
        free = [n.name for n in fast if n.schedulable and n.health.value != "down"]
        busy = [n for n in fast if n.workloads]
        if free:
            options.append(f"migrate to a node of speed >= {needed:.1f}: {', '.join(free)}")
        for n in busy:
            options.append(
                f"preempt work on {n.name} if it has lower priority "
                f"({', '.join(n.workloads)}), then migrate there"
            )
        if not fast:
            options.append(f"ask for capacity: a node of speed >= {needed:.1f} (none exists)")
    out["needed_speed"] = round(needed, 2) if needed else None
    out["options"] = options
    out["advice"] = (
        f"moving to {dest} (speed {to_speed:g}) still finishes "
        f"{out['minutes_late']} min late; what would help: " + "; ".join(options)
    )
    return out
