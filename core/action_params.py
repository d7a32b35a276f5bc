"""The parameters of the catalogue's actions: one pydantic model per shape of arguments.

Every field has a type, a default when optional, and a ``description``: the description is
what MCP clients and ``--help`` show, so it is written for them (short; agents pay per
token). Extra fields are refused. The catalogue (``core.actions``) names which model each
action takes and re-exports them all; import them from there.
Limits: shapes and bounds only; whether a node or workload exists is the service's and the
backend's business.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from core.durations import INTERVAL_HELP, Interval
from core.schema_base import Model
from core.sizes import MEMORY_HELP, OptionalMemory, memory_mib


class ActionParams(Model):
    """Base of every action's parameters: frozen, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


NodeArg = Annotated[
    str | None,
    Field(
        max_length=128,
        description="NAME or BACKEND:NAME; omit: clawpoint picks",
    ),
]


class NoParams(ActionParams):
    """An action that takes no parameters."""


class MoveParams(ActionParams):
    """An action that places a workload somewhere."""

    to: NodeArg = None


class StartParams(MoveParams):
    """Resume or fail over: where, and whether to start over instead of restoring."""

    fresh: bool = Field(
        default=False,
        description="Restore no checkpoint: start over, all progress lost (destructive)",
    )


class DrainParams(MoveParams):
    """Drain a node: where its workloads go, and whether they are saved first."""

    save: bool = Field(
        default=True,
        description="Checkpoint and move each workload (false kills them: destructive)",
    )
    force: bool = Field(
        default=False,
        description="Also evict pods nothing recreates or with scratch data (destructive)",
    )
    reason: str = Field(default="", max_length=500, description="Recorded on the node")


class FailoverParams(StartParams):
    """Fail over: ``StartParams``, plus a person's word that the lost node is fenced."""

    fenced: bool = Field(
        default=False,
        description="A person vouches the lost node is off or cut from network and "
        "storage (a person's approval; destructive)",
    )


class CordonParams(ActionParams):
    """Cordon a node: the reason recorded on it (the action's reason)."""

    reason: str = Field(default="", max_length=500, description="Recorded on the node")


class ScaleParams(ActionParams):
    """Scale a workload to a replica count."""

    replicas: int = Field(ge=0, le=10000, description="Desired replica count")
    down_without_save: bool = Field(
        default=False,
        description="Remove replicas without checkpointing them (destructive)",
    )


class IntervalParams(ActionParams):
    """A workload's periodic checkpoint interval (``core.durations.Interval``), or off."""

    every: Interval = Field(max_length=32, description=INTERVAL_HELP)
    reason: str = Field(default="", max_length=500, description="Recorded on the workload")


class PoolSizeParams(ActionParams):
    """The number of nodes a pool should have."""

    size: int = Field(ge=0, le=10_000, description="Nodes the pool should have")


class ResizeParams(MoveParams):
    """A workload's new size: what changes (omitted: as now), and where it may go."""

    cpus: float | None = Field(default=None, gt=0, le=1024, description="CPUs (0.5, 2...)")
    memory: OptionalMemory = Field(default=None, max_length=32, description=MEMORY_HELP)
    gpus: int | None = Field(default=None, ge=0, le=64, description="GPUs")
    # The name's shape is checked by a validator, not a schema pattern: the pattern would
    # cost every agent tokens on every turn for a rule the error message states anyway.
    gpu_class: str | None = Field(
        default=None, max_length=63, description="GPU model a node must have (a100, h100)"
    )

    @field_validator("gpu_class")
    @classmethod
    def _gpu_class_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value):
            raise PydanticCustomError(
                "gpu_class_name",
                "{got} is not a GPU model name: letters, digits, '.', '_' or '-' (a100, h100)",
                {"got": repr(value)},
            )
        return value.lower() if value else value

    @model_validator(mode="after")
    def _asks_for_something(self) -> ResizeParams:
        if self.cpus is None and self.memory is None and self.gpus is None and not self.gpu_class:
            raise PydanticCustomError(
                "resize_nothing", "give at least one of cpus, memory, gpus or gpu_class"
            )
        return self

    @property
    def memory_mb(self) -> int | None:
        """The memory asked for in MiB (the unit of ``NodeInfo.memory_mb``)."""
        return memory_mib(self.memory) if self.memory else None
