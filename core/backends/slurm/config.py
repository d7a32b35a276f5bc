"""Configuration of the Slurm backend: the ``[slurm]`` section (``settings.slurm``).

Every field has a default that fits the loopback cluster of ``scripts/slurm-cluster.sh``
when its environment file is sourced; on a real cluster set the REST endpoint, the shared
checkpoint directory and the wrapper command. Environment variables (written by the script's
``env`` file) fill fields left unset: ``SLURM_CONF``, ``CLAWPOINT_SLURM_SOCKET``,
``CLAWPOINT_SLURM_URL``, ``CLAWPOINT_SLURM_CHECKPOINT_DIR``, ``SLURM_JWT``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pydantic import ConfigDict, Field

from core.schema_base import Model


class SlurmPoolConfig(Model):
    """``[slurm.pools.NAME]``: a partition whose nodes Slurm powers down and up (power saving:
    ``SuspendProgram``/``ResumeProgram``), scaled by ``scale_pool``."""

    model_config = ConfigDict(extra="forbid")

    partition: str | None = None  # default: the pool's name
    min_size: int = Field(default=0, ge=0, le=100_000)
    # What one node costs per hour (Slurm knows no prices): the growth cost cap compares it.
    price_per_hour: float = Field(default=0.0, ge=0, le=1e6)
    spot: bool = False


class SlurmConfig(Model):
    """The ``[slurm]`` section. Unknown keys are errors, so a misspelling is named."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    # slurm.conf the commands use (exported as SLURM_CONF); None = the environment's / system's.
    slurm_conf: str | None = None
    # Directory holding sinfo/squeue/scontrol/scancel/sbatch; None = PATH.
    bin_dir: str | None = None
    # slurmrestd: a unix socket (local auth) or a URL (JWT auth). Neither = commands only.
    rest_socket: str | None = None
    rest_url: str | None = None
    # JWT for rest_url; None = SLURM_JWT from the environment, else ``scontrol token``.
    jwt_token: str | None = None
    jwt_user: str | None = None
    # Directory every node sees where the wrapper stores checkpoints (ROOT/LINEAGE/SEQ/...).
    checkpoint_dir: str | None = None
    # argv prefix that starts the wrapper on the nodes; None = the clawpoint next to this
    # interpreter if present, else ``<this python> -m core.cli``.
    wrapper_command: list[str] | None = None
    # Jobs submitted by the sbatch helper carry this comment prefix (and name prefix).
    marker: str = "clawpoint"
    command_timeout_s: float = Field(default=15.0, gt=0, le=3600)
    # Total time spent retrying a transient fault (controller restarting) before giving up.
    retry_total_s: float = Field(default=5.0, ge=0, le=3600)
    checkpoint_timeout_s: float = Field(default=300.0, gt=0, le=86400)
    start_timeout_s: float = Field(default=120.0, gt=0, le=86400)
    poll_interval_s: float = Field(default=0.5, gt=0, le=3600)
    # How long a node may take to power up (ResumeTimeout) or down (SuspendTimeout + the
    # controller's power-save pass) before the step fails.
    power_timeout_s: float = Field(default=120.0, gt=0, le=86400)
    pools: dict[str, SlurmPoolConfig] = Field(default_factory=dict)
    # migrate hands a running job to a standby job started on the target first (a pause of
    # about the dump and the restore; the job id changes: docs/slurm.md, "Live moves");
    # false: it is requeued there (same job id, Slurm's scheduling inside the pause).
    live_handoff: bool = True

    def resolved(self) -> SlurmConfig:
        """A copy with unset fields filled from the environment."""
        env = os.environ
        return self.model_copy(
            update={
                "slurm_conf": self.slurm_conf or env.get("SLURM_CONF"),
                "rest_socket": self.rest_socket or env.get("CLAWPOINT_SLURM_SOCKET"),
                "rest_url": self.rest_url or env.get("CLAWPOINT_SLURM_URL"),
                "jwt_token": self.jwt_token or env.get("SLURM_JWT"),
                "checkpoint_dir": self.checkpoint_dir or env.get("CLAWPOINT_SLURM_CHECKPOINT_DIR"),
            }
        )

    def wrapper_argv(self) -> list[str]:
        if self.wrapper_command:
            return list(self.wrapper_command)
        beside = Path(sys.executable).parent / "clawpoint"
        if beside.exists():
            return [str(beside)]
        return [sys.executable, "-m", "core.cli"]
