"""What to run under the wrapper: the validated, serialisable run specification.

The spec travels as JSON from the CLI or a backend to ``python -m core.wrapper``; everything
that reaches a path or argv is validated here (names, engine, a non-empty command).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.model import validate_name


class RunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    node: str | None = None
    engine: Literal["criu", "cooperative"] = "criu"
    checkpoint_every: float | None = Field(default=None, gt=0)
    command: list[str] = Field(min_length=1)
    cwd: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    restore_from: str | None = None  # a checkpoint id (LINEAGE@SEQ); None = newest good one
    home: str  # CLAWPOINT_HOME of the wrapper process

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return validate_name(value, what="workload name")

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0]:
            raise ValueError("the command's first word (the program) is empty")
        return value
