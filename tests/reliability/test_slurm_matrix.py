"""The fault matrix on the Slurm backend: the installed ``clawpoint`` is SIGKILLed before and
after every journal step of every operation the backend plans, on the loopback cluster of
``scripts/slurm-cluster.sh``, and a restarted clawpoint reconciles.

The workload is a wrapped batch job running the self-verifying counter
(``core.workloads.counter``); the kill is the hook ``CLAWPOINT_TEST_KILL_AT`` of
``core.service.executor``, the steps those of the live plan. After the next clawpoint command
(which reconciles at start), for every (operation, step, before/after):

- the journal no longer says "running", the audit log has exactly one recovery entry for the
  execution with the same status, and the chain verifies;
- the workload exists exactly once: one job of its lineage in the queue, one live payload
  process of that job when it runs, none otherwise;
- if it does not run, it is restorable: ``resume`` (held) or ``failover`` (ended) brings it
  back from a checkpoint that verifies (both refuse a lineage whose checkpoints do not);
- it then counts on and its own state check never failed.

One job serves all the kill points of an operation (each point leaves it running again);
failover kills the job's node (its slurmd and the job's processes) before each point and
brings the node back afterwards. An MCP server and the watch loop run beside the kills (see
``bystanders`` in test_fault_matrix). CI runs one kill (migrate, after its signal: the live handoff happens while clawpoint is dead);
``CLAWPOINT_FAULT_MATRIX=full`` runs every pair. Scale is refused at planning (a row too).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.backends.slurm import SbatchSpec, SlurmBackend, submit
from core.backends.slurm.sbatch import job_homes
from core.config import load_settings
from core.model import Action, ExecutionStatus, WorkloadState
from core.service.facade import Service, bootstrap
from tests.reliability.conftest import Record
from tests.reliability.test_fault_matrix import (
    FULL,
    PERSON,
    bystanders,
    counter_pids,
    kill_then_reconcile,
)
from tests.slurm.conftest import CLUSTER_DIR, ROOT, restart_cluster, sh

pytestmark = [pytest.mark.slurm, pytest.mark.criu, pytest.mark.timeout(3600 if FULL else 600)]

NODES = ("n1", "n2", "n3")


@dataclass(frozen=True)
class Operation:
    action: Action
    argv: list[str]  # the CLI command; TARGET stands for the job (or its node, on_node)
    before: str = "running"  # running | held | dead: the job's state first
    on_node: bool = False


OPERATIONS: dict[str, Operation] = {
    "checkpoint": Operation(Action.CHECKPOINT, ["checkpoint", "TARGET"]),
    "migrate": Operation(Action.MIGRATE, ["migrate", "TARGET", "--yes"]),
    "preempt": Operation(Action.PREEMPT, ["preempt", "TARGET", "--yes"]),
    "resume": Operation(Action.RESUME, ["resume", "TARGET", "--yes"], before="held"),
    "failover": Operation(Action.FAILOVER, ["failover", "TARGET", "--yes"], before="dead"),
    "drain": Operation(Action.DRAIN_NODE, ["drain", "TARGET", "--yes"], on_node=True),
    # CPUS: 2 for a job that has 1, else 1 (each kill point leaves the job at one of them).
    "resize": Operation(Action.RESIZE, ["resize", "TARGET", "--cpus", "CPUS", "--yes"]),
}


def params_of(op: Operation, job: Job) -> dict[str, Any]:
    """The operation's parameters for the job as it is now (a resize to the size a job has
    is nothing to do, so the matrix toggles between one and two CPUs)."""
    if op.action is Action.RESIZE:
        return {"cpus": 1 if (job.info().cpus or 1) >= 2 else 2}
    return {}


# CI's fast variant: one kill, in the middle of the longest plan (a standby waits on the
# target and the source has been signalled: the handoff happens while clawpoint is dead, and
# the restarted clawpoint awaits the checkpoint and confirms the takeover).
FAST = ("migrate", "signal", "after")


@pytest.fixture
def slurm_service(
    tmp_path: Path, slurm_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Service:
    """The service as the CLI builds it, Slurm only, in a home of its own."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        "[local]\nenabled = false\n\n"
        "[slurm]\nenabled = true\nretry_total_s = 2.0\ncommand_timeout_s = 10.0\n"
    )
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    monkeypatch.delenv("CLAWPOINT_CONFIG", raising=False)
    return bootstrap(load_settings(home))


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of the clawpoint commands: the test's (the cluster's variables and
    CLAWPOINT_HOME, set by the fixtures) plus ``extra``."""
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


class Job:
    """One wrapped counter job and what the checks read of it."""

    def __init__(self, backend: SlurmBackend, lineage: str) -> None:
        self.backend = backend
        self.lineage = lineage
        self.log = CLUSTER_DIR / "log" / f"{lineage}.out"
        spec = SbatchSpec(
            lineage=lineage,
            command=[sys.executable, "-m", "core.workloads.counter", "--state-mb", "8"],
            output=str(self.log),
            workdir=str(ROOT),
        )
        self.id = submit(spec, backend.cfg, backend.transport).job_id
        # A live move continues the workload in its standby's job (a new id); the payload
        # keeps the first job's environment and home path, whatever job runs it now.
        self.first = self.id
        backend.wait_until("the job to run", 120, lambda: self.info().node)
        self.wait_progress(5)

    @property
    def ref(self) -> str:
        return f"slurm:{self.id}"

    def info(self) -> Any:
        return self.backend.get_workload(self.id)

    def step(self) -> int:
        for path in (p for h in job_homes(self.first) for p in h.glob("run/*.progress.json")):
            try:
                return int(json.loads(path.read_text())["step"])
            except (OSError, ValueError, KeyError):
                pass
        return -1

    def wait_progress(self, steps: int, timeout_s: float = 120) -> None:
        """Wait until the payload has counted ``steps`` more than now (a restored payload
        counts on from its checkpoint; its first write says it runs)."""
        start = self.step()
        deadline = time.monotonic() + timeout_s
        while self.step() < start + steps:
            assert time.monotonic() < deadline, f"job {self.id} made no progress past {start}"
            time.sleep(0.2)

    def queued(self) -> list[str]:
        """The ids of every job of this lineage that Slurm still lists (a standby too; not
        one that is only completing)."""
        out = sh("squeue", "-h", f"--name=clawpoint-{self.lineage}", "-o", "%i %t")
        return [line.split()[0] for line in out.splitlines() if line.split()[1:] != ["CG"]]

    def follow(self, timeout_s: float = 15) -> None:
        """Once the lineage has exactly one job left (a move's standby either took the
        workload over or was cancelled), that is the job: its id may be a standby's."""
        deadline = time.monotonic() + timeout_s
        while len(ids := self.queued()) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(ids) == 1, f"jobs of {self.lineage}: {ids} (one expected)"
        self.id = ids[0]

    def payload_pids(self) -> list[int]:
        """Live counter processes of this job (a restore keeps the environment)."""
        return counter_pids(f"SLURM_JOB_ID={self.first}".encode())

    def settled_pids(self, expected: int, timeout_s: float = 60) -> list[int]:
        """The job's payload processes once there are ``expected`` of them (a restore takes a
        moment after Slurm says the job runs; a stopped payload a moment to go), or as they
        are at the timeout; never two at once."""
        deadline = time.monotonic() + timeout_s
        while True:
            pids = self.payload_pids()
            assert len(pids) <= 1, f"two payloads of job {self.id} at once: {pids}"
            if len(pids) == expected or time.monotonic() > deadline:
                return pids
            time.sleep(0.1)

    def state_checked(self) -> None:
        assert "STATE CHECK FAILED" not in self.log.read_text(errors="replace")


