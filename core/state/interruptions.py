"""The interruptions clawpoint has seen on this cluster, and for how long it watched.

Role: the history the checkpoint economics learn the interruption hazard from, instead of
only the configured guess (``[economics] spot_mtbf_h`` / ``on_demand_mtbf_h``). Each watch
pass ``observe``s the nodes it read (time watched is added per node, at most ``max_gap_s``
per pass, so hours when nothing watched count as nothing) and ``record``s an interruption
when a node is lost: a spot notice that takes the node back, or a node seen down. One
interruption per node, kind and episode (its first sighting): seeing the same notice on
every pass counts once. ``tally`` sums a class of nodes (a backend's spot or on-demand
nodes): interruptions and node-hours watched.

Limits: only what a watch loop saw (a reclaim while nothing watched is not counted, and
neither is its time); a node's spot flag is the one it had when last observed; node ids are
``BACKEND:NAME``, so a node renamed starts a new history. Kept for ever (a few rows per
node; interruptions are rare events).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from core.state.db import Database, register_migrations

MIGRATIONS = [
    """
    CREATE TABLE node_watch (
        node TEXT PRIMARY KEY,
        backend TEXT NOT NULL,
        spot INTEGER NOT NULL,
        watched_s REAL NOT NULL DEFAULT 0,
        last_seen TEXT NOT NULL
    );
    CREATE TABLE interruptions (
        node TEXT NOT NULL,
        backend TEXT NOT NULL,
        spot INTEGER NOT NULL,
        kind TEXT NOT NULL,
        at TEXT NOT NULL,
        UNIQUE (node, kind, at)
    );
    """,
]
# A watch pass counts at most this much time since the node was last seen: a loop that
# stopped for a day did not watch the node for a day.
MAX_GAP_S = 300.0


def install() -> None:
    register_migrations("interruptions", MIGRATIONS)


install()


@dataclass(frozen=True)
class Tally:
    """Interruptions seen on a class of nodes and the node-hours watched."""

    events: int
    watched_h: float


@dataclass(frozen=True)
class Observed:
    """A node as a watch pass saw it."""

    node: str  # BACKEND:NAME
    backend: str
    spot: bool


class InterruptionHistory:
    def __init__(self, db: Database) -> None:
        self.db = db
        if db.schema_versions().get("interruptions", 0) < len(MIGRATIONS):
            db._migrated = False  # the handle may have migrated before this module registered
            db.migrate()

    def observe(
        self, nodes: Iterable[Observed], now: datetime, *, max_gap_s: float = MAX_GAP_S
    ) -> None:
        """Add the time since each node was last seen (at most ``max_gap_s``)."""
        with self.db.write() as conn:
            for n in nodes:
                row = conn.execute(
                    "SELECT last_seen FROM node_watch WHERE node=?", (n.node,)
                ).fetchone()
                gap = 0.0
                if row is not None:
                    gap = min(
                        max((now - datetime.fromisoformat(row[0])).total_seconds(), 0.0), max_gap_s
                    )
                conn.execute(
                    "INSERT INTO node_watch(node, backend, spot, watched_s, last_seen) "
                    "VALUES(?,?,?,?,?) ON CONFLICT(node) DO UPDATE SET spot=excluded.spot, "
                    "watched_s=node_watch.watched_s + ?, last_seen=excluded.last_seen",
                    (n.node, n.backend, int(n.spot), 0.0, now.isoformat(), gap),
                )

    def record(self, node: Observed, kind: str, at: datetime) -> bool:
        """One interruption of ``node`` (``kind``: reclaim or failure) whose episode began
        ``at``; False when that episode is already recorded."""
        with self.db.write() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO interruptions(node, backend, spot, kind, at) VALUES(?,?,?,?,?)",
                (node.node, node.backend, int(node.spot), kind, at.isoformat()),
            )
            return cur.rowcount == 1

    def tally(self, backend: str, *, spot: bool) -> Tally:
        """What was seen on ``backend``'s spot (or on-demand) nodes."""
        with self.db.read() as conn:
            events = conn.execute(
                "SELECT COUNT(*) FROM interruptions WHERE backend=? AND spot=?",
                (backend, int(spot)),
            ).fetchone()[0]
            watched = conn.execute(
                "SELECT COALESCE(SUM(watched_s), 0) FROM node_watch WHERE backend=? AND spot=?",
                (backend, int(spot)),
            ).fetchone()[0]
        return Tally(events=int(events), watched_h=float(watched) / 3600.0)
