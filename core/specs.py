"""What the interfaces hand the service to start work: a ``RunSpec`` and a ``BatchSpec``.

A ``RunSpec`` is what one wrapper runs (``clawpoint run``; also the wrapper's own
command-line argument, as JSON): the CLI builds it, the service passes it to a ``Launcher``
backend, which places it on a node and starts the wrapper with it. A ``BatchSpec`` is a
checkpointable batch job, handed the same way to a ``BatchSubmitter`` backend. Both sit below
the service, the backends and the wrapper, so the interfaces build them without importing
any of those.

Limits: validation is about shape (names, engine, non-empty command, safe scheduler
options); whether the command exists is only known when it starts, and whether a scheduler
takes a field is its backend's call.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from core import errors
from core.engine_names import DEFAULT_ENGINE, EngineName
from core.model import validate_name
from core.schema_base import Model
from core.store.disk import parse_checkpoint_id


class AutoInterval(Model):
    """What a wrapper whose checkpoint interval is ``auto`` re-times it with: its node's
    interruption hazard (a mean time between interruptions, hours) and the interval's
    bounds (seconds), as the plan resolved them from ``[economics]`` for that node."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mtbf_h: float = Field(gt=0, allow_inf_nan=False)
    min_s: float = Field(gt=0, allow_inf_nan=False)
    max_s: float = Field(gt=0, allow_inf_nan=False)

    @model_validator(mode="after")
    def _range(self) -> AutoInterval:
        if self.min_s > self.max_s:
            raise ValueError("min_s is above max_s")
        return self


# Whose wrapper may hand over to a standby: a Slurm job id or a pod's name (DNS-1123).
STANDBY_SOURCE = r"^(?:[0-9]{1,12}|[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)$"
# A standby's token (``core.wrapper.handoff.new_token``): it names its socket or rendezvous.
STANDBY_TOKEN = r"^[0-9a-f]{4,32}$"


def check_standby_token(token: str | None) -> str:
    """``token`` if it is a standby's token, else InvalidInput (it reaches file names)."""
    if not isinstance(token, str) or not re.fullmatch(STANDBY_TOKEN, token):
        raise errors.InvalidInput(
            f"standby token {token!r} is not one", hint="a move's plan gives it; do not edit it"
        )
    return token


class RunSpec(Model):
    model_config = ConfigDict(extra="forbid")

    name: str
    node: str | None = None
    engine: EngineName = DEFAULT_ENGINE
    checkpoint_every: float | None = Field(default=None, gt=0)
    # Set: the interval is ``auto``; ``checkpoint_every`` is where it starts from.
    checkpoint_auto: AutoInterval | None = None
    # Its limits (``core.wrapper.cgroup_limits``): CPUs (a bandwidth quota) and memory in
    # MiB; None: not limited. A start with either runs the payload in a cgroup of its own.
    cpus: float | None = Field(default=None, gt=0, le=1024)
    memory_mb: int | None = Field(default=None, ge=1)
    command: list[str] = Field(min_length=1)
    # A privileged init of ours is the PID namespace's first process and runs the command as
    # its child (core/checkpoint/nsinit.py ``--init``): needed by a command that drops its
    # privileges as the namespace's root task (``setpriv --reuid``), which CRIU cannot dump.
    # None: the wrapper decides (``default_init``) and records what it chose.
    init: bool | None = None
    # Root's payload in a user namespace of its own that maps every uid and gid to itself
    # (nsinit ``--userns``): its root holds every capability over its own processes and none
    # over the host; CRIU then reads its other users' processes without CAP_SYS_RESOURCE.
    # None: the wrapper decides, on its node (``core.wrapper.payload.default_user_namespace``).
    user_namespace: bool | None = None
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
    standby: str | None = Field(default=None, pattern=STANDBY_TOKEN)
    standby_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    # A standby for a wrapper on another node: the Slurm job or the pod whose wrapper may
    # hand over to it (``core.wrapper.handoff_remote``: it waits on TCP, not a local socket),
    # and the address it announces (a pod's IP; None: the node's, as Slurm knows it).
    standby_for: str | None = Field(default=None, pattern=STANDBY_SOURCE)
    standby_host: str | None = Field(default=None, pattern=r"^[A-Za-z0-9.:-]{1,253}$")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return validate_name(value, what="workload name", new=True)

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
        if self.standby_for is not None and self.standby is None:
            raise ValueError("standby_for names the source of a standby: give standby too")
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


