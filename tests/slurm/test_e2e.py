"""End to end: a wrapped job with 100 MB of self-verifying state, moved around a real cluster.

The payload is ``core.workloads.counter``: it checks every byte of its state as it counts
and prints "STATE CHECK FAILED" if a restore lost or mixed up memory. Each test checks that
the job came back elsewhere (or after a hold), restored from the checkpoint the plan made,
and went on counting from at least the checkpointed step. (The controller-down test dumps
nothing: its job holds 8 MB.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.backends.slurm import SbatchSpec, SlurmBackend, submit
from core.backends.slurm.sbatch import job_homes
from core.checkpoint.criu import criu_status
from core.config import load_settings
from core.model import Action, ExecutionStatus, Principal, PrincipalKind, WorkloadState
from core.service.facade import Service, bootstrap
from tests.slurm.conftest import (
    CLUSTER_DIR,
    ROOT,
    execute,
    restart_cluster,
    sh,
    stop_daemon,
)

pytestmark = [pytest.mark.slurm, pytest.mark.criu, pytest.mark.timeout(300)]


@pytest.fixture(autouse=True)
def _criu() -> None:
    status = criu_status()
    if not status.available:
        pytest.skip(f"CRIU unavailable: {status.reason}")


@pytest.fixture
def lineage(request: pytest.FixtureRequest, backend: SlurmBackend) -> Iterator[str]:
    name = f"e2e-{request.node.name.removeprefix('test_')[:20]}-{os.getpid()}".replace("_", "-")
    yield name
    sh("scancel", f"--name=clawpoint-{name}")
    for node in ("n1", "n2", "n3"):
        sh("scontrol", "update", f"nodename={node}", "state=RESUME", check=False)
    shutil.rmtree(CLUSTER_DIR / "checkpoints" / "root" / name, ignore_errors=True)  # ~100 MB each


def start_counter(
    backend: SlurmBackend, lineage: str, every: float | None = None, mb: int = 100
) -> str:
    log = CLUSTER_DIR / "log" / f"{lineage}.out"
    spec = SbatchSpec(
        lineage=lineage,
        command=[sys.executable, "-m", "core.workloads.counter", "--state-mb", str(mb)],
        nodelist="n1",
        checkpoint_every_s=every,
        output=str(log),
        workdir=str(ROOT),
    )
    job = submit(spec, backend.cfg, backend.transport).job_id
    backend.wait_until("the job to run on n1", 60, lambda: backend.get_workload(job).node)
    wait_step(job, 20)
    return job


def progress(job: str) -> dict[str, object]:
    for path in (p for home in job_homes(job) for p in home.glob("run/*.progress.json")):
        try:
            return dict(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    return {}


def wait_step(job: str, at_least: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        step = int(str(progress(job).get("step", 0)))
        if step >= at_least:
            return step
        time.sleep(0.3)
    raise AssertionError(f"job {job} did not reach step {at_least}")


def checkpoint_step(backend: SlurmBackend, checkpoint_id: str) -> int:
    info = next(c for c in backend.store("root").list() if c.id == checkpoint_id)
    return int(info.extra["progress"]["step"])


def assert_resumed(backend: SlurmBackend, lineage: str, job: str, checkpoint_id: str) -> None:
    """The job's new run counts on from at least the checkpointed step (a fresh start would
    begin at 0; the counter verifies every chunk of its state as it goes)."""
    saved = checkpoint_step(backend, checkpoint_id)
    since = time.time()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now = progress(job)
        if float(str(now.get("ts", 0))) > since:  # written by the new run
            assert int(str(now["step"])) >= saved
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"job {job} made no progress after it restarted")
    wait_step(job, saved + 20)
    log = (CLUSTER_DIR / "log" / f"{lineage}.out").read_text()
    assert "STATE CHECK FAILED" not in log


def test_drain_moves_the_job_and_it_resumes(backend: SlurmBackend, lineage: str) -> None:
    job = start_counter(backend, lineage)
    out = execute(backend, backend.plan(Action.DRAIN_NODE, "n1", {"reason": "e2e drain"}))
    moved = out[f"job{job}-takeover"]  # a live move off the node: a standby job took it
    assert moved["how"] == "handoff" and moved["node"] in ("n2", "n3"), moved
    assert "drain" in backend.get_node("n1").state
    assert backend.get_workload(moved["job"]).node == moved["node"]
    assert_resumed(backend, lineage, job, moved["checkpoint"])


def test_preempt_then_resume(backend: SlurmBackend, lineage: str) -> None:
    job = start_counter(backend, lineage)
    before = datetime.now(UTC)
    draft = backend.plan(Action.PREEMPT, f"slurm:{job}", {})
    out = execute(backend, draft)
    held = backend.get_workload(job)
    assert held.state is WorkloadState.STOPPED and held.node is None  # the node is free
    # Had clawpoint crashed after each step, recovery would see that it took effect.
    steps = {s.op: s for s in draft.steps}
    seq = out["wait_checkpoint"]["seq"]
    assert backend.recover_step("signal", steps["signal"].args, before) == {"after_seq": seq - 1}
    assert backend.recover_step("requeue", steps["requeue"].args, before) == {"job": job}
    execute(backend, backend.plan(Action.RESUME, f"slurm:{job}", {}))
    assert backend.get_workload(job).state is WorkloadState.RUNNING
    assert_resumed(backend, lineage, job, out["wait_checkpoint"]["checkpoint"])


def test_preempt_frees_the_node_for_another_job(
    backend: SlurmBackend, lineage: str, job_name: str
) -> None:
    job = start_counter(backend, lineage)
    # A plain job that needs all of n1: it cannot start while the counter runs there.
    other = sh(
        "sbatch",
        "--parsable",
        f"--job-name={job_name}",
        "-o",
        "/dev/null",
        "--nodelist=n1",
        "--exclusive",
        "--wrap",
        "sleep 600",
    ).strip()
    assert backend.get_workload(other).state is WorkloadState.PENDING
    out = execute(backend, backend.plan(Action.PREEMPT, f"slurm:{job}", {}))
    assert backend.get_workload(job).state is WorkloadState.STOPPED

    def other_runs() -> bool:
        w = backend.get_workload(other)
        return w.state is WorkloadState.RUNNING and w.node == "n1"

    backend.wait_until("the other job to run on n1", 60, other_runs)
    assert sh("squeue", "-h", "-j", other, "-o", "%T|%N").strip() == "RUNNING|n1"
    assert backend.get_workload(job).state is WorkloadState.STOPPED  # still held meanwhile
    sh("scancel", other)
    backend.wait_until("n1 to be free", 60, lambda: not backend.get_node("n1").workloads)
    # The counter was submitted pinned to n1: it resumes there, after the other job.
    resumed = execute(backend, backend.plan(Action.RESUME, f"slurm:{job}", {}))
    assert resumed["wait_running"]["node"] == "n1"
    assert_resumed(backend, lineage, job, out["wait_checkpoint"]["checkpoint"])


PERSON = Principal(id="tester", kind=PrincipalKind.PERSON)


@pytest.fixture
def service(tmp_path: Path, slurm_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Service:
    """The service as the CLI builds it, with ``[slurm] enabled = true`` in config.toml."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        "[local]\nenabled = false\n\n"
        "[slurm]\nenabled = true\nretry_total_s = 2.0\ncommand_timeout_s = 10.0\n"
    )
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    monkeypatch.delenv("CLAWPOINT_CONFIG", raising=False)
    return bootstrap(load_settings(home))


