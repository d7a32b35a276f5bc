"""The Slurm backend: inventory, queue depth and checkpoint-aware actions on a Slurm cluster.

Public API: ``SlurmBackend`` (the Backend protocol, name ``slurm``), ``SlurmConfig`` (the
``[slurm]`` settings section), ``QueueDepth`` / ``Partition`` (read models), and the sbatch
helper ``SbatchSpec`` / ``render_sbatch`` / ``submit``. See docs/slurm.md.

The names are imported from their modules on first use (PEP 562): reading the ``[slurm]``
section (``core.backends.slurm.config``) does not import the backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.lazy_exports import exports

if TYPE_CHECKING:
    from core.backends.slurm.backend import SlurmBackend
    from core.backends.slurm.config import SlurmConfig
    from core.backends.slurm.ids import job_id
    from core.backends.slurm.inventory import Partition, QueueDepth
    from core.backends.slurm.sbatch import SbatchSpec, Submitted, render_sbatch, submit

_WHERE: dict[str, str] = {
    "SlurmBackend": "core.backends.slurm.backend",
    "SlurmConfig": "core.backends.slurm.config",
    "job_id": "core.backends.slurm.ids",
    "Partition": "core.backends.slurm.inventory",
    "QueueDepth": "core.backends.slurm.inventory",
    "SbatchSpec": "core.backends.slurm.sbatch",
    "Submitted": "core.backends.slurm.sbatch",
    "render_sbatch": "core.backends.slurm.sbatch",
    "submit": "core.backends.slurm.sbatch",
}

__all__ = [
    "Partition",
    "QueueDepth",
    "SbatchSpec",
    "SlurmBackend",
    "SlurmConfig",
    "Submitted",
    "job_id",
    "render_sbatch",
    "submit",
]


__getattr__ = exports(__name__, _WHERE)
