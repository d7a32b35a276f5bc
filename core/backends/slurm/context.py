"""What the Slurm backend's plans and steps need of it: ``SlurmContext``.

Plans (``plans``) and steps (``steps``) take this protocol, not ``SlurmBackend``, so they
do not import the backend module (which imports them for its dispatch tables). The backend
satisfies it; a test may pass anything that does. Limits: reads only, plus the transport
that runs the commands; no I/O here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from core.backends.slurm.config import SlurmConfig
from core.backends.slurm.transport import SlurmTransport
from core.model import CheckpointInfo, NodeInfo, PoolInfo, WorkloadInfo
from core.store.store import CheckpointStore


@dataclass(frozen=True)
class PowerState:
    """A node as power saving sees it: ``released`` (powered down or on its way),
    ``powered_down`` (all the way), ``answers`` (up and responding), the jobs on it."""

    released: bool
    powered_down: bool
    answers: bool
    jobs: tuple[str, ...]


class SlurmContext(Protocol):
    """The Slurm backend as its plans and steps see it."""

    @property
    def cfg(self) -> SlurmConfig: ...

    @property
    def transport(self) -> SlurmTransport: ...

    def get_workload(self, name: str) -> WorkloadInfo: ...

    def get_node(self, name: str) -> NodeInfo: ...

    def nodes(self) -> list[NodeInfo]:
        """The nodes up (powered-down ones are a pool's released capacity)."""
        ...

    def raw_jobs(self) -> list[dict[str, Any]]:
        """The controller's job records as it prints them (``inventory`` reads them)."""
        ...

    def raw_nodes(self) -> list[dict[str, Any]]:
        """The controller's node records as it prints them (``inventory`` reads them)."""
        ...

    def node_name(self, name: str) -> str:
        """A node name as Slurm knows it (``slurm:n4`` or ``n4``), checked."""
        ...

    def pools(self) -> list[PoolInfo]: ...

    def power_state(self, node: str) -> PowerState:
        """Where a node stands in Slurm's power saving, and the jobs on it."""
        ...

    def store(self, owner: str | None = None) -> CheckpointStore: ...

    def owner(self, w: WorkloadInfo) -> str | None: ...

    def lineage(self, w: WorkloadInfo) -> str:
        """The job's lineage; NotSupported for a job not started under the wrapper."""
        ...

    def newest_checkpoint(
        self, lineage: str, owner: str | None = None
    ) -> CheckpointInfo | None: ...

    def newest_seq(self, lineage: str, owner: str | None = None) -> int: ...

    def wait_until(
        self, what: str, timeout_s: float, check: Callable[[], Any], *, every_s: float | None = None
    ) -> Any:
        """``check()`` until it is truthy (returned); OperationFailed on timeout. Every
        ``poll_interval_s``, or ``every_s`` for a check that asks nothing of slurmctld."""
        ...
