"""What the wrapper runs: a validated ``RunSpec`` (also its command-line argument, as JSON).

Limits: validation is about shape (names, engine, non-empty command); whether the command
exists is only known when it starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from core.checkpoint.engine import DEFAULT_ENGINE
from core.config import EngineName, Settings
from core.model import validate_name
from core.store.store import parse_checkpoint_id


class RunSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    node: str | None = None
    engine: EngineName = DEFAULT_ENGINE
    checkpoint_every: float | None = Field(default=None, gt=0)
    command: list[str] = Field(min_length=1)
    cwd: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    restore_from: str | None = None
    # auto: the newest good checkpoint of the lineage, or a fresh start for a lineage that has
    # no checkpoint at all (``clawpoint run``, a Slurm job's every start); restore: a verified
    # checkpoint (``restore_from`` exactly, else the newest good one) or nothing at all;
    # fresh: from scratch, never restoring (an explicit, audited request by a person).
    start_mode: Literal["auto", "restore", "fresh"] = "auto"
    # Where the payload's stdout/stderr go: the wrapper's own (a foreground run, a Slurm job's
    # output file) or logs/NAME.out, rotated by size (a detached wrapper).
    output: Literal["inherit", "file"] = "inherit"
    home: str
    # A standby wrapper (``core.wrapper.handoff``): it waits up to ``standby_timeout_s`` for
    # the order naming the checkpoint to restore, and exits without one.
    standby: str | None = Field(default=None, pattern=r"^[0-9a-f]{4,32}$")
    standby_timeout_s: float = Field(default=60.0, gt=0, le=3600)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return validate_name(value, what="workload name")

    @field_validator("restore_from")
    @classmethod
    def _restore_from(cls, value: str | None) -> str | None:
        if value is not None:
            parse_checkpoint_id(value)
        return value

    @model_validator(mode="after")
    def _fresh_restores_nothing(self) -> RunSpec:
        if self.start_mode == "fresh" and self.restore_from is not None:
            raise ValueError("a fresh start restores no checkpoint: drop restore_from")
        return self

    @model_validator(mode="after")
    def _standby_restores_its_order(self) -> RunSpec:
        if self.standby is not None and (self.start_mode != "restore" or self.restore_from):
            raise ValueError("a standby restores the checkpoint its order names: start_mode "
                             "'restore' and no restore_from")  # fmt: skip
        return self

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0]:
            raise ValueError("the command's program is empty")
        return value


def output_path(settings: Settings, name: str) -> Path:
    """Where a detached wrapper writes its payload's stdout/stderr (``NAME.out``, rotated into
    ``NAME.out.1`` ..); the wrapper's own lines are in ``NAME.log`` beside it."""
    return settings.log_dir / f"{name}.out"


def output_files(settings: Settings, name: str) -> list[Path]:
    """The payload's output files of ``name`` that exist, oldest first."""
    base = output_path(settings, name)
    rotated = sorted(
        (p for p in base.parent.glob(f"{base.name}.*") if p.suffix[1:].isdigit()),
        key=lambda p: -int(p.suffix[1:]),
    )
    return [*rotated, *([base] if base.exists() else [])]