@pytest.fixture
def jobs(slurm_service: Service) -> Iterator[list[Job]]:
    made: list[Job] = []
    yield made
    for job in made:
        sh("scancel", f"--name=clawpoint-{job.lineage}", check=False)
        shutil.rmtree(CLUSTER_DIR / "checkpoints" / "root" / job.lineage, ignore_errors=True)
    for node in NODES:
        sh("scontrol", "update", f"nodename={node}", "state=RESUME", check=False)


def start_job(service: Service, jobs: list[Job], name: str) -> Job:
    backend = service.backend("slurm")
    assert isinstance(backend, SlurmBackend)
    job = Job(backend, f"fm-{name}-{os.getpid()}")
    jobs.append(job)
    return job


def kill_node(job: Job) -> str:
    """What a dead node looks like from the cluster: its slurmd and the job's processes
    SIGKILLed (Slurm still lists the job as running there); the node's name."""
    node = str(job.info().node)
    victims = set(job.payload_pids())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(f"SLURM_JOB_ID={i}".encode() in environ for i in (job.id, job.first)):
            victims.add(int(entry.name))
    os.kill(int((CLUSTER_DIR / "run" / f"slurmd-{node}.pid").read_text()), signal.SIGKILL)
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return node


def revive_nodes() -> None:
    """Every slurmd running again and every node taking jobs (after a failover or a drain)."""
    restart_cluster()
    for node in NODES:
        sh("scontrol", "update", f"nodename={node}", "state=RESUME", check=False)


