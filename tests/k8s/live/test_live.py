"""Live scenarios (see conftest): inventory, dry-run previews, scale with a floor, preempt
and resume of a wrapped Job keeping progress, migrate of a wrapped pod between nodes, drain
honouring a PodDisruptionBudget, and the kubelet checkpoint API probe, through the service.

Progress is read from the wrapper itself (``incontainer status`` through pods/exec), since
the pods' files are not reachable from here."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.backends.kubernetes import pods, steps
from core.backends.kubernetes.backend import KubernetesBackend
from core.backends.kubernetes.config import KubernetesConfig
from core.backends.kubernetes.connection import Op
from core.config import load_settings
from core.model import Action, Principal, PrincipalKind
from core.service.facade import Service, bootstrap
from tests.k8s.conftest import (
    KEY_CLAIM,
    KEY_FILE,
    OLD_CONTAINER_SECURITY_CONTEXT,
    wrapped_job,
    wrapped_pod,
)

pytestmark = pytest.mark.live_k8s
PERSON = Principal(id="live-tester", kind=PrincipalKind.PERSON)
NS = os.environ.get("CLAWPOINT_LIVE_NAMESPACE", "clawpoint-live")
IMAGE = os.environ.get("CLAWPOINT_LIVE_IMAGE", "")
# The longest single wait (a pod starting, progress showing): short, so a stuck test fails
# in minutes rather than hanging.
WAIT_S = float(os.environ.get("CLAWPOINT_LIVE_WAIT_S", "120"))
# "key=value": only nodes with this label take test pods (kind-live.sh labels its workers);
# without it, every schedulable node without a NoSchedule/NoExecute taint.
NODE_LABEL = os.environ.get("CLAWPOINT_LIVE_NODE_LABEL", "")


def live_spec(obj: dict[str, Any]) -> dict[str, Any]:
    """The emulator tests' wrapped manifests, with the live image and namespace, on workers."""
    obj["metadata"]["namespace"] = NS
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
    spec["containers"][0]["image"] = IMAGE
    # `kind load` puts the image on the nodes; never pull it (a registry has no such tag).
    spec["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    if NODE_LABEL:
        key, _, value = NODE_LABEL.partition("=")
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), key: value}
    return obj


def sleeper(labels: dict[str, str]) -> dict[str, Any]:
    """A pod template that only sleeps, from the live image (nothing to pull)."""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "c",
                "image": IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "infinity"],
            }
        ],
        "terminationGracePeriodSeconds": 5,
    }
    if NODE_LABEL:
        key, _, value = NODE_LABEL.partition("=")
        spec["nodeSelector"] = {key: value}
    return {"metadata": {"labels": labels}, "spec": spec}


def worker_nodes(b: KubernetesBackend) -> list[str]:
    """Nodes a test may put pods on: schedulable, no NoSchedule/NoExecute taint (kind's
    control-plane has one), and the NODE_LABEL when set."""
    out = []
    for n in b.conn.api("CoreV1Api").list_node().items:
        labels = n.metadata.labels or {}
        if n.spec.unschedulable or "node-role.kubernetes.io/control-plane" in labels:
            continue
        if any(t.effect in ("NoSchedule", "NoExecute") for t in n.spec.taints or []):
            continue
        if NODE_LABEL:
            key, _, value = NODE_LABEL.partition("=")
            if labels.get(key) != value:
                continue
        out.append(n.metadata.name)
    return sorted(out)


def ignore_conflict(create: Any, *args: Any) -> None:
    """Create, or keep what is there (409): setup is safe to repeat."""
    try:
        create(*args)
    except Exception as exc:
        if getattr(exc, "status", None) != 409:
            raise


