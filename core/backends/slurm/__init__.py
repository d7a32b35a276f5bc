"""The Slurm backend: inventory, queue depth and checkpoint-aware actions on a Slurm cluster.

Public API: ``SlurmBackend`` (the Backend protocol, name ``slurm``), ``SlurmConfig`` (the
``[slurm]`` settings section), ``QueueDepth`` / ``Partition`` (read models), and the sbatch
helper ``SbatchSpec`` / ``render_sbatch`` / ``submit``. See docs/slurm.md.
"""

from core.backends.slurm.backend import SlurmBackend
from core.backends.slurm.config import SlurmConfig
from core.backends.slurm.ids import job_id
from core.backends.slurm.inventory import Partition, QueueDepth
from core.backends.slurm.sbatch import SbatchSpec, Submitted, render_sbatch, submit

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