def prepare(service: Service, job: Job, op: Operation, *, kill: bool = True) -> str:
    """Put the job in the state the operation starts from (``kill``: a dead node's too);
    the operation's target."""
    state = job.info().state
    if op.before == "held" and state is WorkloadState.STOPPED:
        return job.ref
    if state is not WorkloadState.RUNNING:
        bring_back(service, job)
    if op.before == "held":
        done = service.act(Action.PREEMPT, job.ref, {}, principal=PERSON, confirmed=True)
        assert done.status == "executed", done.message
    elif op.before == "dead" and kill:
        job.settled_pids(1)
        done = service.act(Action.CHECKPOINT, job.ref, {}, principal=PERSON, confirmed=True)
        assert done.status == "executed", done.message
        kill_node(job)
    return f"slurm:{job.info().node}" if op.on_node else job.ref


def bring_back(service: Service, job: Job) -> str:
    """Make a job that does not run run again, the way a person would; what was done."""
    state = job.info().state
    if state is WorkloadState.RUNNING:
        return "running"
    held = state in (WorkloadState.STOPPED, WorkloadState.PENDING)
    action = Action.RESUME if held else Action.FAILOVER
    done = service.act(action, job.ref, {}, principal=PERSON, confirmed=True)
    assert done.status == "executed", f"{state.value} job not restorable: {done.message}"
    return f"{state.value}, then {action.value} restored it"


def one_kill(
    service: Service, job: Job, op: Operation, index: int, when: str
) -> tuple[str, str, str]:
    """Kill clawpoint at step ``index`` (before/after) of ``op`` on the job, restart, check;
    the step's name, the outcome and what was checked."""
    target = prepare(service, job, op)
    was = job.id
    params = params_of(op, job)
    step_name = service.plan(op.action, target, params).steps[index].name
    fill = {"TARGET": target, "CPUS": f"{params.get('cpus', '')}"}
    argv = [fill.get(a, a) for a in op.argv]
    after, _ = kill_then_reconcile(
        service, target, [*argv, "--json"], kill_at=f"{op.action.value}:{step_name}:{when}",
        env_of=cli_env, again=["workloads", "--json"], timeout_s=600,
    )  # fmt: skip
    status = after["status"]

    job.follow()
    seen = job.info()
    live = seen.state is WorkloadState.RUNNING
    pids = job.settled_pids(1 if live else 0)
    assert len(pids) == (1 if live else 0), (seen.state, pids)
    if op.before == "dead" or op.on_node:
        revive_nodes()  # before a restart that may need the node back
    how = bring_back(service, job)
    assert len(job.settled_pids(1)) == 1, job.payload_pids()
    job.wait_progress(5)
    job.state_checked()
    which = "its standby's job (a live handoff)" if job.id != was else "the same job"
    outcome = f"{ExecutionStatus(status).value}; job {how} on {job.info().node}, {which}"
    return (
        step_name.replace(was, "W"),
        outcome,
        "once; progress; state check; journal = audit",
    )


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_killed_at_every_step_is_reconciled(
    slurm_service: Service,
    jobs: list[Job],
    need_criu: None,
    record: Record,
    operation: str,
) -> None:
    if not FULL and operation != FAST[0]:
        pytest.skip("Slurm: CI runs the migrate kill only (CLAWPOINT_FAULT_MATRIX=full: all)")
    service, op = slurm_service, OPERATIONS[operation]
    job = start_job(service, jobs, operation[:6])
    # The plan's steps (a failover's are the same whether the node is dead or not).
    target = prepare(service, job, op, kill=False)
    names = [s.name for s in service.plan(op.action, target, params_of(op, job)).steps]
    points = [(i, w) for i in range(len(names)) for w in ("before", "after")]
    if not FULL:
        points = [(names.index(FAST[1]), FAST[2])]
    with bystanders(service.settings, cli_env()):
        failures: list[str] = []
        for index, when in points:
            label = names[index].replace(job.first, "W")
            try:
                label, outcome, checked = one_kill(service, job, op, index, when)
            except AssertionError as exc:
                failures.append(f"{label} {when}: {exc}")
                record(operation, label, when, "FAILED", str(exc).splitlines()[0][:120], "slurm")
                revive_nodes()
                break  # the job's state is unknown: the next points would measure this failure
            else:
                record(operation, label, when, outcome, checked, "slurm")
            finally:
                if op.on_node or op.before == "dead":
                    revive_nodes()
    assert not failures, "\n".join(failures)
    record(operation, "", "MCP server + watch loop throughout the kills",
           "both alive and answering after the last kill; the job listed once",
           "no error; watch exit 0 on SIGTERM", "slurm")  # fmt: skip


def test_scale_is_refused_at_planning(slurm_service: Service, record: Record) -> None:
    """A Slurm job has a fixed allocation: the matrix says so instead of skipping scale (the
    backend refuses before it looks the job up)."""
    with pytest.raises(errors.ClawpointError) as refused:
        slurm_service.plan(Action.SCALE, "slurm:1", {"replicas": 2})
    record("scale", "", "plan", f"refused: {refused.value.code}", refused.value.message[:100],
           "slurm")  # fmt: skip
