"""Queue depth: how much work waits for capacity, per backend and partition.

``QueueDepth`` is the planner's view of a scheduler queue. A backend that has a queue
offers ``queue_depth()`` (the optional capability ``core.backends.base.QueueDepthSource``)
returning a list of objects with these field names, or of mappings / pydantic models
holding a subset of them; ``coerce`` maps each in. Backends without a queue (local) get a
synthesized entry (``from_workloads``): pending work counted from PENDING workloads (zero
on local), running work counted from RUNNING ones. The service picks which.

Field names (the contract for backend authors; every field but ``backend`` is optional):

==========================  ==================================================================
``backend``                 backend name (``slurm``)
``partition``               partition / namespace / queue name; None = the whole backend
``pending``                 jobs waiting to start
``pending_by_reason``       reason -> count (Slurm ``Resources``, ``Priority``, ...)
``oldest_pending_age_s``    seconds the longest-waiting job has waited
``pending_gpus``            GPUs requested by the pending jobs, summed
``max_pending_priority``    highest priority among the pending jobs (scheduler's scale)
``running``                 jobs running
``running_gpus``            GPUs held by running jobs
==========================  ==================================================================

Limits: a snapshot; the numbers are the backend's, not recomputed here. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from core.model import WorkloadInfo, WorkloadState
from core.signals.model import Severity, Signal, utcnow

# A queue this deep (or this old) is a "backlog": the planner may preempt-and-save
# low-priority running work for it. Documented in docs/signals.md.
BACKLOG_MIN_PENDING = 1
BACKLOG_MIN_AGE_S = 600.0


class QueueDepth(Signal):
    """One backend/partition queue snapshot (see the module docstring for field meanings)."""

    kind: Literal["queue_depth"] = "queue_depth"
    backend: str
    partition: str | None = None
    pending: int = Field(default=0, ge=0)
    pending_by_reason: dict[str, int] = Field(default_factory=dict)
    oldest_pending_age_s: float | None = Field(default=None, ge=0)
    pending_gpus: int = Field(default=0, ge=0)
    max_pending_priority: int | None = None
    running: int = Field(default=0, ge=0)
    running_gpus: int = Field(default=0, ge=0)

    @property
    def backlog(self) -> bool:
        """True when work has waited long enough that freeing capacity is worth a move."""
        return (
            self.pending >= BACKLOG_MIN_PENDING
            and (self.oldest_pending_age_s or 0.0) >= BACKLOG_MIN_AGE_S
        )


_FIELDS = frozenset(QueueDepth.model_fields) - {"kind"}


def _as_dict(raw: Any) -> dict[str, Any]:
    if isinstance(raw, BaseModel):
        data = raw.model_dump()
    elif isinstance(raw, Mapping):
        data = dict(raw)
    else:
        data = {k: getattr(raw, k) for k in _FIELDS if hasattr(raw, k)}
    return {k: v for k, v in data.items() if k in _FIELDS and v is not None}


def coerce(raw: Any, *, backend: str) -> QueueDepth:
    """Map a backend's own queue record (same field names, any subset) to ``QueueDepth``."""
    if isinstance(raw, QueueDepth):
        return raw
    data = _as_dict(raw)
    data.setdefault("backend", backend)
    data.setdefault("source", f"backend:{backend}")
    depth = QueueDepth.model_validate(data)
    if depth.backlog and depth.severity is Severity.INFO:
        depth = depth.model_copy(update={"severity": Severity.WARNING})
    return depth


def from_workloads(backend: str, workloads: Iterable[WorkloadInfo]) -> list[QueueDepth]:
    """A queue synthesized from workload states, one entry per partition seen."""
    by_part: dict[str | None, dict[str, int]] = {}
    for w in workloads:
        if w.backend != backend:
            continue
        counts = by_part.setdefault(w.partition, {"pending": 0, "pgpu": 0, "run": 0, "rgpu": 0})
        if w.state is WorkloadState.PENDING:
            counts["pending"] += 1
            counts["pgpu"] += w.gpus
        elif w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING):
            counts["run"] += 1
            counts["rgpu"] += w.gpus
    if not by_part:
        by_part[None] = {"pending": 0, "pgpu": 0, "run": 0, "rgpu": 0}
    now = utcnow()
    return [
        QueueDepth(
            source=f"workloads:{backend}",
            observed_at=now,
            subject=f"{backend}:{part}" if part else backend,
            backend=backend,
            partition=part,
            pending=c["pending"],
            pending_gpus=c["pgpu"],
            running=c["run"],
            running_gpus=c["rgpu"],
            message=f"{c['pending']} pending, {c['run']} running",
        )
        for part, c in sorted(by_part.items(), key=lambda kv: kv[0] or "")
    ]
