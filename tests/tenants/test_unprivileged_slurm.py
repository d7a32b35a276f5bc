"""An ordinary user's wrapped Slurm job is checkpointed, moved and failed over, as that user.

Alice submits the 200 MiB self-checking counter with her own installed ``clawpoint slurm
submit``; Slurm runs the job as alice (no ``SlurmUser=root`` shortcut for the job itself),
and its wrapper checkpoints into her private directory of the shared store
(``checkpoints/clawpoint-alice``, 0700). The operator (root here, as on a real cluster's
admin node) drives the job with the installed CLI: a checkpoint, preempt + resume, a move
onto another node, and a failover after ``kill -9`` of the job's processes and its node's
slurmd; then alice moves it herself, live (her standby job takes it over). After each restore the job counts on from at least its checkpoint's step, its own
check never fails, and its processes are alice's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from core.backends.slurm.sbatch import job_homes
from tests.slurm.conftest import CLUSTER_DIR, restart_cluster, sh
from tests.slurm.test_e2e import _kill_node
from tests.tenants import Tenant, tenants

pytestmark = [pytest.mark.slurm, pytest.mark.criu, pytest.mark.timeout(600)]
ROOT_CLI = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "clawpoint"
CONFIG = "[local]\nenabled = false\n\n[slurm]\nenabled = true\nretry_total_s = 2.0\n"


class Operator:
    """The installed CLI as the cluster's operator (root), with its own home."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(CONFIG)
        self.env = {**os.environ, **env, "CLAWPOINT_HOME": str(home), "COLUMNS": "250"}

    def __call__(self, *args: str) -> Any:
        done = subprocess.run(
            [str(ROOT_CLI), *args, "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return json.loads(done.stdout)


def progress(job: str) -> dict[str, Any]:
    for home in reversed(job_homes(job)):
        for path in home.glob("run/*.progress.json"):
            try:
                return dict(json.loads(path.read_text()))
            except (OSError, ValueError):
                pass
    return {}


def wait_step(job: str, at_least: int, *, since: float = 0, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = progress(job)
        if float(p.get("ts", 0)) > since and int(p.get("step", 0)) >= at_least:
            return int(p["step"])
        time.sleep(0.2)
    raise AssertionError(f"job {job} did not reach step {at_least}: {progress(job)}")


def counter_uids(job: str) -> set[int]:
    """The uids of the job's counter processes (found by the job id in their environment)."""
    uids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"SLURM_JOB_ID={job}".encode() not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            if b"core.workloads.counter" not in (entry / "cmdline").read_bytes():
                continue
            uids.add(entry.stat().st_uid)
        except OSError:
            continue
    return uids


async def mcp_checkpoint(op: Operator, ref: str) -> dict[str, Any]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=str(ROOT_CLI), args=["serve"], env=op.env)
    async with Client(params) as client:
        done = await client.call_tool("checkpoint_workload", {"workload": ref})
        assert not done.is_error, done.content
        return dict(done.structured_content or {})


def newest_step(lineage_dir: Path) -> int:
    """The counter step the newest checkpoint of a lineage holds (its manifest)."""
    newest = max(p for p in lineage_dir.iterdir() if p.name.isdigit())
    manifest = json.loads((newest / "manifest.json").read_text())
    return int(manifest["extra"]["progress"]["step"])


@pytest.fixture
def alice_job(
    slurm_cluster: dict[str, str],
) -> Iterator[tuple[Tenant, str, str, Path, dict[str, str]]]:
    alice, _ = tenants()
    lineage = f"tenant-{os.getpid()}"
    home = alice.home / f"cp-slurm-{os.getpid()}"
    home.mkdir(exist_ok=True)
    os.chown(home, alice.uid, alice.gid)
    log = alice.home / f"{lineage}.out"
    env = alice.env(CLAWPOINT_HOME=str(home), **slurm_cluster)
    done = alice.run(["sh", "-c", f"printf '{CONFIG}' > {home}/config.toml"], env=env)
    assert done.returncode == 0, done.stderr
    done = alice.run(
        [alice.clawpoint, "slurm", "submit", "--name", lineage, "--nodelist", "n1",
         "--output", str(log), "--chdir", str(alice.home), "--json", "--",
         str(alice.python), "-m", "core.workloads.counter", "--state-mb", "200",
         "--step-seconds", "0.05"],
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)["workload"].removeprefix("slurm:")
    yield alice, job, lineage, log, env
    sh("scancel", f"--name=clawpoint-{lineage}", check=False)  # a live move's new job too
    restart_cluster()  # a new slurmd for a node the failover killed
    for node in ("n1", "n2", "n3"):
        sh("scontrol", "update", f"nodename={node}", "state=RESUME", check=False)
    shutil.rmtree(CLUSTER_DIR / "checkpoints" / alice.name / lineage, ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)
    log.unlink(missing_ok=True)  # else each run leaves one in alice's home


def test_an_ordinary_users_job_is_checkpointed_moved_and_failed_over(
    alice_job: tuple[Tenant, str, str, Path, dict[str, str]],
    slurm_cluster: dict[str, str],
    tmp_path: Path,
) -> None:
    alice, job, lineage, log, alice_env = alice_job
    op = Operator(tmp_path / "operator", slurm_cluster)
    ref = f"slurm:{job}"
    wait_step(job, 10)
    assert counter_uids(job) == {alice.uid}  # Slurm runs it as alice: no root in the job

    out = op("checkpoint", ref)
    assert out["status"] == "executed", out
    # The operator cannot authenticate alice's checkpoints (her key is hers): unverified.
    # Alice's own clawpoint, with the key her job's wrapper signed with, sees them good.
    cps = op("checkpoints", ref)
    assert cps and cps[0]["status"] == "unverified", cps
    done = alice.run([alice.clawpoint, "checkpoints", ref, "--json"], env=alice_env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["status"] == "good", done.stdout
    lineage_dir = CLUSTER_DIR / "checkpoints" / alice.name / lineage
    assert all(p.stat().st_uid == alice.uid for p in lineage_dir.rglob("*"))

    # The same through the operator's MCP server and a real MCP client, as an agent does it.
    before = newest_step(lineage_dir)
    out = anyio.run(mcp_checkpoint, op, ref)
    assert out["status"] == "executed", out
    assert newest_step(lineage_dir) > before

    op("preempt", ref, "--yes")
    saved = int(progress(job)["step"])
    t = time.time()
    op("resume", ref, "--yes")
    wait_step(job, saved, since=t)

    t = time.time()
    out = op("migrate", ref, "--to", "n2", "--yes")
    assert out["status"] == "executed", out
    moved_from = newest_step(lineage_dir)
    wait_step(job, moved_from, since=t)
    assert counter_uids(job) == {alice.uid}

    _kill_node(job, "n2")  # kill -9 of the job's processes and of its node's slurmd
    t = time.time()
    out = op("failover", ref, "--yes")
    assert out["status"] == "executed", out
    wait_step(job, moved_from, since=t)
    wait_step(job, moved_from + 20, since=t)
    assert counter_uids(job) == {alice.uid}

    # Her own move is a live one (the operator's above were requeues: a standby is submitted
    # by whoever moves, so only the owner's moves get one): her standby job, run as her,
    # takes the workload over under a new job id; its rendezvous stays in her directory.
    here = sh("squeue", "-h", "-j", job, "-o", "%N").strip()
    to = "n1" if here != "n1" else "n3"
    t = time.time()
    done = alice.run([alice.clawpoint, "migrate", ref, "--to", to, "--yes", "--json"],
                     env=alice_env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    steps = {s["name"]: s["output"] for s in json.loads(done.stdout)["execution"]["steps"]}
    moved = steps["takeover"]
    assert moved["how"] == "handoff" and moved["job"] != job and moved["node"] == to, moved
    wait_step(job, newest_step(lineage_dir), since=t)  # the home path is the first job's
    assert counter_uids(job) == {alice.uid}
    rendezvous = CLUSTER_DIR / "checkpoints" / alice.name / ".handoff"
    assert rendezvous.stat().st_uid == alice.uid and rendezvous.stat().st_mode & 0o077 == 0
    # Another tenant can neither read her standbys' keys nor plant a rendezvous there.
    _, bob = tenants()
    assert bob.run(["ls", str(rendezvous)]).returncode != 0
    fake = rendezvous / f"{lineage}.abcdef.waiting.json"
    assert bob.run(["sh", "-c", f"echo {{}} > {fake}"]).returncode != 0
    assert not fake.exists()
    assert "STATE CHECK FAILED" not in log.read_text()


def test_a_job_home_another_user_made_first_is_refused(tmp_path: Path) -> None:
    """Bob pre-creates alice's job-home directory in the shared /tmp (job ids and uids are
    easy to guess): alice's job refuses to start there (exit 1, naming the directory and the
    fix) and writes nothing into it; only a directory that is really hers is used."""
    from core.backends.slurm import SbatchSpec
    from core.backends.slurm.config import SlurmConfig
    from core.backends.slurm.sbatch import JOB_HOME_PREFIX, render_sbatch

    alice, bob = tenants()
    shared = Path("/tmp") / f"cp-jobroot-{os.getpid()}"
    shared.mkdir(mode=0o777, exist_ok=True)
    os.chmod(shared, 0o1777)
    try:
        squat = shared / f"{JOB_HOME_PREFIX}{alice.uid}"
        assert bob.run(["mkdir", "-m", "0777", str(squat)]).returncode == 0
        script = shared / "job.sh"
        spec = SbatchSpec(lineage="squat", command=["true"])
        script.write_text(render_sbatch(spec, SlurmConfig(checkpoint_dir=str(shared / "cp"))))
        script.chmod(0o755)
        env = alice.env(SLURM_JOB_ID="4242", CLAWPOINT_JOB_HOME_ROOT=str(shared))
        done = alice.run(["bash", str(script)], env=env)
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert str(squat) in done.stderr and "another user" in done.stderr
        assert list(squat.iterdir()) == []  # nothing of alice's landed in bob's directory
    finally:
        shutil.rmtree(shared, ignore_errors=True)
