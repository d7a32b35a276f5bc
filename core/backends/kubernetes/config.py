"""The ``[k8s]`` section of the settings: how to reach the cluster and how actions behave.

Role: the configuration models alone, apart from ``connection`` (the client, its retries
and error translation), so that reading the settings (every ``clawpoint`` command) does not
import the Kubernetes client side. Values are checked with the same id rules as the API
server's (``ids``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from core import errors
from core.backends.kubernetes import ids
from core.schema_base import Model


class KubePoolConfig(Model):
    """``[k8s.pools.NAME]``: a node pool and the autoscaler object that sizes it
    (``core.backends.kubernetes.pools``). ``kind`` says which: ``cluster-api`` (a Cluster API
    MachineDeployment that cluster-autoscaler scales) or ``karpenter`` (a Karpenter
    NodePool)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["cluster-api", "karpenter"]
    # The MachineDeployment or NodePool; default: the pool's name.
    object: str | None = None
    # The MachineDeployment's namespace (NodePools are cluster-scoped).
    namespace: str = "default"
    # Tighter bounds than the object's own (the autoscaler annotations, the NodePool's limits).
    min_size: int | None = Field(default=None, ge=0, le=100_000)
    max_size: int | None = Field(default=None, ge=0, le=100_000)
    # What one node costs per hour: the growth cost cap compares it.
    price_per_hour: float = Field(default=0.0, ge=0, le=1e6)
    spot: bool = False

    @field_validator("object")
    @classmethod
    def _valid_object(cls, value: str | None) -> str | None:
        if value is not None:
            _checked(ids.check_name, value)
        return value

    @field_validator("namespace")
    @classmethod
    def _valid_namespace(cls, value: str) -> str:
        return _checked(ids.check_namespace, value)


def _checked(check: Callable[[str], str], value: str) -> str:
    """A config value through an id check; its refusal as pydantic reports field errors."""
    try:
        return check(value)
    except errors.InvalidInput as exc:
        raise ValueError(exc.message) from None


class KubernetesConfig(Model):
    """The ``[k8s]`` section: how to reach the cluster and how actions behave."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="serve k8s: ids")

    kubeconfig: str | None = Field(
        default=None, description="kubeconfig path; default $KUBECONFIG, ~/.kube/config"
    )
    context: str | None = Field(
        default=None, description="kubeconfig context; default the current one"
    )
    in_cluster: bool = Field(default=False, description="use the pod's service account instead")
    namespaces: list[str] = Field(
        default_factory=list, description="namespaces in scope; empty = all"
    )
    request_timeout_s: float = Field(default=15.0, gt=0, le=3600)
    retry_total_s: float = Field(default=20.0, ge=0, le=3600)
    checkpoint_dir: str | None = Field(
        default=None,
        description="the checkpoint volume (PVC) as mounted where clawpoint runs; lists and "
        "checks checkpoints (wrapped pods mount the same volume)",
    )
    exec_python: list[str] = Field(
        default_factory=lambda: ["python"],
        min_length=1,
        description="the interpreter with clawpoint inside wrapped containers (pods/exec argv)",
    )
    checkpoint_timeout_s: float = Field(default=600.0, gt=0, le=86400)
    start_timeout_s: float = Field(default=600.0, gt=0, le=86400)
    eviction_wait_s: float = Field(
        default=300.0, ge=0, le=86400, description="how long a drain waits on a PodDisruptionBudget"
    )
    poll_interval_s: float = Field(default=1.0, gt=0, le=3600)
    live_handoff: bool = Field(
        default=True,
        description="a move of a bare pod (restartPolicy Never) starts its copy on the target "
        "first and hands the workload over to it (needs checkpoint_dir)",
    )
    min_replicas: int = Field(
        default=1,
        ge=0,
        le=100_000,
        description="scale floor; a workload's clawpoint.io/min-replicas raises it",
    )
    gpu_class_label: str = Field(
        default="nvidia.com/gpu.product",
        max_length=317,
        description="node label naming its GPU model (GPU feature discovery's by default)",
    )
    unsaved_after_s: float | None = Field(
        default=None,
        gt=0,
        le=604800,
        description="work unsaved this long keeps karpenter.sh/do-not-disrupt on the pod; "
        "unset: twice its --checkpoint-every, else 900",
    )
    pools: dict[str, KubePoolConfig] = Field(
        default_factory=dict, description="node pools scale_pool resizes ([k8s.pools.NAME])"
    )

    @field_validator("namespaces")
    @classmethod
    def _valid_namespaces(cls, value: list[str]) -> list[str]:
        return [ids.check_namespace(ns) for ns in value]
