"""Subjects for the backend contract suite: every backend with workloads in every state.

``subject`` is parametrised over every backend of the registry plus the fake (``SUBJECTS``;
a registered backend without a ``NAME_subject`` fixture fails the suite): ``local`` (a fresh
CLAWPOINT_HOME with three small counters under the cooperative engine, so no CRIU is needed:
one running on node-a, one preempted, one that died after a checkpoint), ``slurm`` (the
loopback cluster of scripts/slurm-cluster.sh with a running and a held job that carry a
lineage; the Slurm cases skip, with the reason, where that cluster cannot run), ``k8s`` (the
API emulator of tests/k8s) and ``fake`` (the in-memory backend of tests/fakes/backend.py with
a running and a preempted workload). Planning is read-only, so the subjects are made once
per module.

Also here: the installed CLI read through its ``--help`` (``cli``) and the tool list of a
live ``clawpoint serve`` read by a real MCP client (``live_tools``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from core import errors
from core.actions import NoParams
from core.backends.base import Backend, PlanDraft, no_progress
from core.backends.registry import REGISTRY
from core.config import load_settings
from core.model import Action, PlanStep, Principal, PrincipalKind, WorkloadInfo, WorkloadState
from core.service.executor import resolve_args
from core.service.facade import Service, bootstrap
from tests.backends.named import CLAWPOINT, InstalledCli
from tests.service.conftest import counter, wait_step
from tests.slurm.conftest import cluster, read_env

ROOT = Path(__file__).resolve().parents[2]
PERSON = Principal(id="tester", kind=PrincipalKind.PERSON)


def _local_pool_step(s: PlanStep) -> tuple[str, str] | None:
    """A shrink's step as the pool contract reads it: ("save", WORKLOAD) where a workload's
    state is saved, ("release", NODE) where a node leaves; None for the others."""
    if s.op == "checkpoint":
        return "save", str(s.args.get("workload"))
    if s.op == "release":
        return "release", str(s.args.get("node"))
    return None


def _local_move_step(s: PlanStep) -> tuple[str, str] | None:
    """A move's step as the resize contract reads it: ("save", WORKLOAD) where the workload
    is checkpointed and stopped, ("start", WORKLOAD) where it starts again; None otherwise."""
    if s.op == "checkpoint" and s.args.get("stop"):
        return "save", str(s.args.get("workload"))
    if s.op == "start":
        return "start", str(s.args.get("workload"))
    return None


def _slurm_move_step(s: PlanStep) -> tuple[str, str] | None:
    """Slurm saves a job with SIGUSR2 to its wrapper (checkpoint, then stop) and starts it
    again by releasing it (held after the requeue)."""
    if s.op == "signal" and s.args.get("signal") == "USR2":
        return "save", str(s.args["job"])
    if s.op == "release":
        return "start", str(s.args["job"])
    return None


def _named(w: WorkloadInfo) -> str:
    return w.name


@dataclass
class Subject:
    """One backend and a workload (or node, or checkpoint) for each kind of target."""

    name: str
    backend: Backend
    running: str  # a wrapped workload running on ``source``
    stopped: str  # a wrapped workload that was preempted (resumable)
    failed: str  # a wrapped workload whose node or process died
    checkpoint: str | None  # a checkpoint of ``stopped`` (backends that restore)
    source: str  # the node ``running`` is on
    other: str  # a node that takes work and runs none of the above
    placement: Callable[[PlanDraft], set[str]]  # the nodes a plan starts workloads on
    pool: str | None = None  # the pool ``source`` is in (backends with pools)
    pool_step: Callable[[PlanStep], tuple[str, str] | None] = _local_pool_step
    saved_as: Callable[[WorkloadInfo], str] = _named  # the X of ("save", X) for a workload
    move_step: Callable[[PlanStep], tuple[str, str] | None] = _local_move_step

    def target_of(self, action: Action) -> str | None:
        """The id ``action`` is planned on here; None: this backend has none of that kind."""
        if action in (Action.DRAIN_NODE, Action.UNDRAIN_NODE, Action.CORDON_NODE):
            return self.source
        if action is Action.SCALE_POOL:
            return self.pool
        if action is Action.RESUME:
            return self.stopped
        if action is Action.FAILOVER:
            return self.failed
        if action in (Action.RESTORE, Action.DELETE_CHECKPOINT):
            return self.checkpoint
        return self.running

    def target(self, action: Action) -> str:
        found = self.target_of(action)
        if found is None:
            pytest.skip(f"the {self.name} backend keeps nothing {action.value} could target")
        return found


def execute(backend: Backend, draft: PlanDraft) -> dict[str, dict[str, Any]]:
    """Run a plan's steps in order, filling ``$STEP.FIELD`` args as the executor does."""
    outputs: dict[str, dict[str, Any]] = {}
    for step in draft.steps:
        outputs[step.name] = backend.run_step(
            step.op, resolve_args(step.args, outputs), no_progress
        )
    return outputs


