"""Inventory reads of the service: nodes, workloads, checkpoints, queues, cluster status.

Each call fans out to the configured backends (or the one named); a checkpoint listing
audits, once, every untrusted checkpoint it shows. ``reseal_checkpoint`` is the one write
here: a person vouches for a checkpoint of ours (audited). Nothing here plans or acts.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from core import errors
from core.backends.base import Backend, ProgressSource, QueueDepthSource
from core.backends.capacity import PoolSource
from core.model import (
    CheckpointInfo,
    CheckpointStatus,
    NodeInfo,
    PoolInfo,
    Principal,
    WorkloadInfo,
)
from core.schema_base import Model
from core.service.lookup import Lookup
from core.signals.queue import QueueDepth, coerce, from_workloads
from core.signals.sla import Progress
from core.store.store import CheckpointStore


class ClusterStatus(Model):
    backends: list[str]
    nodes: list[NodeInfo]
    workloads_by_state: dict[str, int]
    checkpoints: int
    engine: dict[str, Any] = Field(default_factory=dict)
    unavailable: dict[str, str] = Field(default_factory=dict)


class Inventory(Lookup):
    """Mixin of ``Service``: the read side of the world, across backends."""

    def _each(self, backend: str | None) -> list[Backend]:
        return [self.backend(backend)] if backend else list(self.backends.values())

    def nodes(self, backend: str | None = None) -> list[NodeInfo]:
        return [n for b in self._each(backend) for n in b.nodes()]

    def pools(self, backend: str | None = None) -> list[PoolInfo]:
        """Node pools of the backends that have them (``PoolSource``); none elsewhere."""
        return [p for b in self._each(backend) if isinstance(b, PoolSource) for p in b.pools()]

    def workloads(self, backend: str | None = None) -> list[WorkloadInfo]:
        return [w for b in self._each(backend) for w in b.workloads()]

    def get_workload(self, ref: str) -> WorkloadInfo:
        backend, name = self._split(ref, what="workload")
        return backend.get_workload(name)

    def checkpoints(
        self, workload: str | None = None, *, backend: str | None = None
    ) -> list[CheckpointInfo]:
        """One workload's checkpoints, else every checkpoint of ``backend`` (None: all)."""
        if workload is None:
            found = [c for b in self._each(backend) for c in b.checkpoints(None)]
        else:
            owner, name = self._split(workload, what="workload")
            owner.get_workload(name)  # unknown workload -> NotFound, not an empty list
            found = owner.checkpoints(name)
        for c in found:
            if c.status is CheckpointStatus.UNTRUSTED:
                self._audit_untrusted(
                    c.id, action="list", reason=str(c.extra.get("untrusted_reason", "")), once=True
                )
        return found

    def _audit_untrusted(
        self, checkpoint: str, *, action: str, reason: str, once: bool = False
    ) -> None:
        """Record that an untrusted checkpoint was met (someone may have planted or altered
        it): every refused restore, and the first listing that shows it (``once``)."""
        if once and any(
            e.kind == "checkpoint.untrusted" for e in self.audit.entries(subject=checkpoint)
        ):
            return
        outcome = "listed as untrusted" if action == "list" else "refused"
        self.audit.append(
            "checkpoint.untrusted",
            principal="system:store",
            subject=checkpoint,  # BACKEND:LINEAGE@SEQ
            data={"action": action, "outcome": outcome, "reason": reason},
        )

    def reseal_checkpoint(self, checkpoint: str, *, principal: Principal) -> CheckpointInfo:
        """Sign an untrusted checkpoint of ours again (a person vouches that it is theirs:
        one written before manifests were signed, or after its key was replaced). Only its
        owner can, only when every byte still matches its manifest; audited."""
        backend, cid = self._split_checkpoint(checkpoint)
        store = getattr(backend, "store", None)
        if not isinstance(store, CheckpointStore):
            raise errors.NotSupported(
                f"the {backend.name} backend's checkpoints are signed by the jobs' own wrappers",
                hint="re-seal it as its owner on a node of that backend, or take a new checkpoint",
            )
        info = store.reseal(cid)
        self.audit.append(
            "checkpoint.resealed",
            principal=str(principal),
            subject=f"{backend.name}:{cid}",
            data={"files": len(info.files), "size_bytes": info.size_bytes},
        )
        return info

    def queue_depth(self, backend: str | None = None) -> list[QueueDepth]:
        """Each backend's queue: its own (``QueueDepthSource``), else synthesised from its
        workloads' states."""
        out: list[QueueDepth] = []
        for b in self._each(backend):
            if isinstance(b, QueueDepthSource):
                out.extend(coerce(item, backend=b.name) for item in b.queue_depth())
            else:
                out.extend(from_workloads(b.name, b.workloads()))
        return out

    def progress(self, backend: str, name: str) -> Progress | None:
        """The progress workload ``name`` of ``backend`` reports itself, where the backend
        can tell (``ProgressSource``); None otherwise."""
        found = self.backends.get(backend)
        return found.progress(name) if isinstance(found, ProgressSource) else None

    def cluster_status(self) -> ClusterStatus:
        # Local import: engines load lazily (probing criu runs a binary, cuda loads libcuda).
        from core.checkpoint.engine import statuses

        nodes: list[NodeInfo] = []
        counts: dict[str, int] = {}
        ckpts = 0
        unavailable: dict[str, str] = {}
        for name, backend in self.backends.items():
            try:
                nodes.extend(backend.nodes())
                for w in backend.workloads():
                    counts[w.state.value] = counts.get(w.state.value, 0) + 1
                ckpts += len(backend.checkpoints(None))
            except errors.BackendUnavailable as exc:
                unavailable[name] = str(exc)
        return ClusterStatus(
            backends=sorted(self.backends),
            nodes=nodes,
            workloads_by_state=counts,
            checkpoints=ckpts,
            engine={
                name: status.model_dump()
                for name, status in statuses(self.settings.checkpoint).items()
            },
            unavailable=unavailable,
        )
