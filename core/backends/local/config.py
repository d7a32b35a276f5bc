"""Configuration of the local backend: the ``[local]`` section and its virtual nodes.

Validated through the backend registry (``core.backends.registry``), like every backend's
section. With no ``[local]`` section the backend runs with two virtual nodes: ``node-a``
(on-demand) and ``node-b`` (spot).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# The label that puts a node in a pool (the guardrails' blast radius reads the same one).
POOL_LABEL = "pool"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LocalNodeConfig(_Section):
    name: str
    price_per_hour: float = 0.0
    spot: bool = False
    labels: dict[str, str] = Field(default_factory=dict)
    gpus: int = 0


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

    min_size: int = Field(default=0, ge=0)


class LocalBackendConfig(_Section):
    """The ``[local]`` section. Unknown keys are errors, so a misspelling is named."""

    enabled: bool = True
    nodes: list[LocalNodeConfig] = Field(default_factory=_default_local_nodes)
    # ``[local.pools.NAME]``: a pool is every node labelled ``pool = NAME``; this only sets
    # its bounds (a pool not named here may shrink to nothing).
    pools: dict[str, LocalPoolConfig] = Field(default_factory=dict)

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
