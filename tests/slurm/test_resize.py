"""Resize a Slurm job through the installed ``clawpoint``, on the loopback cluster.

A wrapped, self-verifying counter runs on n1 with 1 CPU and 300 MiB (the sbatch helper's
``--cpus-per-task=1 --mem=300M``). Slurm never grows a running job, so:

- ``--cpus 0.5`` is refused before anything runs (exit 2: Slurm allocates whole CPUs), and
  ``--memory`` above every node's (2000 MiB) is ``no-node-fits`` (exit 10) naming n1..n3;
- ``--cpus 2`` is a pause even on its own node: a person's call (exit 6, nothing changed);
- confirmed, the job is checkpointed, stopped, given 2 CPUs and restarted: Slurm reports
  its new allocation, and the counter counts on from its checkpoint with its own state
  check intact;
- when the restart cannot happen (the node it was sent to was drained after the plan was
  made), the job is put back where it was with its old allocation, restored from the
  checkpoint: rolled back, never lost.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.backends.slurm import SbatchSpec, SlurmBackend, submit
from core.config import load_settings
from core.model import Action, ExecutionStatus
from core.service.facade import bootstrap
from tests.slurm.conftest import CLUSTER_DIR, ROOT, sh
from tests.slurm.test_e2e import assert_resumed, wait_step

pytestmark = [pytest.mark.slurm, pytest.mark.criu, pytest.mark.timeout(240)]

CLAWPOINT = Path(sys.executable).parent / "clawpoint"
CONFIG = """
[local]
enabled = false
[slurm]
enabled = true
retry_total_s = 2.0
command_timeout_s = 10.0
"""


@pytest.fixture
def counter(backend: SlurmBackend) -> Iterator[tuple[str, str]]:
    """(job id, lineage) of a wrapped counter running on n1 with 1 CPU and 300 MiB."""
    lineage = f"resize-{os.getpid()}-{uuid.uuid4().hex[:6]}"  # a checkpoint of its own
    spec = SbatchSpec(
        lineage=lineage, cpus=1, mem_mb=300, nodelist="n1",
        command=[sys.executable, "-m", "core.workloads.counter", "--state-mb", "16"],
        output=str(CLUSTER_DIR / "log" / f"{lineage}.out"), workdir=str(ROOT),
    )  # fmt: skip
    job = submit(spec, backend.cfg, backend.transport).job_id
    try:
        backend.wait_until("the counter to run on n1", 60,
                           lambda: backend.get_workload(job).node == "n1")  # fmt: skip
        wait_step(job, 20)
        yield job, lineage
    finally:
        _cancel(backend, job)
        shutil.rmtree(CLUSTER_DIR / "checkpoints" / "root" / lineage, ignore_errors=True)


def _cancel(backend: SlurmBackend, job: str) -> None:
    """Cancel and wait until it holds nothing: the next test counts the nodes' free CPUs."""
    sh("scancel", job, check=False)

    def gone() -> bool:
        try:
            return backend.get_workload(job).state.value not in ("running", "pending")
        except errors.NotFound:
            return True

    backend.wait_until(f"job {job} to leave its node", 60, gone)


def _allocation(job: str) -> dict[str, str]:
    """NumCPUs, MinMemoryNode, NodeList and JobState as ``scontrol show job`` prints them."""
    fields = dict(
        word.split("=", 1) for word in sh("scontrol", "show", "job", job).split() if "=" in word
    )
    return {k: fields.get(k, "") for k in ("NumCPUs", "MinMemoryNode", "NodeList", "JobState")}


