"""``resize`` on Kubernetes, run for real against the API emulator, the fake kubelet and CRIU:
in place through ``pods/resize`` when the server, the change and the container's resizePolicy
allow it (the process never stops), else checkpointed and restored with the new resources
(``core.backends.kubernetes.resize``); and the emulator's ``pods/resize`` refusing what
kube-apiserver refuses (``tests/k8s/emulator/resize.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from core.action_params import ResizeParams
from core.backends.kubernetes.backend import KubernetesBackend
from core.config import load_settings
from core.model import Action, RiskClass
from core.service.facade import Service, bootstrap
from tests.k8s.conftest import node, pod, wait_for, wrapped_pod
from tests.k8s.test_actions import PERSON, act, assert_intact, k8s_config, pods, running, step_of
from tests.k8s.test_actions import svc as svc

ROOT = Path(__file__).resolve().parents[2]
CLAWPOINT = str(Path(sys.executable).parent / "clawpoint")
GUARANTEED = {
    "limits": {"cpu": "1", "memory": "512Mi"},
    "requests": {"cpu": "1", "memory": "512Mi"},
}


def sized_pod(name: str, node_name: str, **spec: Any) -> dict[str, Any]:
    body = wrapped_pod(name, name)
    body["spec"]["containers"][0]["resources"] = json.loads(json.dumps(GUARANTEED))
    body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node_name}
    body["spec"]["containers"][0].update(spec)
    return body


@pytest.fixture
def home(tmp_path: Path, kubeconfig: Path, store_dir: Path) -> Path:
    """A home whose [k8s] section is the emulator; the default policy (disruptive plans of a
    person need --yes)."""
    path = tmp_path / "home"
    path.mkdir()
    (path / "config.toml").write_text(
        "[k8s]\nenabled = true\n"
        f"kubeconfig = {json.dumps(str(kubeconfig))}\n"
        'context = "emulator"\n'
        f"checkpoint_dir = {json.dumps(str(store_dir))}\n"
        "poll_interval_s = 0.1\nretry_total_s = 2\ncheckpoint_timeout_s = 60\nstart_timeout_s = 60\n"
    )
    return path


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CLAWPOINT_HOME": str(home), "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}  # fmt: skip
    return subprocess.run(
        [CLAWPOINT, *args], env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )  # fmt: skip


def mutations(emu: Any, since: int) -> list[str]:
    return [f"{r.method} {r.path}" for r in emu.requests[since:] if r.method != "GET" and "dryRun" not in str(r.query)]  # fmt: skip


def test_in_place_memory_grow_keeps_the_process_running(
    need_criu: None, emu: Any, kubelet: Any, home: Path
) -> None:
    emu.seed(sized_pod("grow", "n1"))
    wait_for("grow runs", lambda: running(emu, "grow"))
    before = wait_for("progress", lambda: (s := step_of(kubelet, "grow")) > 10 and s)
    pid = wait_for("grow runs", lambda: running(emu, "grow"))["status"]["containerStatuses"][0][
        "containerID"
    ]
    sent = len(emu.requests)
    # Safe (in place, giving more): no --yes needed, exit 0.
    done = cli(home, "resize", "k8s:Pod/default/grow", "--memory", "1Gi", "--json")
    assert done.returncode == 0, (done.stdout, done.stderr)
    out = json.loads(done.stdout)
    assert out["status"] == "executed", out
    assert [s["name"] for s in out["plan"]["steps"]] == ["resize", "wait_resized"]
    assert out["plan"]["risk"] == RiskClass.SAFE.value
    # Only the resize went out: no checkpoint (no exec), no pod created or deleted.
    assert mutations(emu, sent) == ["PATCH /api/v1/namespaces/default/pods/grow/resize"]
    now = running(emu, "grow")
    assert now is not None
    assert now["spec"]["containers"][0]["resources"]["limits"]["memory"] == "1Gi"
    assert now["status"]["containerStatuses"][0]["resources"]["limits"]["memory"] == "1Gi"
    assert now["status"]["containerStatuses"][0]["containerID"] == pid  # the same process
    assert set(pods(emu)) == {"grow"}
    wait_for("it keeps counting", lambda: step_of(kubelet, "grow") > before + 20)
    assert_intact(kubelet)


def test_a_gpu_class_change_moves_through_a_checkpoint_and_needs_approval(
    need_criu: None, emu: Any, kubelet: Any, home: Path, svc: Service
) -> None:
    label = "nvidia.com/gpu.product"
    n2 = emu.store.get(emu.store.kinds[("", "nodes")], "", "n2")
    n2["metadata"]["labels"][label] = "Tesla-T4"
    emu.store.update(emu.store.kinds[("", "nodes")], "", "n2", n2, api=False)
    emu.seed(node("n4", labels={label: "NVIDIA-A100-SXM4-80GB"}, gpus=1))
    kubelet.nodes.add("n4")
    body = sized_pod("gpu", "n2")
    res = body["spec"]["containers"][0]["resources"]
    res["limits"]["nvidia.com/gpu"] = res["requests"]["nvidia.com/gpu"] = "1"
    emu.seed(body)
    wait_for("gpu runs", lambda: running(emu, "gpu"))
    before = wait_for("progress", lambda: (s := step_of(kubelet, "gpu")) > 10 and s)
    sent = len(emu.requests)
    args = ("resize", "k8s:Pod/default/gpu", "--gpus", "1", "--gpu-class", "NVIDIA-A100-SXM4-80GB")
    refused = cli(home, *args, "--json")
    assert refused.returncode == 6, (refused.stdout, refused.stderr)  # approval required
    assert mutations(emu, sent) == [] and set(pods(emu)) == {"gpu"}

    result = act(
        svc, Action.RESIZE, "k8s:Pod/default/gpu", gpus=1, gpu_class="NVIDIA-A100-SXM4-80GB"
    )
    assert result.plan.risk is RiskClass.DISRUPTIVE
    steps = {s.name: s for s in result.execution.steps}
    assert "checkpoint" in steps and restored(steps)["node"] == "n4"
    wait_for("the old pod removed", lambda: "gpu" not in pods(emu))
    (name,) = pods(emu)
    spec = pods(emu)[name]["spec"]
    assert spec["nodeName"] == "n4" and spec["nodeSelector"][label] == "NVIDIA-A100-SXM4-80GB"
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    wait_for("progress on n4", lambda: step_of(kubelet, "gpu") > before + 10)
    assert_intact(kubelet)


def test_a_restart_container_policy_takes_the_checkpointed_path(
    need_criu: None, emu: Any, kubelet: Any, svc: Service
) -> None:
    policy = [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    emu.seed(sized_pod("jvm", "n1", resizePolicy=policy))
    wait_for("jvm runs", lambda: running(emu, "jvm"))
    before = wait_for("progress", lambda: (s := step_of(kubelet, "jvm")) > 10 and s)
    plan = svc.plan(Action.RESIZE, "k8s:Pod/default/jvm", {"memory": "1Gi"})
    assert plan.risk is RiskClass.DISRUPTIVE and "RestartContainer" in plan.summary
    result = act(svc, Action.RESIZE, "k8s:Pod/default/jvm", memory="1Gi")
    steps = {s.name: s for s in result.execution.steps}
    assert "checkpoint" in steps and restored(steps)["node"] == "n1"
    wait_for("the old pod removed", lambda: "jvm" not in pods(emu))
    (name,) = pods(emu)
    assert pods(emu)[name]["spec"]["containers"][0]["resources"]["limits"]["memory"] == "1Gi"
    wait_for("progress again", lambda: step_of(kubelet, "jvm") > before + 10)
    assert_intact(kubelet)


def test_an_old_server_takes_the_migrate_path(
    need_criu: None, emu: Any, kubelet: Any, svc: Service
) -> None:
    emu.version = {**emu.version, "minor": "32", "gitVersion": "v1.32.9"}
    emu.seed(sized_pod("old", "n3"))
    wait_for("old runs", lambda: running(emu, "old"))
    before = wait_for("progress", lambda: (s := step_of(kubelet, "old")) > 10 and s)
    plan = svc.plan(Action.RESIZE, "k8s:Pod/default/old", {"cpus": 2})
    assert "1.33" in plan.summary and plan.risk is RiskClass.DISRUPTIVE
    result = act(svc, Action.RESIZE, "k8s:Pod/default/old", cpus=2)
    assert not [r for r in emu.requests if r.path.endswith("/resize")]
    steps = {s.name: s for s in result.execution.steps}
    assert "checkpoint" in steps and restored(steps)["node"] == "n3"
    wait_for("the old pod removed", lambda: "old" not in pods(emu))
    (name,) = pods(emu)
    assert pods(emu)[name]["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "2"
    wait_for("progress again", lambda: step_of(kubelet, "old") > before + 10)
    assert_intact(kubelet)


def test_an_infeasible_resize_fails_the_plan_and_is_undone(
    need_criu: None, emu: Any, kubelet: Any, tmp_path: Path, monkeypatch: Any,
    kubeconfig: Path, store_dir: Path,
) -> None:  # fmt: skip
    # A pod of a namespace out of scope holds most of n1: the plan cannot see it (the
    # documented limit), the kubelet can, and answers the resize Infeasible.
    hog = pod("hog", "team-a", node="n1")
    hog["spec"]["containers"][0].update(
        command=["sleep", "600"], resources={"requests": {"cpu": "7"}}
    )
    emu.seed(hog, sized_pod("tight", "n1"))
    wait_for("tight runs", lambda: running(emu, "tight"))
    before = wait_for("progress", lambda: (s := step_of(kubelet, "tight")) > 10 and s)
    monkeypatch.setenv("CLAWPOINT_HOME", str(tmp_path / "scoped"))
    service = bootstrap(load_settings(tmp_path / "scoped"))
    backend = KubernetesBackend(k8s_config(kubeconfig, store_dir, namespaces=["default"]))
    service.backends["k8s"] = backend
    try:
        result = service.act(Action.RESIZE, "k8s:Pod/default/tight", {"cpus": 2}, principal=PERSON, confirmed=True)  # fmt: skip
    finally:
        backend.close()
    assert result.status == "failed", result
    assert "Infeasible" in str(result.message), result.message
    assert result.plan is not None
    assert [s.name for s in result.plan.steps] == ["resize", "wait_resized"]

    def undone() -> bool:
        now = running(emu, "tight") or {}
        conds = {c["type"] for c in (now.get("status") or {}).get("conditions") or []}
        limits = now["spec"]["containers"][0]["resources"]["limits"] if now else {}
        return limits.get("cpu") == "1" and "PodResizePending" not in conds

    wait_for("the resize undone and the pending condition cleared", undone)
    wait_for("it keeps counting", lambda: step_of(kubelet, "tight") > before + 20)
    assert set(pods(emu)) == {"tight"}
    assert_intact(kubelet)


def test_sizes_come_from_the_wrapped_container_and_the_gpu_label(
    emu: Any, kubeconfig: Path, store_dir: Path
) -> None:
    label = "nvidia.com/gpu.product"
    emu.seed(node("g1", labels={label: "NVIDIA-H100-80GB-HBM3"}, gpus=2))
    body = pod("sized", node="g1", phase="Running")
    body["spec"]["containers"][0]["resources"] = {
        "limits": {"cpu": "1500m", "memory": "3Gi", "nvidia.com/gpu": "1"},
        "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
    }
    emu.seed(body)
    backend = KubernetesBackend(k8s_config(kubeconfig, store_dir))
    try:
        w = backend.get_workload("k8s:Pod/default/sized")
        (g1,) = [n for n in backend.nodes() if n.name == "g1"]
    finally:
        backend.close()
    # The limits (what it may use), the GPU model of its node (compared case-insensitively).
    assert (w.cpus, w.memory_mb, w.gpus, w.gpu_class) == (1.5, 3072, 1, "nvidia-h100-80gb-hbm3")
    assert (g1.cpus, g1.memory_mb, g1.gpus, g1.gpu_class) == (8, 32768, 2, "NVIDIA-H100-80GB-HBM3")


def test_the_deployed_role_allows_the_in_place_resize_and_needs_its_rule(
    emu: Any, api: Any
) -> None:
    from core import errors
    from core.backends.kubernetes.config import KubernetesConfig
    from tests.k8s.test_deploy import NS, rules_from_manifests

    emu.namespace(NS)
    body = sized_pod("fit", "n1")
    body["metadata"]["namespace"] = NS
    body["spec"]["nodeName"] = "n1"
    running_status = [{"name": "main", "ready": True, "restartCount": 0, "image": "x", "imageID": "",
                       "state": {"running": {}}, "resources": GUARANTEED}]  # fmt: skip
    body["status"] = {"phase": "Running", "containerStatuses": running_status}
    emu.seed(node("n1"), body)
    emu.rules = rules_from_manifests()
    backend = KubernetesBackend(KubernetesConfig(namespaces=[NS], retry_total_s=1), api_client=api)
    draft = backend.plan(Action.RESIZE, f"Pod/{NS}/fit", ResizeParams(memory="1Gi"))
    (preview,) = draft.scope.dry_run or []
    assert preview["request"].startswith(f"PATCH Pod {NS}/fit/resize") and "object" in preview
    emu.rules = [r for r in emu.rules if "pods/resize" not in r.resources]
    with pytest.raises(errors.ClawpointError) as info:
        backend.plan(Action.RESIZE, f"Pod/{NS}/fit", ResizeParams(memory="1Gi"))
    assert info.value.code == "kubernetes-forbidden" and "pods/resize" in info.value.message


def test_the_wait_reads_each_resize_state(emu: Any, kubeconfig: Path, store_dir: Path) -> None:
    """``wait_resized`` as a kubelet reports a resize: PodResizeInProgress waits, the new
    resources applied end it, PodResizePending Deferred or Infeasible (or, before 1.33,
    ``status.resize``) fail it, naming the reason."""
    import threading

    from core import errors
    from core.backends.kubernetes import resize

    pods_kind = emu.store.kinds[("", "pods")]
    big = {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "2", "memory": "1Gi"}}
    _running_pod(emu, "w", json.loads(json.dumps(GUARANTEED)))
    backend = KubernetesBackend(k8s_config(kubeconfig, store_dir))
    args = {
        "namespace": "default",
        "name": "w",
        "container": "main",
        "resources": big,
        "timeout_s": 10,
    }

    def report(**status_update: Any) -> None:
        st = emu.store.get(pods_kind, "default", "w")["status"]
        st.update(status_update)
        emu.store.set_status(pods_kind, "default", "w", st)

    try:
        report(conditions=[{"type": "PodResizeInProgress", "status": "True"}])
        later = threading.Timer(0.5, lambda: report(
            conditions=[], containerStatuses=[{**emu.store.get(pods_kind, "default", "w")["status"]["containerStatuses"][0], "resources": big}],
        ))  # fmt: skip
        later.start()
        done = resize.run_wait_resized(backend, args, lambda *a: None)
        later.join()
        assert done["resources"] == big
        for reason in ("Deferred", "Infeasible"):
            report(conditions=[{"type": "PodResizePending", "status": "True", "reason": reason, "message": "no room"}])  # fmt: skip
            with pytest.raises(errors.OperationFailed) as info:
                resize.run_wait_resized(backend, {**args, "resources": {"limits": {"cpu": "3"}}}, lambda *a: None)  # fmt: skip
            assert info.value.code == f"kubernetes-resize-{reason.lower()}"
        report(conditions=[], resize="Infeasible")  # the field before 1.33
        with pytest.raises(errors.OperationFailed, match="Infeasible"):
            resize.run_wait_resized(backend, {**args, "resources": {"limits": {"cpu": "3"}}}, lambda *a: None)  # fmt: skip
    finally:
        backend.close()


# ----- the emulator's pods/resize: what kube-apiserver refuses ----------------------------
def _running_pod(emu: Any, name: str, resources: dict[str, Any]) -> None:
    body = pod(name, node="n1", phase="Running")
    body["spec"]["containers"][0]["resources"] = resources
    body["status"]["containerStatuses"] = [
        {"name": "main", "ready": True, "restartCount": 0, "image": "busybox", "imageID": "",
         "state": {"running": {}}, "resources": resources}
    ]  # fmt: skip
    emu.seed(body)


def _refusal(fn: Any) -> str:
    with pytest.raises(ApiException) as info:
        fn()
    assert info.value.status == 422, info.value.body
    return str(json.loads(str(info.value.body))["message"])


def test_the_emulator_refuses_what_upstream_refuses(emu: Any, api: Any) -> None:
    core = client.CoreV1Api(api)
    _running_pod(emu, "p", json.loads(json.dumps(GUARANTEED)))
    resize = core.patch_namespaced_pod_resize

    def patch(resources: dict[str, Any]) -> Any:
        return {"spec": {"containers": [{"name": "main", "resources": resources}]}}

    # The QoS class may not change: Guaranteed -> Burstable (a request below its limit).
    msg = _refusal(lambda: resize("p", "default", patch({"requests": {"cpu": "500m"}})))
    assert "Pod QOS Class may not change as a result of resizing" in msg
    # Only cpu and memory: a GPU (or any other resource) is not resized in place.
    msg = _refusal(lambda: resize("p", "default", patch({"limits": {"nvidia.com/gpu": "1"}})))
    assert "only cpu and memory resources are mutable" in msg
    # A memory limit is not lowered under resizePolicy NotRequired.
    small = {"limits": {"memory": "256Mi"}, "requests": {"memory": "256Mi"}}
    msg = _refusal(lambda: resize("p", "default", patch(small)))
    assert "memory limits cannot be decreased unless resizePolicy is RestartContainer" in msg
    # A plain pod update may not change resources at all.
    msg = _refusal(
        lambda: core.patch_namespaced_pod("p", "default", patch({"limits": {"cpu": "2"}}))
    )
    assert "pod updates may not change fields" in msg
    # What it takes: cpu and memory up together, the class kept.
    big = {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "2", "memory": "1Gi"}}
    got = core.patch_namespaced_pod_resize("p", "default", patch(big))
    assert got.to_dict()["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "2",
        "memory": "1Gi",
    }
    # A kubelet that does not report container resources: no resize on that node.
    _running_pod(emu, "q", json.loads(json.dumps(GUARANTEED)))
    q = emu.store.get(emu.store.kinds[("", "pods")], "default", "q")
    del q["status"]["containerStatuses"][0]["resources"]
    emu.store.set_status(emu.store.kinds[("", "pods")], "default", "q", q["status"])
    msg = _refusal(lambda: resize("q", "default", patch(big)))
    assert "Pod running on node without support for resize" in msg


def test_an_old_server_does_not_serve_pods_resize(emu: Any, api: Any) -> None:
    core = client.CoreV1Api(api)
    assert "pods/resize" in {r.name for r in core.get_api_resources().resources}
    emu.version = {**emu.version, "minor": "32", "gitVersion": "v1.32.9"}
    assert "pods/resize" not in {r.name for r in core.get_api_resources().resources}
    _running_pod(emu, "p", json.loads(json.dumps(GUARANTEED)))
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_pod_resize("p", "default", {"spec": {}})
    assert info.value.status == 404


def restored(steps: dict[str, Any]) -> dict[str, Any]:
    """Where the moved pod runs: a live move's ``takeover`` (a bare pod, restartPolicy
    Never: tests/k8s/test_live_moves.py), else the ordinary move's ``wait_restored``."""
    done = steps.get("takeover") or steps["wait_restored"]
    return dict(done.output)