# --------------------------------------------------------------------------- local
def _local_placement(draft: PlanDraft) -> set[str]:
    return {str(s.args["node"]) for s in draft.steps if s.op == "start"}


@pytest.fixture(scope="module")
def local_subject(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Subject]:
    home = tmp_path_factory.mktemp("contract") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CLAWPOINT_HOME", str(home))
        mp.setenv("PYTHONPATH", str(ROOT))
        mp.delenv("CLAWPOINT_CONFIG", raising=False)
        settings = load_settings(home)
        service = bootstrap(settings)
        try:
            yield _make_local(service)
        finally:
            for w in service.workloads("local"):
                if w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING):
                    try:
                        service.act(Action.KILL, w.id, {}, principal=PERSON, confirmed=True)
                    except errors.ClawpointError:
                        pass


def _make_local(service: Service) -> Subject:
    settings = service.settings

    def start(name: str) -> None:
        spec = counter(settings, name, mb=1, node="node-a", engine="cooperative")
        service.run_workload(spec, detach=True, principal=PERSON)
        wait_step(settings, name, 2)

    def act(action: Action, target: str, params: dict[str, Any]) -> None:
        result = service.act(action, target, params, principal=PERSON, confirmed=True)
        assert result.status == "executed", result.message

    for name in ("c-run", "c-held", "c-dead"):
        start(name)
    act(Action.PREEMPT, "local:c-held", {})
    act(Action.CHECKPOINT, "local:c-dead", {"stop": False})
    pid = service.get_workload("local:c-dead").pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while service.get_workload("local:c-dead").state is not WorkloadState.FAILED:
        assert time.monotonic() < deadline, "the wrapper did not record the death"
        time.sleep(0.05)
    held = service.checkpoints("local:c-held")[0].id.removeprefix("local:")
    return Subject(
        name="local",
        backend=service.backend("local"),
        running="c-run",
        stopped="c-held",
        failed="c-dead",
        checkpoint=held,
        source="node-a",
        other="node-b",
        placement=_local_placement,
        pool="on-demand",
    )


# --------------------------------------------------------------------------- slurm
def _slurm_placement(draft: PlanDraft) -> set[str]:
    """The nodes a restart is placed on, and a live move's standby and its fallback."""
    placing = ("update_job", "standby_submit", "takeover")
    return {
        str(s.args["fields"]["NodeList"])
        for s in draft.steps
        if s.op in placing and s.args["fields"].get("NodeList")
    }