# A live move starts the workload's own command again as a standby on the target (Slurm:
# the job's batch script, ``core.backends.slurm.handoff``; Kubernetes: a copy of the pod,
# ``core.backends.kubernetes.handoff``); these tell its ``clawpoint run`` to wait for the
# order. The host is the pod's IP (the downward API's status.podIP); Slurm gives none.
STANDBY_ENV = (
    "CLAWPOINT_STANDBY",
    "CLAWPOINT_STANDBY_FOR",
    "CLAWPOINT_STANDBY_TIMEOUT",
    "CLAWPOINT_STANDBY_HOST",
)


def standby_from_env(environ: MutableMapping[str, str], fresh: bool) -> dict[str, Any]:
    """RunSpec fields of a standby for another node's wrapper, from the environment a Slurm
    move gave the job; taken out of ``environ``, so the workload never inherits them."""
    token, source, timeout, host = (environ.pop(k, None) for k in STANDBY_ENV)
    if not token:
        return {}
    if fresh:
        raise errors.InvalidInput(
            "--fresh in a standby job: a standby restores what its order names",
            hint="submit the job without --fresh",
        )
    try:
        timeout_s = float(timeout or 60)
    except ValueError:
        raise errors.InvalidInput(
            f"CLAWPOINT_STANDBY_TIMEOUT={timeout!r} is not a number of seconds",
            hint="unset it (60 s) or give seconds",
        ) from None
    return {"standby": token, "standby_for": source, "start_mode": "restore",
            "standby_timeout_s": timeout_s, "standby_host": host or None}  # fmt: skip


# Programs that exec a command as another user (they do not stay as its parent): started as
# the namespace's root task, the command would be a root task without privileges, which CRIU
# cannot dump (``RunSpec.init``). su, runuser and sudo stay as a root parent: they need none.
_EXEC_AS_USER = frozenset(
    {"setpriv", "gosu", "su-exec", "chpst", "setuidgid", "s6-setuidgid", "capsh"}
)


def default_init(command: list[str]) -> bool:
    """Whether ``clawpoint run`` starts ``command`` under our init when not told: when its
    program is one that runs the rest as another user (``setpriv --reuid=...``)."""
    return bool(command) and command[0].rsplit("/", 1)[-1] in _EXEC_AS_USER


_SAFE_OPT = r"^[A-Za-z0-9_.,:=@/+\-\[\]]*$"


class BatchSpec(Model):
    """A checkpointable batch job: the payload runs under the wrapper and restores the newest
    good checkpoint of ``lineage`` on every start. Every field is validated before anything
    is written or run; fields a scheduler has no use for are refused by its backend."""

    lineage: str
    command: list[str] = Field(min_length=1)
    partition: str | None = Field(default=None, pattern=_SAFE_OPT)
    nodelist: str | None = Field(default=None, pattern=_SAFE_OPT)
    exclude: str | None = Field(default=None, pattern=_SAFE_OPT)
    cpus: int = Field(default=1, ge=1)
    mem_mb: int | None = Field(default=None, ge=1)
    gpus: int = Field(default=0, ge=0)
    time_limit: str | None = Field(default=None, pattern=r"^[0-9:-]+$")
    signal_before_end_s: int | None = Field(default=None, ge=1, le=65535)
    checkpoint_every_s: float | None = Field(default=None, gt=0)
    output: str | None = None
    workdir: str | None = None
    extra_env: dict[str, str] = Field(default_factory=dict)