@pytest.fixture(scope="module")
def backend() -> Iterator[KubernetesBackend]:
    b = KubernetesBackend(
        KubernetesConfig(enabled=True, namespaces=[NS], poll_interval_s=1, retry_total_s=30)
    )
    core = b.conn.api("CoreV1Api")
    # A namespace still terminating from an earlier run refuses new objects: wait it out.
    wait_for(
        f"namespace {NS} from an earlier run to go",
        lambda: not [
            n for n in core.list_namespace().items
            if n.metadata.name == NS and n.metadata.deletion_timestamp
        ],
    )  # fmt: skip
    # The workload pods pass Pod Security baseline (docs/kubernetes.md).
    labels = {
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    ignore_conflict(core.create_namespace, {"metadata": {"name": NS, "labels": labels}})
    sc = os.environ.get("CLAWPOINT_LIVE_STORAGE_CLASS")
    pvc: dict[str, Any] = {
        "metadata": {"name": "clawpoint-checkpoints"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "5Gi"}}},
    }
    if sc:
        pvc["spec"]["storageClassName"] = sc
    ignore_conflict(core.create_namespaced_persistent_volume_claim, NS, pvc)
    keys = {**pvc, "metadata": {"name": KEY_CLAIM}}  # the wrappers' manifest key, outside the store
    ignore_conflict(core.create_namespaced_persistent_volume_claim, NS, keys)
    ignore_conflict(
        core.create_namespaced_config_map,
        NS,
        {
            "metadata": {"name": "clawpoint-wrapper"},
            "data": {"config.toml": f'[store]\npath = "/checkpoints"\nkey = "{KEY_FILE}"\n'},
        },
    )
    yield b
    try:
        core.delete_namespace(NS)
    except Exception as exc:  # already gone
        if getattr(exc, "status", None) != 404:
            raise
    b.close()


@pytest.fixture
def svc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: KubernetesBackend) -> Service:
    monkeypatch.setenv("CLAWPOINT_HOME", str(tmp_path / "home"))
    service = bootstrap(load_settings(tmp_path / "home"))
    service.backends["k8s"] = backend  # type: ignore[assignment]
    return service


def wait_for(what: str, check: Any, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


def running_pods(b: KubernetesBackend, selector: str) -> list[dict[str, Any]]:
    return [
        p
        for p in b.list_pods(NS, label_selector=selector)
        if (p.get("status") or {}).get("phase") == "Running" and pods.live(p)
    ]


def step_of(b: KubernetesBackend, selector: str, lineage: str) -> int:
    for p in running_pods(b, selector):
        code, out, _ = steps.exec_in(
            b, NS, p["metadata"]["name"], pods.container_of(p),
            [*b.cfg.exec_python, "-m", "core.backends.kubernetes.incontainer", "status", lineage],
            60,
        )  # fmt: skip
        if code == 0:
            progress = json.loads(out.strip().splitlines()[-1]).get("progress") or {}
            return int(progress.get("step", -1))
    return -1


def act(svc: Service, action: Action, target: str, **params: Any) -> Any:
    result = svc.act(action, target, params, principal=PERSON, confirmed=True)
    assert result.status == "executed", result.message
    return result


def test_inventory_and_probe(backend: KubernetesBackend) -> None:
    nodes = backend.nodes()
    assert nodes, "the cluster has nodes"
    backend.workloads()
    backend.queue_depth()


def test_scale_with_floor_and_dry_run(backend: KubernetesBackend, svc: Service) -> None:
    apps = backend.conn.api("AppsV1Api")
    apps.create_namespaced_deployment(
        NS,
        {
            "metadata": {"name": "floor", "annotations": {"clawpoint.io/min-replicas": "1"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "floor"}},
                "template": sleeper({"app": "floor"}),
            },
        },
    )
    with pytest.raises(errors.PolicyDenied):
        svc.plan(Action.SCALE, f"k8s:Deployment/{NS}/floor", {"replicas": 0})
    preview = svc.act(
        Action.SCALE, f"k8s:Deployment/{NS}/floor", {"replicas": 1}, principal=PERSON, dry_run=True
    )
    assert preview.plan and preview.plan.scope.dry_run[0]["object"]["spec"]["replicas"] == 1
    act(svc, Action.SCALE, f"k8s:Deployment/{NS}/floor", replicas=1)
    got = backend.conn.call_json(
        Op("get", "deployments", "apps", NS), apps.read_namespaced_deployment, "floor", NS
    )
    assert got["spec"]["replicas"] == 1