@pytest.fixture(scope="module")
def slurm_subject() -> Iterator[Subject]:
    if os.geteuid() != 0:
        pytest.skip("the loopback Slurm cluster needs root (it starts slurmctld/slurmd/munged)")
    if cluster("status").returncode != 0:
        up = cluster("up")
        if up.returncode != 0:
            pytest.skip(f"scripts/slurm-cluster.sh up failed: {up.stderr.strip()[-500:]}")
    from core.backends.slurm import SlurmBackend, SlurmConfig

    env = read_env()
    name = f"contract-{os.getpid()}"
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("SLURM_JWT", raising=False)
        full_env = {**os.environ}

        def sbatch(lineage: str, *extra: str) -> str:
            argv = ["sbatch", "--parsable", f"--job-name=clawpoint-{name}",
                    f"--comment=clawpoint:{lineage}", "--requeue", "-o", "/dev/null", *extra,
                    "--wrap", "sleep 600"]  # fmt: skip
            out = subprocess.run(argv, capture_output=True, text=True, check=True, env=full_env)
            return out.stdout.strip().split(";")[0]

        backend = SlurmBackend(SlurmConfig(enabled=True, retry_total_s=2.0, command_timeout_s=10.0))
        try:
            # Wherever there is room: other tests may share the cluster.
            running = sbatch(f"{name}-run")
            held = sbatch(f"{name}-held", "--hold")
            source = backend.wait_until(
                "the job to run", 240, lambda: backend.get_workload(running).node
            )
            assert backend.get_workload(held).state is WorkloadState.STOPPED
            other = next(n for n in ("n2", "n3", "n1") if n != source)
            yield Subject(
                name="slurm",
                backend=backend,
                running=running,
                stopped=held,
                failed=running,  # its node's death is what failover answers
                checkpoint=None,
                source=str(source),
                other=other,
                placement=_slurm_placement,
                move_step=_slurm_move_step,
            )
        finally:
            subprocess.run(["scancel", f"--name=clawpoint-{name}"], env=full_env, check=False)


# --------------------------------------------------------------------------- fake
def _fake_placement(draft: PlanDraft) -> set[str]:
    return {str(s.args["node"]) for s in draft.steps if s.op == "start"}


@pytest.fixture(scope="module")
def fake_subject() -> Subject:
    """The in-memory backend at the port (tests/fakes/backend.py), no processes at all."""
    from tests.fakes.backend import FakeBackend, FakeConfig

    backend = FakeBackend(FakeConfig(workloads={"w-run": "f1", "w-held": "f1"}))
    draft = backend.plan(Action.PREEMPT, "w-held", NoParams())
    execute(backend, draft)
    return Subject(
        name="fake",
        backend=backend,
        running="w-run",
        stopped="w-held",
        failed="w-held",  # it cannot fail over: those cases skip
        checkpoint=None,
        source="f1",
        other="f2",
        placement=_fake_placement,
    )