def execution_count(service: Service) -> int:
    with service.db.read() as conn:
        return int(conn.execute("SELECT COUNT(*) FROM executions").fetchone()[0])


@pytest.mark.timeout(240)
def test_controller_down_service_fails_cleanly(
    backend: SlurmBackend, lineage: str, service: Service
) -> None:
    # Nothing is dumped here: a small state is enough for "the job counts on".
    job = start_counter(backend, lineage, mb=8)
    seq = backend.newest_seq(lineage, "root")
    plan = service.plan(Action.PREEMPT, f"slurm:{job}")  # made while the controller answers
    assert plan.steps[0].op == "signal"
    own = [bootstrap(service.settings) for _ in range(3)]  # one per refused call, built now
    stop_daemon(CLUSTER_DIR / "run" / "slurmctld.pid")
    try:
        # Planning needs the controller: a clear error and nothing journaled. A plan made
        # before the outage is refused before its first step: its preconditions cannot be
        # checked against a world that cannot be read. The three calls at once, each through
        # a service of its own (as three commands would): each waits out Slurm's own retries
        # to reach the controller (about MessageTimeout, 10 s), once for all three.
        calls: list[Callable[[Service], object]] = [
            lambda s: s.act(Action.PREEMPT, f"slurm:{job}", {}, principal=PERSON, confirmed=True),
            lambda s: s.act(Action.DRAIN_NODE, "slurm:n1", {}, principal=PERSON, confirmed=True),
            lambda s: s.perform(plan, principal=PERSON, confirmed=True),
        ]

        def refused(mine: Service, call: Callable[[Service], object]) -> errors.ClawpointError:
            with pytest.raises(errors.BackendUnavailable) as info:
                call(mine)
            return info.value

        before = execution_count(service)
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            found = list(pool.map(refused, own, calls))
        for exc in found:
            assert "controller" in exc.message and exc.hint
        assert execution_count(service) == before
        # Run by the executor alone (as recovery would): its first step fails, no later
        # step starts.
        execution = service.executor.run(plan, service.backend("slurm"), principal=str(PERSON))
        ex = service.journal.get(execution.id)  # as persisted
        assert ex.status is ExecutionStatus.FAILED
        assert ex.result["error"]["error"] == "backend-unavailable"
        assert "controller" in (ex.error or "")
        first, *rest = ex.steps
        assert first.status == "failed" and "controller" in (first.error or "")
        assert rest and all(s.status == "pending" and s.started_at is None for s in rest)
        assert service.journal.count_running() == 0
        assert int(str(progress(job).get("step", 0))) > 0  # the job runs on meanwhile
    finally:
        restart_cluster()
    # Nothing was half done: the job was neither signalled nor requeued, and counts on.
    w = backend.get_workload(job)
    assert w.state is WorkloadState.RUNNING and w.node == "n1"
    assert "Restarts=0" in sh("scontrol", "show", "job", job)
    assert backend.newest_seq(lineage, "root") == seq  # no checkpoint: the wrapper got no signal
    wait_step(job, int(str(progress(job)["step"])) + 20)
    log = (CLUSTER_DIR / "log" / f"{lineage}.out").read_text()
    assert "STATE CHECK FAILED" not in log