def test_preempt_then_resume_job_keeps_progress(backend: KubernetesBackend, svc: Service) -> None:
    backend.conn.api("BatchV1Api").create_namespaced_job(
        NS, live_spec(wrapped_job("live-train", "live-train"))
    )
    sel = "batch.kubernetes.io/job-name=live-train"
    wait_for("progress", lambda: step_of(backend, sel, "live-train") > 50)
    act(svc, Action.PREEMPT, f"k8s:Job/{NS}/live-train")
    assert not running_pods(backend, sel)
    resumed = act(svc, Action.RESUME, f"k8s:Job/{NS}/live-train")
    assert resumed.execution.steps[-1].output["restored_from"].startswith("live-train@")
    assert step_of(backend, sel, "live-train") > 50


def test_migrate_wrapped_pod_to_another_node(backend: KubernetesBackend, svc: Service) -> None:
    core = backend.conn.api("CoreV1Api")
    core.create_namespaced_pod(NS, live_spec(wrapped_pod("live-mover", "live-mover")))
    pod = wait_for("it runs", lambda: running_pods(backend, "app=live-mover"))[0]
    source = pod["spec"]["nodeName"]
    before = wait_for(
        "progress", lambda: (s := step_of(backend, "app=live-mover", "live-mover")) > 50 and s
    )
    others = [n for n in worker_nodes(backend) if n != source]
    if not others:
        pytest.skip("migrate needs a second schedulable node")
    act(svc, Action.MIGRATE, f"k8s:Pod/{NS}/live-mover", to=others[0])
    (new,) = running_pods(backend, "app=live-mover")
    assert new["spec"]["nodeName"] == others[0]
    assert step_of(backend, "app=live-mover", "live-mover") >= before


def test_drain_honours_a_pdb(backend: KubernetesBackend, svc: Service) -> None:
    nodes = worker_nodes(backend)
    if len(nodes) < 2:
        pytest.skip("drain needs a second worker node")
    target = nodes[0]
    # A controller's pod (a drain refuses a bare one without force, as kubectl drain does)
    template = sleeper({"app": "guarded"})
    template["spec"]["nodeSelector"] = {
        **template["spec"].get("nodeSelector", {}),
        "kubernetes.io/hostname": target,  # a worker, never the control-plane
    }
    guarded = {
        "metadata": {"name": "guarded", "labels": {"app": "guarded"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "guarded"}},
            "template": template,
        },
    }
    backend.conn.api("AppsV1Api").create_namespaced_deployment(NS, guarded)
    backend.conn.api("PolicyV1Api").create_namespaced_pod_disruption_budget(
        NS,
        {
            "metadata": {"name": "guarded"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    wait_for("guarded runs", lambda: running_pods(backend, "app=guarded"))
    preview = svc.act(Action.DRAIN_NODE, f"k8s:{target}", {}, principal=PERSON, dry_run=True)
    assert any(e.get("refused") for e in preview.plan.scope.dry_run)
    try:
        result = svc.act(Action.DRAIN_NODE, f"k8s:{target}", {}, principal=PERSON, confirmed=True)
        assert result.status == "failed" and "budget" in result.message.lower()
        assert running_pods(backend, "app=guarded"), "never forced"
    finally:
        act(svc, Action.UNDRAIN_NODE, f"k8s:{target}")


def test_pod_security_refuses_the_old_capabilities_and_admits_the_documented_spec(
    backend: KubernetesBackend,
) -> None:
    """The real admission plugin agrees with the emulator's (tests/k8s/test_admission.py)."""
    core = backend.conn.api("CoreV1Api")
    old = live_spec(wrapped_pod("live-old-caps", "live-old-caps"))
    old["spec"].pop("hostUsers")
    old["spec"].pop("securityContext")
    old["spec"]["containers"][0]["securityContext"] = dict(OLD_CONTAINER_SECURITY_CONTEXT)
    with pytest.raises(Exception) as info:
        core.create_namespaced_pod(NS, old, dry_run="All")
    assert getattr(info.value, "status", None) == 403
    assert "non-default capabilities" in str(getattr(info.value, "body", ""))
    core.create_namespaced_pod(NS, live_spec(wrapped_pod("live-new", "live-new")), dry_run="All")