# --------------------------------------------------------------------------- k8s
def _k8s_placement(draft: PlanDraft) -> set[str]:
    """Nodes a Kubernetes plan pins pods to: required node affinity ``In`` of a created pod
    or of a Job's template (``NotIn`` only keeps pods off a node)."""
    found: set[str] = set()

    def scan(spec: Any) -> None:
        terms = (
            (((spec or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or {}
        ).get("nodeSelectorTerms") or []
        for term in terms:
            for e in term.get("matchExpressions") or []:
                if e.get("key") == "kubernetes.io/hostname" and e.get("operator") == "In":
                    found.update(e.get("values") or [])

    for s in draft.steps:
        if s.op == "create_pod":
            scan(s.args["body"].get("spec"))
        elif s.op == "patch" and s.args.get("kind") == "Job":
            scan(((s.args["patch"].get("spec") or {}).get("template") or {}).get("spec"))
    return found


def _k8s_pool_step(s: PlanStep) -> tuple[str, str] | None:
    """The checkpoint of a lineage; a node's Machine marked for deletion (step NODE-mark_machine)
    or its NodeClaim deleted (NODE-delete_nodeclaim)."""
    if s.op == "exec_checkpoint":
        return "save", str(s.args["lineage"])
    for suffix in ("-mark_machine", "-delete_nodeclaim"):
        if s.name.endswith(suffix):
            return "release", s.name.removesuffix(suffix)
    return None


@pytest.fixture(scope="module")
def k8s_subject(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Subject]:
    """The Kubernetes backend on the API emulator (tests/k8s): a wrapped Job running on n1, a
    suspended one, and a wrapped pod on a NotReady node with a checkpoint on the volume."""
    from core.backends.kubernetes.backend import KubernetesBackend
    from core.backends.kubernetes.config import KubePoolConfig, KubernetesConfig
    from core.store.store import CheckpointStore
    from tests.k8s.capi import capi_crds, machine_deployment, machine_of
    from tests.k8s.conftest import node, wrapped_job, wrapped_pod
    from tests.k8s.emulator import Emulator

    store_dir = tmp_path_factory.mktemp("k8s-volume")
    # Written by the pod's wrapper, with its own key (the server reads it unverified).
    writer = CheckpointStore(store_dir, key=store_dir.parent / "k8s-pod-keys" / "store.key")
    pending = writer.begin("lost", engine="cooperative", node="n3")
    (pending.images_dir / "state").write_text("saved")
    writer.publish(pending, timings={}, leave_running=False)
    with Emulator() as emu:
        emu.namespace("default")
        emu.seed(node("n1"), node("n2"), node("n3", ready=False))
        (job,) = emu.seed(wrapped_job("run", "run"))
        held = wrapped_job("held", "held")
        held["spec"]["suspend"] = True
        emu.seed(held)
        running = wrapped_pod("run-x1", "run")
        running["metadata"]["labels"]["batch.kubernetes.io/job-name"] = "run"
        running["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "run",
             "uid": job["metadata"]["uid"], "controller": True}
        ]  # fmt: skip
        running["spec"]["nodeName"] = "n1"
        running["status"] = {"phase": "Running"}
        lost = wrapped_pod("lost", "lost")
        lost["spec"]["nodeName"] = "n3"
        lost["status"] = {"phase": "Running"}
        emu.seed(running, lost)
        # n1 is the one node of a Cluster API node group (pool "group-a", min 0, max 2)
        emu.seed(*capi_crds())
        emu.seed(machine_deployment("md-a", 1, min_size=0, max_size=2), machine_of("md-a", "n1"))
        backend = KubernetesBackend(
            KubernetesConfig(
                enabled=True, retry_total_s=1, checkpoint_dir=str(store_dir),
                pools={"group-a": KubePoolConfig(kind="cluster-api", object="md-a")},
            ),
            api_client=emu.api_client(),
        )  # fmt: skip
        yield Subject(
            name="k8s",
            backend=backend,
            running="Job/default/run",
            stopped="Job/default/held",
            failed="Pod/default/lost",
            checkpoint=None,
            source="n1",
            other="n2",
            placement=_k8s_placement,
            pool="group-a",
            pool_step=_k8s_pool_step,
            saved_as=lambda w: w.labels["lineage"],
        )
        backend.close()


# Every backend of the registry plus the in-memory fake, read from the registry itself: a
# backend added there is a subject of the whole suite, and without a ``NAME_subject``
# fixture above the suite fails naming it (tests/backends/test_registry.py pins this list).
SUBJECTS = list(dict.fromkeys([*REGISTRY, "fake"]))


@pytest.fixture(params=SUBJECTS)
def subject(request: pytest.FixtureRequest) -> Subject:
    name = request.param
    if f"{name}_subject" not in globals():
        pytest.fail(f"the registered backend {name!r} has no {name}_subject fixture here")
    return request.getfixturevalue(f"{name}_subject")  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- interfaces
@pytest.fixture(scope="session")
def cli() -> InstalledCli:
    if not CLAWPOINT.exists():
        pytest.fail(f"{CLAWPOINT} is not installed: run 'make venv'")
    return InstalledCli()


@pytest.fixture(scope="session")
def live_tools(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The tool names ``clawpoint serve`` (stdio, every toolset: capacity is served only when
    named) lists to a real MCP client."""
    home = tmp_path_factory.mktemp("serve") / "home"
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env["CLAWPOINT_HOME"] = str(home)
    params = StdioServerParameters(
        command=str(CLAWPOINT), args=["serve", "--toolsets", "default,capacity"], env=env
    )

    async def names() -> set[str]:
        async with Client(params) as client:
            return {t.name for t in (await client.list_tools()).tools}

    found = anyio.run(names)
    assert len(found) >= 20, found
    return found
