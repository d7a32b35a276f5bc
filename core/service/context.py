"""What the policy needs to know about the world when it decides (counts, pool loads).

The guardrails never look at the world themselves: the service builds this context from the
journal (executions in the last hour, disruptive ones in flight) and the target backend's
inventory (the pool's nodes and workloads), so decisions stay pure and testable.

Only executions in flight count against the concurrency and blast-radius limits (an orphan
whose owner died holds no slot; recovery finishes it), the blast radius of a pool counts
only the in-flight executions whose own plan falls in that pool, and an execution that
changes one of the plan's own workloads never counts against it: a kill of a workload whose
migrate hangs is not held back by that migrate (the same workload is disrupted once).
"""

from __future__ import annotations

import json
from datetime import timedelta

from core import errors
from core.backends.base import Backend
from core.guardrails.policy import PolicyContext, PoolLoad, pool_of
from core.model import Action, NodeInfo, Plan, RiskClass, utcnow
from core.service.journal import Journal, touched
from core.state.db import Database


def _node_pool(node: NodeInfo, backend: str) -> str:
    return node.labels.get("pool") or (node.partitions[0] if node.partitions else backend)


class WorldContext:
    """Mixin of ``Service``; ``db``, ``journal`` and ``backend()`` come from the service."""

    db: Database
    journal: Journal

    def backend(self, name: str) -> Backend:
        raise NotImplementedError

    def policy_context(self, plan: Plan) -> PolicyContext:
        """What the policy needs to know about the world right now (counts, pool loads)."""
        since = utcnow() - timedelta(hours=1)
        per_class: dict[RiskClass, int] = {}
        disrupting: list[Plan] = []  # plans of disruptive executions in flight (others')
        mine = touched(plan)
        with self.db.read() as conn:
            flying = {i for i, _ in self.journal.in_flight(conn)}
            rows = conn.execute(
                "SELECT e.id, e.status, e.started_at, p.body FROM executions e "
                "JOIN plans p ON p.hash = e.plan_hash WHERE e.started_at >= ? OR e.status='running'",
                (since.isoformat(),),
            ).fetchall()
            # Per workload, agents only: what the agent-checkpoint rate limit counts.
            agent_checkpoints = conn.execute(
                "SELECT COUNT(*) FROM executions WHERE action = ? AND target = ? "
                "AND principal LIKE 'agent:%' AND started_at >= ?",
                (Action.CHECKPOINT.value, plan.target, since.isoformat()),
            ).fetchone()[0]
        for row in rows:
            risk = RiskClass(json.loads(row["body"])["risk"])
            if row["started_at"] >= since.isoformat():
                per_class[risk] = per_class.get(risk, 0) + 1
            if row["id"] in flying and risk in (RiskClass.DISRUPTIVE, RiskClass.DESTRUCTIVE):
                other = Plan.model_validate_json(row["body"])
                if not touched(other) & mine:
                    disrupting.append(other)
        pools: dict[str, PoolLoad] = {}
        pool = pool_of(plan)
        try:
            nodes = self.backend(plan.backend).nodes()
            members = [n for n in nodes if _node_pool(n, plan.backend) == pool] or nodes
            pools[pool] = PoolLoad(
                nodes=len(members),
                nodes_drained=sum(1 for n in members if not n.schedulable),
                workloads=sum(len(n.workloads) for n in members),
                workloads_disrupted=sum(
                    1 for p in disrupting if p.backend == plan.backend and pool_of(p) == pool
                ),
            )
        except errors.ClawpointError:
            pass  # an unreachable backend will fail the plan's steps anyway
        return PolicyContext(
            running_disruptive=len(disrupting),
            actions_last_hour=per_class,
            pools=pools,
            deletes_newest_good_checkpoint=bool(plan.scope.newest_of_live_workload),
            agent_checkpoints_last_hour=int(agent_checkpoints),
        )
