"""What the planner's capacity rule needs from the service: the pools and when each last scaled.

``pool_facts`` reads every backend's node pools once per planning pass (``Service.pools``;
a backend without pools gives none) and, from the journal, when a ``scale_pool`` of each
pool last succeeded (the rule's hysteresis: ``core.planner.capacity_advice``). A backend
whose pools cannot be read is reported in the returned errors, and the others still count:
planning goes on without that backend's pools rather than failing.

Limits: "last scaled" reads the newest ``RECENT`` scale_pool executions only (older ones are
past any settle time worth having); a pool resized outside clawpoint is not seen.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from core import errors
from core.model import Action, ExecutionStatus, PoolInfo
from core.schema_base import Model
from core.service.facade import Service

RECENT = 50


class PoolFacts(Model):
    pools: list[PoolInfo] = Field(default_factory=list)
    scaled_at: dict[str, datetime] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)


def _scaled_at(service: Service) -> dict[str, datetime]:
    """Pool id -> when its newest successful scale_pool finished."""
    with service.db.read() as conn:
        rows = conn.execute(
            "SELECT target, finished_at FROM executions WHERE action=? AND status=? "
            "AND finished_at IS NOT NULL ORDER BY started_at DESC LIMIT ?",
            (Action.SCALE_POOL.value, ExecutionStatus.SUCCEEDED.value, RECENT),
        ).fetchall()
    out: dict[str, datetime] = {}
    for target, finished in rows:
        at = datetime.fromisoformat(finished)
        if target not in out or at > out[target]:
            out[target] = at
    return out


def pool_facts(service: Service) -> PoolFacts:
    """Every backend's pools and when each last scaled; read failures become errors."""
    facts = PoolFacts()
    for name in service.backends:
        try:
            facts.pools.extend(service.pools(name))
        except errors.ClawpointError as exc:
            facts.errors.append(f"pools of {name}: {exc}")
    if facts.pools:
        facts.scaled_at = _scaled_at(service)
    return facts
