"""The fake kubelet's scheduler and restarts follow the real ones (tests/k8s/scheduler.py,
tests/k8s/kubelet.py): a pod no node takes stays Pending with kube-scheduler's condition and
message; tolerations, GPUs, selectors and cordons decide where a pod lands; restartPolicy
decides whether an exited container runs again; the API server defaults it to Always."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from tests.k8s import scheduler
from tests.k8s.conftest import node, pod


def wait_for(what: str, check: Any, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _core(api: Any) -> Any:
    return client.CoreV1Api(api)


def sleeper(name: str, **spec: Any) -> dict[str, Any]:
    body = pod(name)
    body["spec"]["containers"][0]["command"] = ["sleep", "600"]
    body["spec"].update(spec)
    return body


def get(emu: Any, name: str) -> dict[str, Any]:
    return dict(emu.store.get(emu.store.kinds[("", "pods")], "default", name))


def scheduled_condition(emu: Any, name: str) -> dict[str, Any] | None:
    conds = (get(emu, name).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "PodScheduled"), None)


def set_node(emu: Any, name: str, **spec: Any) -> None:
    kind = emu.store.kinds[("", "nodes")]
    obj = emu.store.get(kind, "", name)
    obj["spec"].update(spec)
    emu.store.update(kind, "", name, obj, api=False)


def test_an_untolerated_taint_leaves_the_pod_pending_with_the_schedulers_reason(
    emu: Any, api: Any, kubelet: Any
) -> None:
    set_node(emu, "n1", taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}])
    core: Any = client.CoreV1Api(api)
    pinned = sleeper("pinned", nodeSelector={"kubernetes.io/hostname": "n1"})
    core.create_namespaced_pod("default", pinned)
    cond = wait_for("the scheduler's verdict", lambda: scheduled_condition(emu, "pinned"))
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
    assert cond["message"] == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, "
        "2 node(s) didn't match Pod's node affinity/selector."
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.."
    )
    time.sleep(0.3)
    assert get(emu, "pinned")["status"]["phase"] == "Pending"
    assert not get(emu, "pinned")["spec"].get("nodeName")
    # the same pod with a toleration lands there
    tolerant = sleeper(
        "tolerant",
        nodeSelector={"kubernetes.io/hostname": "n1"},
        tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    )
    core.create_namespaced_pod("default", tolerant)
    wait_for("tolerant on n1", lambda: get(emu, "tolerant")["spec"].get("nodeName") == "n1")


def test_gpus_are_requests_against_allocatable_minus_what_runs(
    emu: Any, api: Any, kubelet: Any
) -> None:
    core: Any = client.CoreV1Api(api)
    first = pod("gpu-1", gpus=1)
    first["spec"]["containers"][0]["command"] = ["sleep", "600"]
    core.create_namespaced_pod("default", first)
    wait_for(
        "gpu-1 on n2 (the GPU node)", lambda: get(emu, "gpu-1")["spec"].get("nodeName") == "n2"
    )
    second = pod("gpu-2", gpus=1)
    second["spec"]["containers"][0]["command"] = ["sleep", "600"]
    core.create_namespaced_pod("default", second)
    cond = wait_for("gpu-2 unschedulable", lambda: scheduled_condition(emu, "gpu-2"))
    assert cond["message"] == (
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: "
        "0/3 nodes are available: 3 No preemption victims found for incoming pod.."
    )
    core.delete_namespaced_pod("gpu-1", "default", grace_period_seconds=0)
    wait_for("gpu-2 takes the freed GPU", lambda: get(emu, "gpu-2")["spec"].get("nodeName") == "n2")


def test_a_cordon_filters_unless_tolerated_and_prefer_noschedule_never_does(
    emu: Any, api: Any, kubelet: Any
) -> None:
    for n in ("n1", "n2"):
        set_node(emu, n, unschedulable=True)
    set_node(emu, "n3", taints=[{"key": "spot", "effect": "PreferNoSchedule"}])
    core: Any = client.CoreV1Api(api)
    core.create_namespaced_pod("default", sleeper("soft"))
    wait_for("soft on n3", lambda: get(emu, "soft")["spec"].get("nodeName") == "n3")
    set_node(emu, "n3", unschedulable=True)
    core.create_namespaced_pod("default", sleeper("blocked"))
    cond = wait_for("blocked unschedulable", lambda: scheduled_condition(emu, "blocked"))
    assert cond["message"] == (
        "0/3 nodes are available: 3 node(s) were unschedulable. preemption: "
        "0/3 nodes are available: 3 Preemption is not helpful for scheduling.."
    )
    tol = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]
    core.create_namespaced_pod("default", sleeper("daemon", tolerations=tol))
    wait_for("daemon placed despite the cordon", lambda: get(emu, "daemon")["spec"].get("nodeName"))


def test_a_node_that_is_not_ready_carries_the_lifecycle_taint(
    emu: Any, api: Any, kubelet: Any
) -> None:
    kubelet.crash_node("n1")
    for n in ("n2", "n3"):
        set_node(emu, n, unschedulable=True)
    _core(api).create_namespaced_pod("default", sleeper("orphan"))
    cond = wait_for("orphan unschedulable", lambda: scheduled_condition(emu, "orphan"))
    assert cond["message"] == (
        "0/3 nodes are available: 1 node(s) had untolerated taint "
        "{node.kubernetes.io/unreachable: }, 2 node(s) were unschedulable."
        " preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.."
    )


@pytest.mark.parametrize(
    ("term", "name", "labels", "match"),
    [
        ({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}, "a", {"gen": "4"}, True),
        ({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["3"]}]}, "a", {"gen": "3"}, False),
        ({"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["3"]}]}, "a", {}, False),
        ({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["x"]}]}, "a", {"gen": "4"}, False),
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}, "a", {}, True),
        ({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]}]}, "a", {}, False),
        ({}, "a", {"gen": "4"}, False),  # an empty term matches nothing
        ({"matchExpressions": [{"key": "z", "operator": "NotIn", "values": ["1"]}]}, "a", {}, True),
    ],
)  # fmt: skip
def test_node_affinity_operators(
    term: dict[str, Any], name: str, labels: dict[str, str], match: bool
) -> None:
    n = node(name, labels=labels)
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}  # fmt: skip
    p = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "affinity": affinity}}
    reasons = scheduler.unschedulable_reasons(p, n, [], True)
    assert (reasons == []) is match, reasons


def test_requests_follow_pod_requests_init_containers_sidecars_and_limits() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "b", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}},
        ],
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            {"name": "init", "resources": {"requests": {"cpu": "3", "memory": "512Mi"}}},
        ],
        "overhead": {"cpu": "50m"},
    }
    got = scheduler.pod_requests(spec)
    # containers 1.5 + sidecar 0.1 = 1.6 < init 3 + sidecar 0.1 = 3.1; + overhead 0.05
    assert got["cpu"] == scheduler.quantity("3150m")
    assert got["memory"] == scheduler.quantity("1Gi")
    assert got["nvidia.com/gpu"] == 1


# ----- restartPolicy ------------------------------------------------------------------------
def test_the_api_server_defaults_restart_policy_to_always(emu: Any, api: Any) -> None:
    core: Any = client.CoreV1Api(api)
    body = pod("bare")
    core.create_namespaced_pod("default", body)
    assert core.read_namespaced_pod("bare", "default").spec.restart_policy == "Always"


@pytest.mark.parametrize(
    ("policy", "code", "restarts", "phase"),
    [
        ("Always", 0, True, "Running"),
        ("Always", 3, True, "Running"),
        ("OnFailure", 3, True, "Running"),
        ("OnFailure", 0, False, "Succeeded"),
        ("Never", 3, False, "Failed"),
        (None, 0, True, "Running"),  # the default: Always
    ],
)
def test_the_kubelet_restarts_containers_as_restart_policy_says(
    emu: Any, api: Any, kubelet: Any, policy: str | None, code: int, restarts: bool, phase: str
) -> None:
    body = pod("quitter")
    body["spec"]["containers"][0]["command"] = ["sh", "-c", f"sleep 0.2; exit {code}"]
    if policy:
        body["spec"]["restartPolicy"] = policy
    _core(api).create_namespaced_pod("default", body)

    def status() -> dict[str, Any]:
        return get(emu, "quitter").get("status") or {}

    if restarts:
        wait_for(
            "two restarts",
            lambda: ((status().get("containerStatuses") or [{}])[0].get("restartCount") or 0) >= 2,
        )
        cs = status()["containerStatuses"][0]
        assert cs["lastState"]["terminated"]["exitCode"] == code
        assert status()["phase"] == phase
    else:
        wait_for(f"phase {phase}", lambda: status().get("phase") == phase)
        time.sleep(1)
        assert status()["containerStatuses"][0]["restartCount"] == 0
        assert status()["phase"] == phase
