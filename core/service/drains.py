"""Who took a node out of service: what an undrain plan must know before it undoes that.

Undrain is ``safe`` (nothing moves), but it can undo a person's decision: a node drained
for maintenance, or one that is down (Slurm's RESUME returns a DOWN node to service too).
``undrain_scope`` adds two facts to an undrain plan's scope, read when it is planned:

- ``node_down``: the node's health is ``down`` (``core.signals.nodes.node_health``);
- ``drained_by``: the kind of principal whose clawpoint drain or cordon put the node in its
  present state (``person``, ``agent``, ``scheduler``), or ``unknown``.

``drained_by`` comes from the execution journal, the same on every backend: the newest
finished node-state change of that node (drain, cordon, undrain). It is that drain's
principal only when the drain succeeded, no undrain came after it, and the node still
carries the reason the drain wrote (``NodeInfo.reason``: Slurm's drain reason, the local
node's reason, the Kubernetes cordon-reason annotation clawpoint writes). A node drained
outside clawpoint (``scontrol``, ``kubectl cordon``, another state file), or whose reason
someone changed since, is ``unknown``: the policy treats that as a person's drain
(``core.guardrails.policy.undrain_claims``: such an undrain needs a person unless a person
asks).

Limits: a person who re-drains, outside clawpoint and with the same reason, a node that an
agent drained through clawpoint is not seen.
"""

from __future__ import annotations

import json
from typing import Any

from core.model import Action, ExecutionStatus, NodeHealth, NodeInfo, PlanScope
from core.signals.nodes import node_health
from core.state.db import Database

NODE_STATE_ACTIONS = (Action.DRAIN_NODE, Action.CORDON_NODE, Action.UNDRAIN_NODE)
UNKNOWN = "unknown"


def _written_reason(plan_body: str) -> str:
    """The reason the drain's cordon step wrote on the node ('' when none)."""
    steps: list[dict[str, Any]] = json.loads(plan_body).get("steps") or []
    for step in steps:
        reason = (step.get("args") or {}).get("reason")
        if isinstance(reason, str) and reason:
            return reason
    return ""


def drained_by(db: Database, node: NodeInfo) -> str:
    """The principal kind of the clawpoint drain the node is in now, or ``unknown``."""
    marks = ",".join("?" for _ in NODE_STATE_ACTIONS)
    with db.read() as conn:
        row = conn.execute(
            "SELECT e.action, e.principal, e.status, p.body FROM executions e "
            "JOIN plans p ON p.hash = e.plan_hash "
            f"WHERE e.target = ? AND e.action IN ({marks}) AND e.status != 'running' "
            "ORDER BY e.started_at DESC LIMIT 1",
            (node.id, *(a.value for a in NODE_STATE_ACTIONS)),
        ).fetchone()
    if row is None or row["status"] != ExecutionStatus.SUCCEEDED.value:
        return UNKNOWN
    if row["action"] == Action.UNDRAIN_NODE.value:
        return UNKNOWN  # drained again since, outside clawpoint
    written = _written_reason(row["body"])
    if written and written not in node.reason:
        return UNKNOWN  # someone changed the reason since: not (only) our drain any more
    return str(row["principal"]).partition(":")[0] or UNKNOWN


def undrain_scope(db: Database, node: NodeInfo | None, scope: PlanScope) -> PlanScope:
    """``scope`` with what an undrain plan of ``node`` records about who drained it (see the
    module); a node the backend does not list was drained by someone unknown."""
    out = scope.model_copy()
    if node is None:
        out.drained_by = UNKNOWN
        return out
    out.drained_by = drained_by(db, node)
    out.node_down = node_health(node).health is NodeHealth.DOWN
    return out
