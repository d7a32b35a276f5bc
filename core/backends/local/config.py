"""Configuration of the local backend: the ``[local]`` section and its virtual nodes.

Validated through the backend registry (``core.backends.registry``), like every backend's
section. With no ``[local]`` section the backend runs with two virtual nodes: ``node-a``
(on-demand) and ``node-b`` (spot). A node's size (``cpus``, ``memory``) is what a resize
fits workloads into; not set, it is this host's (CPU count, MemTotal), so every local node
reports a capacity (capacity not known never fits: ``core.backends.sizing``).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ConfigDict, Field, field_validator, model_validator

from core.schema_base import Model
from core.sizes import OptionalMemory, memory_mib

# The label that puts a node in a pool (the guardrails' blast radius reads the same one).
POOL_LABEL = "pool"


class _Section(Model):
    model_config = ConfigDict(extra="forbid")


class LocalNodeConfig(_Section):
    name: str
    price_per_hour: float = Field(default=0.0, ge=0, le=1e6)
    spot: bool = False
    labels: dict[str, str] = Field(default_factory=dict)
    gpus: int = Field(default=0, ge=0, le=1024)
    gpu_class: str | None = Field(default=None, max_length=63)
    cpus: int | None = Field(default=None, ge=1, le=4096)  # None: the host's CPU count
    memory: OptionalMemory = Field(default=None, max_length=32)  # "8Gi"; None: MemTotal

    @property
    def cpu_count(self) -> int:
        """The CPUs workloads on it may have together."""
        return self.cpus if self.cpus is not None else os.cpu_count() or 1

    @property
    def memory_mb(self) -> int:
        """The memory (MiB) workloads on it may have together."""
        return memory_mib(self.memory) if self.memory else host_memory_mb()


def host_memory_mb() -> int:
    """This host's MemTotal in MiB (/proc/meminfo, proc(5))."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise OSError("no MemTotal in /proc/meminfo")


def _default_local_nodes() -> list[LocalNodeConfig]:
    return [
        LocalNodeConfig(
            name="node-a", price_per_hour=3.06, spot=False, labels={"pool": "on-demand"}
        ),
        LocalNodeConfig(name="node-b", price_per_hour=0.92, spot=True, labels={"pool": "spot"}),
    ]


class LocalPoolConfig(_Section):
    """Bounds of one pool (the nodes whose ``pool`` label names it): ``scale_pool`` keeps
    at least ``min_size`` of them up; at most all of them."""

    min_size: int = Field(default=0, ge=0, le=100_000)


class LocalBackendConfig(_Section):
    """The ``[local]`` section. Unknown keys are errors, so a misspelling is named."""

    enabled: bool = True
    nodes: list[LocalNodeConfig] = Field(default_factory=_default_local_nodes)
    # ``[local.pools.NAME]``: a pool is every node labelled ``pool = NAME``; this only sets
    # its bounds (a pool not named here may shrink to nothing).
    pools: dict[str, LocalPoolConfig] = Field(default_factory=dict)
    # A delegated cgroup v2 directory this user may write: workloads with a size get their
    # cgroups under it (``core.wrapper.cgroup_limits``). None: the host's hierarchy (root).
    cgroup_root: str | None = None

    @model_validator(mode="after")
    def _pools_have_nodes(self) -> LocalBackendConfig:
        for name, pool in self.pools.items():
            members = [n for n in self.nodes if n.labels.get(POOL_LABEL) == name]
            if not members:
                raise ValueError(f"[local.pools.{name}]: no node has the label pool = {name!r}")
            if pool.min_size > len(members):
                raise ValueError(
                    f"[local.pools.{name}] min_size {pool.min_size} is more than its "
                    f"{len(members)} node(s)"
                )
        return self

    @field_validator("nodes")
    @classmethod
    def _unique_names(cls, value: list[LocalNodeConfig]) -> list[LocalNodeConfig]:
        names = [n.name for n in value]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate local node names: {names}")
        return value
