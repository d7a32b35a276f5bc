"""A Slurm job whose checkpoints all fail verification is never restarted from zero by a
resume: the plan is refused (exit 8) and the job stays held; ``fresh`` is not a restart."""

from __future__ import annotations

import pytest

from core import errors
from core.backends.slurm import SlurmBackend
from core.model import Action, WorkloadState
from tests.slurm.conftest import execute
from tests.slurm.test_e2e import lineage, start_counter

__all__ = ["lineage"]  # the fixture, used by name below
pytestmark = [pytest.mark.slurm, pytest.mark.criu, pytest.mark.timeout(300)]


def test_resume_is_refused_when_no_checkpoint_verifies(backend: SlurmBackend, lineage: str) -> None:
    job = start_counter(backend, lineage)
    execute(backend, backend.plan(Action.PREEMPT, f"slurm:{job}", {}))
    assert backend.get_workload(job).state is WorkloadState.STOPPED
    store = backend.store("root")
    for info in store.list(lineage):
        big = max(info.files, key=lambda f: f.size)
        path = store.images_dir(info.id) / big.name
        with open(path, "r+b") as f:
            f.truncate(big.size - 1)

    with pytest.raises(errors.CorruptCheckpoint) as refused:
        backend.plan(Action.RESUME, f"slurm:{job}", {})
    assert refused.value.exit_code == 8
    with pytest.raises(errors.NotSupported):
        backend.plan(Action.RESUME, f"slurm:{job}", {"fresh": True})
    assert backend.get_workload(job).state is WorkloadState.STOPPED  # still held, untouched
