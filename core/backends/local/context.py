"""What the local backend's plans and steps need of it: ``LocalContext``, ``LocalStepContext``.

Plans (``plans``, ``node_plans``, ``planning``) and steps (``steps``, ``starting``, ``recovery``) take these protocols,
not ``LocalBackend``, so they do not import the backend module (which imports them for its
dispatch table). The backend satisfies it; a test may pass anything that does. Limits:
reads only; planning never changes a workload (``refresh`` only records a death it finds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from core.backends.local.config import LocalNodeConfig, LocalPoolConfig
from core.config import Settings
from core.model import NodeInfo, PoolInfo, WorkloadInfo
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.store.store import CheckpointStore


class LocalContext(Protocol):
    """The local backend as its plans see it."""

    @property
    def settings(self) -> Settings: ...

    @property
    def registry(self) -> WorkloadRegistry: ...

    @property
    def store(self) -> CheckpointStore: ...

    @property
    def node_config(self) -> Mapping[str, LocalNodeConfig]:
        """The configured virtual nodes by name (price, spot flag, labels, GPUs)."""
        ...

    @property
    def pool_config(self) -> Mapping[str, LocalPoolConfig]:
        """The ``[local.pools.NAME]`` bounds by pool name."""
        ...

    def nodes(self) -> list[NodeInfo]:
        """The nodes up (a pool's released nodes are not listed)."""
        ...

    def pools(self) -> list[PoolInfo]: ...

    def released_nodes(self) -> set[str]:
        """The configured nodes a pool has released."""
        ...

    def workloads(self) -> list[WorkloadInfo]: ...

    def get_node(self, name: str) -> NodeInfo: ...

    def refresh(self, record: WorkloadRecord) -> WorkloadRecord:
        """The record, marked FAILED first when its wrapper is gone."""
        ...


class LocalStepContext(LocalContext, Protocol):
    """The local backend as its steps see it: what plans see, plus the one write a step
    makes outside the registry and the store (a virtual node's schedulable flag)."""

    def set_node(
        self, node: str, *, schedulable: bool, reason: str, health: str | None = None
    ) -> None: ...

    def set_released(self, node: str, released: bool) -> None:
        """Release a pool's node, or provision it again (up, schedulable, healthy)."""
        ...