@pytest.fixture
def cli(slurm_env: dict[str, str], tmp_path: Path) -> Callable[..., tuple[int, Any, str]]:
    """The installed ``clawpoint`` with a Slurm-only configuration: (exit code, JSON, text)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(CONFIG)

    def run(*args: str) -> tuple[int, Any, str]:
        full = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
        full.update(slurm_env, CLAWPOINT_HOME=str(home), COLUMNS="250")
        proc = subprocess.run([str(CLAWPOINT), *args], env=full, cwd=ROOT, capture_output=True,
                              text=True, timeout=200, stdin=subprocess.DEVNULL, check=False)  # fmt: skip
        assert "Traceback" not in proc.stderr, proc.stderr
        try:
            out: Any = json.loads(proc.stdout)
        except ValueError:
            out = None
        return proc.returncode, out, proc.stdout + proc.stderr

    return run


@pytest.fixture
def sleeper(backend: SlurmBackend, job_name: str) -> Iterator[str]:
    """A job that carries a lineage (as the wrapper's do) and only sleeps: enough to plan."""
    job = sh("sbatch", "--parsable", f"--job-name={job_name}", f"--comment=clawpoint:{job_name}",
             "--requeue", "-o", "/dev/null", "--cpus-per-task=1", "--mem=300M",
             "--wrap", "sleep 300").strip().split(";")[0]  # fmt: skip
    backend.wait_until("the job to run", 60, lambda: backend.get_workload(job).node)
    yield job
    _cancel(backend, job)


def test_fractional_cpus_are_refused(
    backend: SlurmBackend, sleeper: str, cli: Callable[..., tuple[int, Any, str]]
) -> None:
    before = _allocation(sleeper)
    code, _, said = cli("resize", f"slurm:{sleeper}", "--cpus", "0.5", "--yes")
    assert code == 2 and "whole CPUs" in said and "whole number" in said, said
    assert _allocation(sleeper) == before


def test_memory_no_node_has_is_refused_naming_the_nodes(
    backend: SlurmBackend, sleeper: str, cli: Callable[..., tuple[int, Any, str]]
) -> None:
    code, out, said = cli("resize", f"slurm:{sleeper}", "--memory", "4Gi", "--yes", "--json")
    assert code == 10 and out["error"] == "no-node-fits", said
    assert out["details"]["nodes"] == dict.fromkeys(("n1", "n2", "n3"), "2000Mi of 2000Mi free")
    assert _allocation(sleeper)["MinMemoryNode"] == "300M"


def test_resize_restarts_the_job_with_its_new_allocation(
    backend: SlurmBackend, counter: tuple[str, str], cli: Callable[..., tuple[int, Any, str]]
) -> None:
    job, lineage = counter
    before = _allocation(job)
    assert before == {"NumCPUs": "1", "MinMemoryNode": "300M", "NodeList": "n1",
                      "JobState": "RUNNING"}, before  # fmt: skip
    w = backend.get_workload(job)
    assert (w.cpus, w.memory_mb, w.gpus) == (1, 300, 0)

    code, _, said = cli("resize", f"slurm:{job}", "--cpus", "2")
    assert code == 6 and "disruptive" in said, said  # a pause: a person decides
    assert _allocation(job) == before

    code, out, said = cli("resize", f"slurm:{job}", "--cpus", "2", "--yes", "--json")
    assert code == 0 and out["status"] == "executed", said
    assert out["plan"]["risk"] == "disruptive" and out["plan"]["expected_pause_s"] > 0, said
    steps = {s["name"]: s for s in out["execution"]["steps"]}
    saved = steps["wait_checkpoint"]["output"]["checkpoint"]
    # On its own node when no other job holds n1's second CPU (another test may).
    node = steps["place"]["output"]["NodeList"]
    assert steps["wait_running"]["output"]["node"] == node
    after = _allocation(job)
    assert after == {**before, "NumCPUs": "2", "NodeList": node}, after  # read from Slurm
    assert backend.get_workload(job).cpus == 2
    assert_resumed(backend, lineage, job, saved)


def test_a_restart_that_fails_puts_the_job_back_as_it_was(
    backend: SlurmBackend,
    counter: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job, lineage = counter
    before = _allocation(job)
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(CONFIG + "start_timeout_s = 15.0\n")
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    monkeypatch.delenv("CLAWPOINT_CONFIG", raising=False)
    service = bootstrap(load_settings(home))
    idle = [n.name for n in backend.nodes() if n.name in ("n2", "n3") and not n.workloads]
    target = (idle or ["n2"])[0]  # another test may use the cluster
    plan = service.plan(Action.RESIZE, f"slurm:{job}", {"cpus": 2, "to": target})
    sh("scontrol", "update", f"nodename={target}", "state=DRAIN", "reason=resize-test")
    try:
        ex = service.executor.run(plan, service.backend("slurm"), principal="tester")
    finally:
        sh("scontrol", "update", f"nodename={target}", "state=RESUME", check=False)
    ex = service.journal.get(ex.id)
    assert ex.status is ExecutionStatus.ROLLED_BACK, ex.result
    assert [s["step"] for s in ex.result["compensation"]] == ["put_back", "wait_put_back"]
    assert ex.result["compensation"][1]["output"]["node"] == "n1"
    assert _allocation(job) == before  # 1 CPU, 300M, on n1, running
    saved = ex.result["outputs"]["wait_checkpoint"]["checkpoint"]
    assert_resumed(backend, lineage, job, saved)


def test_start_now_of_a_job_slurm_already_started_is_what_was_wanted(
    backend: SlurmBackend, counter: tuple[str, str]
) -> None:
    """A released job that Slurm starts before the step that asks it to start now (a busy
    machine: a resize's put_back failed that way in CI, its job running again): Slurm's "no
    longer pending" is the job started, not a failure. What else it refuses still fails."""
    job, _ = counter

    def quiet(*_: object) -> None:
        return None

    out = backend.run_step("update_job", {"job": job, "fields": {"StartTime": "now"}}, quiet)
    assert out["job"] == job and _allocation(job)["JobState"] == "RUNNING"
    with pytest.raises(errors.OperationFailed):  # a running job is never resized in place
        backend.run_step("update_job", {"job": job, "fields": {"NumCPUs": "2"}}, quiet)
