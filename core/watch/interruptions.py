"""What a watch pass adds to the interruption history the checkpoint economics learn from.

Each pass: the nodes it read were watched for the time since the last pass (at most
``core.state.interruptions.MAX_GAP_S``), and each node it saw lost is one interruption of its
episode: a notice that takes the node back (``reclaim``: spot termination, not a rebalance
recommendation or planned maintenance that keeps it) or the node down (``failure``). The
episode is the evidence's first sighting (``core.watch.evidence`` records it first), so the
same notice seen on every pass counts once.

Limits: only nodes the backends list (a node already gone from the list when its loss would
be seen is not counted); a failure counts for the class the node was in when seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from core.state.db import Database
from core.state.interruptions import InterruptionHistory, Observed
from core.watch.report import WatchReport


def record_interruptions(
    db: Database, report: WatchReport, *, now: datetime, nodes: Sequence[Any], ids: dict[str, str]
) -> None:
    """Add this pass to the history (see the module doc); ``report.evidence``: this pass's."""
    seen = {n.id: Observed(n.id, n.backend, bool(n.spot)) for n in nodes}
    history = InterruptionHistory(db)
    history.observe(seen.values(), now)
    lost = {
        ids.get(raw, raw)
        for n in report.notices
        if n.action.loses_node and (raw := n.node or n.subject or "")
    }
    for e in report.evidence:
        node = seen.get(str(e.get("subject", "")))
        if node is None:
            continue
        if e.get("trigger") == "node-down":
            kind = "failure"
        elif e.get("trigger") == "spot-interruption" and node.node in lost:
            kind = "reclaim"
        else:
            continue
        history.record(node, kind, datetime.fromisoformat(str(e["first_seen"])))
