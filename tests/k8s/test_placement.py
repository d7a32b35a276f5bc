"""Pre-flight of moves (``core.backends.kubernetes.placement``): before a plan stops anything,
its target must tolerate, fit and match the pod as kube-scheduler would decide; a bare pod
that restarts is deleted rather than waited on; an unpinned image is warned about; a pod
annotated as wrapped whose command is not the wrapper is refused at plan time.

These plans run against the API emulator with seeded objects (no kubelet): every refusal
must come before any mutating request, which the emulator's request recorder shows.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.backends.kubernetes.backend import KubernetesBackend
from core.backends.kubernetes.config import KubernetesConfig
from core.model import Action
from tests.k8s.conftest import node, wrapped_job, wrapped_pod

DIGEST = "ghcr.io/example/clawpoint-job@sha256:" + "a" * 64


@pytest.fixture
def backend(emu: Any, tmp_path: Path) -> Any:
    b = KubernetesBackend(
        KubernetesConfig(enabled=True, retry_total_s=1, checkpoint_dir=str(tmp_path)),
        api_client=emu.api_client(),
    )
    yield b
    b.close()


def running_pod(name: str, on: str, **spec: Any) -> dict[str, Any]:
    p = wrapped_pod(name, name)
    p["spec"].update(nodeName=on, **spec)
    p["status"] = {"phase": "Running"}
    return p


def gpu(pod: dict[str, Any], n: int) -> dict[str, Any]:
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": str(n)}}
    return pod


def tainted(n: dict[str, Any], *taints: dict[str, str]) -> dict[str, Any]:
    n["spec"]["taints"] = list(taints)
    return n


def writes(emu: Any, since: int) -> list[Any]:
    """Requests after ``since`` that would change something (or exec into a pod)."""
    return [
        r
        for r in emu.requests[since:]
        if (r.method in ("POST", "PATCH", "PUT", "DELETE") and r.query.get("dryRun") != "All")
        or "/exec" in r.path
    ]


def migrate(backend: Any, target: str, **params: Any) -> Any:
    return backend.plan(Action.MIGRATE, target, params)


# ----- taints and tolerations ---------------------------------------------------------------
def test_migrate_to_a_noschedule_node_is_refused_at_plan_time_naming_the_taint(
    emu: Any, backend: Any
) -> None:
    emu.seed(
        node("n1"),
        tainted(node("n2"), {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}),
        running_pod("mover", "n1"),
    )  # fmt: skip
    before = len(emu.requests)
    with pytest.raises(errors.Conflict) as info:
        migrate(backend, "k8s:Pod/default/mover", to="k8s:n2")
    err = info.value
    assert err.code == "kubernetes-node-does-not-fit"
    assert "n2" in err.message and "node-role.kubernetes.io/control-plane:NoSchedule" in err.message
    assert err.details["node"] == "n2" and err.hint
    assert not writes(emu, before), "nothing may be stopped or created"
    pods = emu.store.kinds[("", "pods")]
    assert emu.store.get(pods, "default", "mover")["status"]["phase"] == "Running"


@pytest.mark.parametrize(
    ("toleration", "ok"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "gpu"}, True),  # no operator = Equal; no effect = all
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # empty key with Exists tolerates everything
        ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_tolerations_follow_the_upstream_matching_rules(
    emu: Any, backend: Any, toleration: dict[str, str], ok: bool
) -> None:
    emu.seed(
        node("n1"),
        tainted(node("n2"), {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
        running_pod("mover", "n1", tolerations=[toleration]),
    )
    if ok:
        draft = migrate(backend, "k8s:Pod/default/mover", to="n2")
        assert draft.scope.fits == ["n2"]
    else:
        with pytest.raises(errors.Conflict, match="dedicated=gpu:NoSchedule"):
            migrate(backend, "k8s:Pod/default/mover", to="n2")


def test_prefer_noschedule_does_not_refuse_and_noexecute_does(emu: Any, backend: Any) -> None:
    emu.seed(
        node("n1"),
        tainted(node("soft"), {"key": "spot", "effect": "PreferNoSchedule"}),
        tainted(node("hard"), {"key": "maintenance", "value": "now", "effect": "NoExecute"}),
        running_pod("mover", "n1"),
    )
    assert migrate(backend, "k8s:Pod/default/mover", to="soft").scope.fits == ["soft"]
    with pytest.raises(errors.Conflict, match="maintenance=now:NoExecute"):
        migrate(backend, "k8s:Pod/default/mover", to="hard")
    # without --to only the soft-tainted node is a candidate
    assert migrate(backend, "k8s:Pod/default/mover").scope.fits == ["soft"]


def test_a_cordoned_or_not_ready_target_is_refused_with_every_reason(
    emu: Any, backend: Any
) -> None:
    cordoned = tainted(node("n2"), {"key": "x", "effect": "NoSchedule"})
    cordoned["spec"]["unschedulable"] = True
    emu.seed(node("n1"), cordoned, node("n3", ready=False), running_pod("mover", "n1"))
    with pytest.raises(errors.Conflict) as info:
        migrate(backend, "k8s:Pod/default/mover", to="n2")
    assert info.value.details["reasons"] == [
        "cordoned (spec.unschedulable)",
        "taint x:NoSchedule not tolerated",
    ]
    with pytest.raises(errors.Conflict, match="cannot run on node n3: not Ready"):
        migrate(backend, "k8s:Pod/default/mover", to="n3")
    with pytest.raises(errors.Conflict) as nowhere:
        migrate(backend, "k8s:Pod/default/mover")
    assert nowhere.value.code == "kubernetes-no-node-fits"
    assert "n2: cordoned" in nowhere.value.message and "n3: not Ready" in nowhere.value.message


# ----- resources, selectors, affinity -------------------------------------------------------
def test_migrate_without_to_chooses_only_nodes_that_fit_gpus_and_selectors(
    emu: Any, backend: Any
) -> None:
    emu.seed(
        node("n1", labels={"pool": "a"}, gpus=1),
        node("n2", labels={"pool": "a"}),  # no GPU
        node("n3", labels={"pool": "b"}, gpus=1),  # GPU, wrong pool
        node("n4", labels={"pool": "a"}, gpus=2),
        node("n5", labels={"pool": "a"}, gpus=1),
        gpu(running_pod("mover", "n1", nodeSelector={"pool": "a"}), 1),
    )
    squatter = gpu(running_pod("squatter", "n5"), 1)  # takes n5's only GPU
    squatter["metadata"]["annotations"] = {}
    emu.seed(squatter)
    draft = migrate(backend, "k8s:Pod/default/mover")
    assert draft.scope.fits == ["n4"]
    assert "n4" in draft.summary
    with pytest.raises(errors.Conflict, match=r"insufficient nvidia.com/gpu: requests 1, 0 free"):
        migrate(backend, "k8s:Pod/default/mover", to="n2")
    with pytest.raises(errors.Conflict, match="nodeSelector pool=a does not match"):
        migrate(backend, "k8s:Pod/default/mover", to="n3")
    with pytest.raises(errors.Conflict, match=r"insufficient nvidia\.com/gpu"):
        migrate(backend, "k8s:Pod/default/mover", to="n5")


def test_cpu_memory_and_pod_slots_count_the_pods_already_bound(emu: Any, backend: Any) -> None:
    small = node("small")
    small["status"]["allocatable"].update(cpu="2", memory="4Gi", pods="2")
    emu.seed(node("n1"), small)
    hog = running_pod("hog", "small")
    hog["metadata"]["annotations"] = {}
    hog["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1500m", "memory": "1Gi"}}
    mover = running_pod("mover", "n1")
    mover["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "600m", "memory": "3Gi"}}
    mover["spec"]["initContainers"] = [
        {"name": "prep", "image": "busybox", "resources": {"requests": {"memory": "4Gi"}}}
    ]  # the largest init container counts when it is larger than the containers' sum
    emu.seed(hog, mover)
    with pytest.raises(errors.Conflict) as info:
        migrate(backend, "k8s:Pod/default/mover", to="small")
    assert info.value.details["reasons"] == [
        "insufficient cpu: requests 0.6, 0.5 free of 2 allocatable",
        "insufficient memory: requests 4096Mi, 3072Mi free of 4096Mi allocatable",
    ]


@pytest.mark.parametrize(
    ("expressions", "fits"),
    [
        ([{"key": "gpu-mem", "operator": "Gt", "values": ["40"]}], ["big"]),
        ([{"key": "gpu-mem", "operator": "Lt", "values": ["40"]}], ["mid"]),
        ([{"key": "zone", "operator": "In", "values": ["z1", "z2"]}], ["big", "mid"]),
        ([{"key": "zone", "operator": "NotIn", "values": ["z1"]}], ["mid", "plain"]),
        ([{"key": "gpu-mem", "operator": "DoesNotExist"}], ["plain"]),
        ([{"key": "gpu-mem", "operator": "Exists"}, {"key": "zone", "operator": "In", "values": ["z2"]}], ["mid"]),
    ],
)  # fmt: skip
def test_required_node_affinity_of_the_pod_is_kept_and_checked(
    emu: Any, backend: Any, expressions: list[dict[str, Any]], fits: list[str]
) -> None:
    emu.seed(
        node("n1", labels={"zone": "z9"}),
        node("big", labels={"gpu-mem": "80", "zone": "z1"}),
        node("mid", labels={"gpu-mem": "24", "zone": "z2"}),
        node("plain", labels={"zone": "z3"}),
    )
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}  # fmt: skip
    emu.seed(running_pod("mover", "n1", affinity=affinity))
    draft = migrate(backend, "k8s:Pod/default/mover")
    assert draft.scope.fits == fits
    # the copy keeps the pod's own requirement, with the move's placement ANDed in
    create = next(s for s in draft.steps if s.op == "create_pod")
    terms = create.args["body"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [*expressions, {
        "key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n1"]}]}]  # fmt: skip


def test_resume_to_a_node_the_job_does_not_fit_is_refused(emu: Any, backend: Any) -> None:
    held = wrapped_job("held", "held")
    held["spec"]["suspend"] = True
    held["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    emu.seed(node("n1", labels={"pool": "a"}), node("n2", labels={"pool": "b"}), held)
    assert backend.plan(Action.RESUME, "k8s:Job/default/held", {"to": "n1"}).steps
    before = len(emu.requests)
    with pytest.raises(errors.Conflict, match="cannot run on node n2: nodeSelector pool=a"):
        backend.plan(Action.RESUME, "k8s:Job/default/held", {"to": "n2"})
    assert not writes(emu, before)


def test_drain_refuses_before_cordoning_when_a_wrapped_pod_fits_nowhere(
    emu: Any, backend: Any
) -> None:
    emu.seed(
        node("n1", gpus=1),
        node("n2"),
        gpu(running_pod("trainer", "n1"), 1),
    )
    with pytest.raises(errors.Conflict) as info:
        backend.plan(Action.DRAIN_NODE, "k8s:n1", {})
    assert "pod default/trainer" in info.value.message
    assert "n2: insufficient nvidia.com/gpu" in info.value.message


# ----- restartPolicy, image pinning, the wrapper --------------------------------------------
def test_a_bare_pod_that_restarts_is_deleted_not_waited_on(emu: Any, backend: Any) -> None:
    emu.seed(node("n1"), node("n2"), running_pod("always", "n1", restartPolicy="Always"))
    steps = migrate(backend, "k8s:Pod/default/always", to="n2").steps
    assert [(s.name, s.op) for s in steps] == [
        ("checkpoint", "exec_checkpoint"),
        ("delete_old", "delete_pod"),
        ("wait_ended", "wait_pod_ended"),
        ("create", "create_pod"),
        ("wait_restored", "wait_restored"),
    ]
    assert steps[0].args["stop"] is False, "a payload stopped in place would be restarted"
    assert "restartPolicy Always" in steps[1].description
    assert steps[4].args["min_seq"] == "$checkpoint.seq"
    # Never moves live: the copy starts first as a standby, the old pod goes only after it
    # (tests/k8s/test_live_moves.py has the ordinary order, live handoffs off)
    emu.seed(running_pod("never", "n1", restartPolicy="Never"))
    never = migrate(backend, "k8s:Pod/default/never", to="n2").steps
    assert [s.op for s in never] == [
        "create_pod", "wait_standby", "exec_checkpoint", "wait_pod_ended", "takeover", "delete_pod"
    ]  # fmt: skip


def test_an_image_not_pinned_by_digest_is_warned_about(emu: Any, backend: Any) -> None:
    emu.seed(node("n1"), node("n2"), running_pod("tagged", "n1"))
    pinned = running_pod("pinned", "n1")
    pinned["spec"]["containers"][0]["image"] = DIGEST
    emu.seed(pinned)
    tagged = migrate(backend, "k8s:Pod/default/tagged", to="n2")
    (warning,) = tagged.scope.warnings
    assert "not pinned by digest" in warning and "clawpoint-job:latest" in warning
    assert "Warning:" in tagged.summary
    assert migrate(backend, "k8s:Pod/default/pinned", to="n2").scope.warnings == []


def test_a_wrapped_pod_whose_command_is_not_the_wrapper_is_refused_at_plan_time(
    emu: Any, backend: Any
) -> None:
    liar = running_pod("liar", "n1")
    liar["spec"]["containers"][0]["command"] = ["python", "-m", "core.workloads.counter"]
    liar["spec"]["containers"][0]["args"] = []
    shell = running_pod("shell", "n1")
    shell["spec"]["containers"][0]["command"] = ["sh", "-c"]
    shell["spec"]["containers"][0]["args"] = ["exec clawpoint run --name shell -- sleep 1000"]
    emu.seed(node("n1"), node("n2"), liar, shell)
    started, before = time.monotonic(), len(emu.requests)
    for action, params in ((Action.MIGRATE, {"to": "n2"}), (Action.CHECKPOINT, {})):
        with pytest.raises(errors.NotSupported) as info:
            backend.plan(action, "k8s:Pod/default/liar", params)
        assert info.value.code == "kubernetes-wrapper-missing"
        assert "'main' does not run the wrapper" in info.value.message
        assert "clawpoint run" in info.value.hint
    assert time.monotonic() - started < 5 and not writes(emu, before)
    assert migrate(backend, "k8s:Pod/default/shell", to="n2").steps  # a shell line is fine


def test_exec_into_a_container_without_a_wrapper_fails_within_seconds(tmp_path: Path) -> None:
    """The command is not visible (an image entrypoint): the exec finds no wrapper holding
    the lineage's lock and says so at once, instead of waiting 60 s for its socket."""
    import os

    env = {**os.environ, "CLAWPOINT_HOME": str(tmp_path)}
    # As in a container: its own PID namespace and /proc (no wrapper of "ghost" starting
    # either: the exec looks for one there), where this host allows it.
    pidns = ["unshare", "--pid", "--fork", "--mount-proc"] if os.geteuid() == 0 else []
    started = time.monotonic()
    done = subprocess.run(
        [*pidns, sys.executable, "-m", "core.backends.kubernetes.incontainer", "checkpoint",
         "ghost"],
        env=env, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert time.monotonic() - started < 15
    assert done.returncode == errors.NotSupported.exit_code, done.stderr
    assert "kubernetes-wrapper-missing" in done.stderr and "clawpoint run" in done.stderr


def test_a_wrapper_still_starting_is_waited_for() -> None:
    """A busy node takes seconds to start the wrapper's interpreter: its process (before it
    holds its lock) counts as a wrapper of its lineage, and of each pod's BASE-INDEX."""
    from core.backends.kubernetes import incontainer

    # /proc is the whole host's: a name no other test (another worker's `run`) uses.
    base = f"tr{uuid.uuid4().hex[:10]}"
    fake = subprocess.Popen(  # argv as a starting `clawpoint run --name BASE -- ...`
        [sys.executable, "-c", "import time; time.sleep(30)", "clawpoint", "run", "--name",
         base, "--", "x"]
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not incontainer.wrapper_starting(base):
            assert time.monotonic() < deadline, "the starting wrapper was not seen"
            time.sleep(0.05)
        assert incontainer.wrapper_starting(f"{base}-1")
        assert not incontainer.wrapper_starting(f"{base}er")
    finally:
        fake.kill()
        fake.wait()