def _kill_node(job: str, node: str) -> None:
    """kill -9 the node's slurmd and the job's processes (on a real node they die with it)."""
    victims: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if f"SLURM_JOB_ID={job}".encode() in env:
            victims.add(int(entry))
            if Path(f"/proc/{ppid}/cmdline").read_bytes().startswith(b"slurmstepd"):
                victims.add(ppid)
    os.kill(int((CLUSTER_DIR / "run" / f"slurmd-{node}.pid").read_text()), signal.SIGKILL)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_failover_after_slurmd_killed(backend: SlurmBackend, lineage: str) -> None:
    job = start_counter(backend, lineage, every=2)
    backend.wait_until(
        "a periodic checkpoint", 60, lambda: backend.newest_seq(lineage, "root") >= 1
    )
    _kill_node(job, "n1")
    newest = backend.newest_checkpoint(lineage, "root")
    assert newest is not None
    try:
        out = execute(backend, backend.plan(Action.FAILOVER, f"slurm:{job}", {}))
        assert out["wait_running"]["node"] in ("n2", "n3")
        assert_resumed(backend, lineage, job, newest.id)
    finally:
        restart_cluster()  # a new slurmd for n1


def test_cli_migrate_to_lands_on_that_node(
    backend: SlurmBackend, lineage: str, tmp_path: Path
) -> None:
    """``clawpoint migrate slurm:JOB --to n2`` (the installed command) plans the move onto n2
    and the job runs on n2 afterwards, restored from the checkpoint the move made. (It
    starts anywhere but n2: other tests may share the cluster.)"""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        "[local]\nenabled = false\n\n[slurm]\nenabled = true\nretry_total_s = 2.0\n"
    )
    env = {**os.environ, "CLAWPOINT_HOME": str(home)}
    env.pop("CLAWPOINT_CONFIG", None)
    cli = str(ROOT / ".venv" / "bin" / "clawpoint")

    def clawpoint(*argv: str) -> Any:
        at = argv.index("--") if "--" in argv else len(argv)  # --json before the payload
        argv = (*argv[:at], "--json", *argv[at:])
        done = subprocess.run([cli, *argv], capture_output=True, text=True, env=env,
                              timeout=240)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    log = CLUSTER_DIR / "log" / f"{lineage}.out"
    submitted = clawpoint("slurm", "submit", "--name", lineage, "--exclude", "n2",
                          "--output", str(log), "--chdir", str(ROOT), "--",
                          sys.executable, "-m", "core.workloads.counter", "--state-mb", "20")  # fmt: skip
    job = backend.get_workload(submitted["workload"]).name
    backend.wait_until("the job to run", 120, lambda: backend.get_workload(job).node)
    wait_step(job, 20)

    result = clawpoint("migrate", f"slurm:{job}", "--to", "n2", "--yes")
    assert result["status"] == "executed", result["message"]
    assert "onto n2" in result["plan"]["summary"]
    outputs = {s["name"]: s["output"] for s in result["execution"]["steps"]}
    # A live move: the standby job submitted onto n2 took the workload over, and the job
    # goes on under the standby's id; the source job ended.
    moved = outputs["takeover"]
    assert moved["how"] == "handoff", moved
    assert moved["node"] == "n2" and moved["job"] == outputs["standby"]["standby"] != job
    assert sh("squeue", "-h", "-j", moved["job"], "-o", "%T|%N").strip() == "RUNNING|n2"
    assert sh("squeue", "-h", "-j", job, "-o", "%T").strip() in ("", "COMPLETED")
    listed = clawpoint("workloads", "--backend", "slurm")
    mine = [w for w in listed if w["labels"].get("lineage") == lineage and w["state"] == "running"]
    assert [(w["name"], w["node"]) for w in mine] == [(moved["job"], "n2")]
    # Its home path is the first job's (job_homes(job)): the restored payload keeps it.
    assert_resumed(backend, lineage, job, moved["checkpoint"])
