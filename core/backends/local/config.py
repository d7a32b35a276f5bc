"""Configuration of the local backend: the ``[local]`` section and its virtual nodes.

Validated through the backend registry (``core.backends.registry``), like every backend's
section. With no ``[local]`` section the backend runs with two virtual nodes: ``node-a``
(on-demand) and ``node-b`` (spot).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


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


class LocalBackendConfig(_Section):
    """The ``[local]`` section. Unknown keys are errors, so a misspelling is named."""

    enabled: bool = True
    nodes: list[LocalNodeConfig] = Field(default_factory=_default_local_nodes)

    @field_validator("nodes")
    @classmethod
    def _unique_names(cls, value: list[LocalNodeConfig]) -> list[LocalNodeConfig]:
        names = [n.name for n in value]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate local node names: {names}")
        return value
