"""What the Kubernetes backend's plans and steps need of it: ``KubeContext``.

Plans (``plans``, ``node_plans``, ``moves``, ``jobs``, ``nodes``) and steps (``steps``,
``requests``) take this protocol, not ``KubernetesBackend``, so none of them imports the
backend module (which imports them for its dispatch tables). The backend satisfies it.
Limits: reads and waits only, plus the connection the requests go through; no I/O here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from core.backends.kubernetes import ids
from core.backends.kubernetes.config import KubernetesConfig
from core.backends.kubernetes.connection import Connection
from core.backends.kubernetes.inventory import Inventory
from core.backends.kubernetes.node_info import NodeDetail
from core.model import CheckpointInfo, NodeInfo
from core.store.store import CheckpointStore

Obj = dict[str, Any]


class KubeContext(Protocol):
    """The Kubernetes backend as its plans and steps see it."""

    @property
    def cfg(self) -> KubernetesConfig: ...

    @property
    def conn(self) -> Connection: ...

    @property
    def inventory(self) -> Inventory: ...

    def read_raw(self, ref: ids.WorkloadRef) -> Obj: ...

    def list_pods(self, namespace: str | None, **selectors: str | None) -> list[Obj]: ...

    def node_detail(self, node: str) -> NodeDetail: ...

    def get_node(self, node: str) -> NodeInfo: ...

    def target_node(self, wanted: Any, *, away_from: str | None = None) -> str | None:
        """The node ``to`` names, checked to exist (None when not given)."""
        ...

    def preflight(
        self,
        spec: Obj,
        *,
        to: str | None,
        away: list[str],
        what: str,
        pod: tuple[str, str] | None = None,
    ) -> list[str]:
        """The nodes the pod ``spec`` would be scheduled on; Conflict when none fits."""
        ...

    def next_pod_name(self, old: str) -> str: ...

    def wait_until(self, what: str, timeout_s: float, check: Callable[[], Any]) -> Any:
        """``check()`` until it is truthy (returned); OperationFailed on timeout."""
        ...

    def store(self) -> CheckpointStore | None: ...

    def newest_seq(self, lineage: str) -> int: ...

    def newest_good(self, lineage: str) -> CheckpointInfo | None: ...
