"""A live Slurm move's faults on the loopback cluster, through the installed ``clawpoint``.

``migrate`` starts a standby job on the target before it pauses anything and hands the
workload to it (``core.backends.slurm.handoff``; the plain case and clawpoint killed at each
of its steps are in test_e2e and tests/reliability/test_slurm_matrix). Here each side fails
where it can, and the workload must come out running exactly once, restored from a
checkpoint, counting on with its state check intact:

- a standby that announced itself and then hangs: the source cannot reach it, publishes,
  the move cancels the standby and requeues the job the ordinary way;
- a standby that dies in its restore: the source hears nothing, publishes, the job is
  requeued from that checkpoint;
- a source that dies right after its order: the standby runs the workload (the checkpoint
  it restored is never published; nothing needs it);
- a job that other jobs depend on gets no standby (its id would change under them);
- a standby Slurm requeues before any order restores nothing; one that took over is the
  job that later preempts and resumes act on.

The faults are the wrapper's switches (``core.wrapper.faults``), inherited by the standby
from the migrate command and by the source from its submission.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.actions import MoveParams
from core.backends.base import no_progress
from core.backends.slurm import SlurmBackend
from core.checkpoint.files import FILES_KEY
from core.model import Action, WorkloadState
from core.service.executor import resolve_args
from tests.slurm.conftest import CLUSTER_DIR, ROOT, sh

# The e2e module's fixtures: CRIU or a skip, and a lineage whose jobs (all of them, a
# standby's too) and checkpoints go at the end.
from tests.slurm.test_e2e import _criu, assert_resumed, lineage, progress, wait_step

pytestmark = [pytest.mark.slurm, pytest.mark.criu, pytest.mark.timeout(300)]
__all__ = ["_criu", "lineage"]  # fixtures, used by name


class Cli:
    """The installed clawpoint in a Slurm-only home of its own."""

    def __init__(self, home: Path) -> None:
        home.mkdir()
        (home / "config.toml").write_text(
            "[local]\nenabled = false\n\n[slurm]\nenabled = true\nretry_total_s = 2.0\n"
        )
        self.env = {**os.environ, "CLAWPOINT_HOME": str(home)}
        self.env.pop("CLAWPOINT_CONFIG", None)

    def __call__(self, *argv: str, env: dict[str, str] | None = None) -> Any:
        at = argv.index("--") if "--" in argv else len(argv)
        done = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "clawpoint"), *argv[:at], "--json", *argv[at:]],
            capture_output=True, text=True, env={**self.env, **(env or {})}, timeout=240,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)


@pytest.fixture
def cli(tmp_path: Path, backend: SlurmBackend) -> Cli:
    return Cli(tmp_path / "home")


def submit(cli: Cli, backend: SlurmBackend, lineage: str, **env: str) -> str:
    """The 20 MiB counter on n1 (``env``: its wrapper's fault switches)."""
    log = CLUSTER_DIR / "log" / f"{lineage}.out"
    done = cli("slurm", "submit", "--name", lineage, "--nodelist", "n1", "--output", str(log),
               "--chdir", str(ROOT), "--", sys.executable, "-m", "core.workloads.counter",
               "--state-mb", "20", env=env)  # fmt: skip
    job = backend.get_workload(done["workload"]).name
    backend.wait_until("the job to run", 120, lambda: backend.get_workload(job).node)
    wait_step(job, 20)
    return job


def migrate(cli: Cli, job: str, **env: str) -> dict[str, dict[str, Any]]:
    result = cli("migrate", f"slurm:{job}", "--to", "n2", "--yes", env=env)
    assert result["status"] == "executed", result["message"]
    return {s["name"]: s["output"] for s in result["execution"]["steps"]}


def lineage_jobs(lineage: str) -> list[tuple[str, str, str]]:
    """(id, state, node) of every job of the lineage Slurm lists, but one completing."""
    out = sh("squeue", "-h", f"--name=clawpoint-{lineage}", "-o", "%i %t %N")
    rows = [tuple([*line.split(), "", ""][:3]) for line in out.splitlines()]
    return [r for r in rows if r[1] != "CG"]  # type: ignore[misc]


def test_a_hung_standby_is_cancelled_and_the_job_requeued(
    cli: Cli, backend: SlurmBackend, lineage: str
) -> None:
    job = submit(cli, backend, lineage)
    out = migrate(cli, job, CLAWPOINT_TEST_STANDBY_DEAF="1")
    standby = out["standby"]["standby"]
    assert standby and out["wait_standby"]["node"] == "n2"  # it announced itself
    moved = out["takeover"]
    assert moved["how"] == "restart" and moved["job"] == job, moved
    assert "handed nothing over" in moved["why"]
    assert lineage_jobs(lineage) == [(job, "R", "n2")]  # the standby is gone
    assert_resumed(backend, lineage, job, moved["checkpoint"])


def test_a_standby_dying_in_its_restore_leaves_the_job_requeued(
    cli: Cli, backend: SlurmBackend, lineage: str
) -> None:
    job = submit(cli, backend, lineage)
    out = migrate(cli, job, CLAWPOINT_TEST_DIE_IN_TAKEOVER="1")
    moved = out["takeover"]
    assert moved["how"] == "restart" and moved["job"] == job, moved
    assert "during its restore" in moved["why"] or "failed" in moved["why"], moved
    assert lineage_jobs(lineage) == [(job, "R", "n2")]
    # The source published the checkpoint it had handed over: the restart restores it.
    assert "no new checkpoint" not in moved["why"]
    assert_resumed(backend, lineage, job, moved["checkpoint"])


def test_a_source_dying_after_its_order_leaves_the_workload_with_the_standby(
    cli: Cli, backend: SlurmBackend, lineage: str
) -> None:
    job = submit(cli, backend, lineage, CLAWPOINT_TEST_DIE_AFTER_HANDOFF="1")
    before = int(str(backend.newest_seq(lineage, "root")))
    out = migrate(cli, job)
    moved = out["takeover"]
    assert moved["how"] == "handoff" and moved["job"] != job, moved
    assert lineage_jobs(lineage) == [(moved["job"], "R", "n2")]
    # It died before publishing what it handed over: nothing was published after the order.
    # Only a dump that carried the workload's files (a report caught half-written by the
    # freeze) is published before the order, inside the pause (handoff_source: the standby
    # restores that one, whose restore puts the files back).
    newest = backend.newest_checkpoint(lineage, "root")
    published = newest.seq if newest else 0
    if published != before:
        assert newest is not None and published == before + 1, (before, newest)
        assert newest.extra.get(FILES_KEY, {}).get("saved"), newest.extra
    # It counts on in the new job (its home path keeps the first job's id).
    wait_step(job, int(str(progress(job).get("step", 0))) + 20)
    log = (CLUSTER_DIR / "log" / f"{lineage}.out").read_text()
    assert "STATE CHECK FAILED" not in log


def test_a_job_others_depend_on_keeps_its_id(cli: Cli, backend: SlurmBackend, lineage: str) -> None:
    """Its dependents follow its id, and the source of a live move ends COMPLETED: they
    would start while the workload still runs. Requeued instead, with the reason said."""
    job = submit(cli, backend, lineage)
    dependent = sh("sbatch", "--parsable", "-o", "/dev/null", f"--dependency=afterok:{job}",
                   "--wrap", "true")  # fmt: skip
    try:
        out = migrate(cli, job)
    finally:
        sh("scancel", dependent.strip(), check=False)
    assert out["standby"]["standby"] == "" and "depend on it" in out["standby"]["why"]
    moved = out["takeover"]
    assert moved["how"] == "restart" and moved["job"] == job
    assert lineage_jobs(lineage) == [(job, "R", "n2")]
    assert_resumed(backend, lineage, job, moved["checkpoint"])


def test_the_standby_that_took_over_is_the_job_preempt_and_resume_act_on(
    cli: Cli, backend: SlurmBackend, lineage: str
) -> None:
    """Its environment still says "standby" (Slurm reruns a job with the environment it was
    submitted with): a rerun of a standby that took over restores the workload as any
    wrapped job does."""
    job = submit(cli, backend, lineage)
    new = migrate(cli, job)["takeover"]["job"]
    assert new != job
    assert cli("preempt", f"slurm:{new}", "--yes")["status"] == "executed"
    resumed = cli("resume", f"slurm:{new}", "--yes")
    assert resumed["status"] == "executed", resumed["message"]
    assert [r[:2] for r in lineage_jobs(lineage)] == [(new, "R")]
    assert_resumed(backend, lineage, job, backend.newest_checkpoint(lineage, "root").id)  # type: ignore[union-attr]


def test_a_standby_requeued_before_any_order_restores_nothing(
    cli: Cli, backend: SlurmBackend, lineage: str
) -> None:
    """Slurm may requeue a job on its own (its node failed): a standby that never took the
    workload over then ends without restoring it, since its source still runs it."""
    job = submit(cli, backend, lineage)
    w = backend.get_workload(job)
    steps = backend.plan(Action.MIGRATE, job, MoveParams(to="n2")).steps
    outputs: dict[str, dict[str, Any]] = {}
    for s in steps[:2]:  # standby_submit, wait_standby: nothing paused yet
        outputs[s.name] = backend.run_step(s.op, resolve_args(s.args, outputs), no_progress)
    standby = outputs["standby"]["standby"]
    assert standby and outputs["wait_standby"]["node"] == "n2", outputs
    sh("scontrol", "requeue", standby)
    # Once it pends (Slurm sets its begin time 2 min ahead when the requeue completes):
    backend.wait_until("the standby to pend", 60,
                       lambda: backend.get_workload(standby).state is WorkloadState.PENDING)  # fmt: skip
    # Not within the second its first run's credential was revoked: slurmd kills a launch
    # whose credential is not newer, in whole seconds ("Job credential revoked"; Slurm's
    # src/common/slurm_cred.c, cred->ctime <= j->revoked), as wait_running knows too.
    sh("scontrol", "update", f"jobid={standby}", "StartTime=now+2")
    backend.wait_until("the requeued standby to end", 120,
                       lambda: backend.get_workload(standby).state is WorkloadState.COMPLETED)  # fmt: skip
    assert lineage_jobs(lineage) == [(job, "R", w.node)]
    before = int(str(progress(job).get("step", 0)))
    wait_step(job, before + 20)  # the source never stopped
    log = (CLUSTER_DIR / "log" / f"{lineage}.out").read_text()
    assert "wrapper.standby_rerun" in log and '"restores": false' in log
