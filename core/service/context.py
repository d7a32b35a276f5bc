"""What the policy needs to know about the world when it decides (counts, pool loads).

The guardrails never look at the world themselves: the service builds this context from the
journal (executions in the last hour, disruptive ones still running) and the target
backend's inventory (the pool's nodes and workloads), so decisions stay pure and testable.
"""

from __future__ import annotations

import json
from datetime import timedelta

from core import errors
from core.backends.base import Backend
from core.guardrails.policy import PolicyContext, PoolLoad, pool_of
from core.model import NodeInfo, Plan, RiskClass, utcnow
from core.state.db import Database


def _node_pool(node: NodeInfo, backend: str) -> str:
    return node.labels.get("pool") or (node.partitions[0] if node.partitions else backend)


class WorldContext:
    """Mixin of ``Service``; ``db`` and ``backend()`` come from the service."""

    db: Database

    def backend(self, name: str) -> Backend:
        raise NotImplementedError

    def policy_context(self, plan: Plan) -> PolicyContext:
        """What the policy needs to know about the world right now (counts, pool loads)."""
        since = utcnow() - timedelta(hours=1)
        per_class: dict[RiskClass, int] = {}
        running_disruptive = 0
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT e.status, e.started_at, p.body FROM executions e "
                "JOIN plans p ON p.hash = e.plan_hash WHERE e.started_at >= ? OR e.status='running'",
                (since.isoformat(),),
            ).fetchall()
        for row in rows:
            risk = RiskClass(json.loads(row["body"])["risk"])
            if row["started_at"] >= since.isoformat():
                per_class[risk] = per_class.get(risk, 0) + 1
            if row["status"] == "running" and risk in (RiskClass.DISRUPTIVE, RiskClass.DESTRUCTIVE):
                running_disruptive += 1
        pools: dict[str, PoolLoad] = {}
        pool = pool_of(plan)
        try:
            nodes = self.backend(plan.backend).nodes()
            members = [n for n in nodes if _node_pool(n, plan.backend) == pool] or nodes
            pools[pool] = PoolLoad(
                nodes=len(members),
                nodes_drained=sum(1 for n in members if not n.schedulable),
                workloads=sum(len(n.workloads) for n in members),
                workloads_disrupted=running_disruptive,
            )
        except errors.ClawpointError:
            pass  # an unreachable backend will fail the plan's steps anyway
        return PolicyContext(
            running_disruptive=running_disruptive,
            actions_last_hour=per_class,
            pools=pools,
            deletes_newest_good_checkpoint=bool(plan.scope.get("newest_of_live_workload")),
        )
