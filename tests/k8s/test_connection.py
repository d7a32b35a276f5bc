"""The backend's connection: kubeconfig and context, retries, and API failures as core errors."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.backends.kubernetes.config import KubernetesConfig
from core.backends.kubernetes.connection import Connection, Op
from tests.k8s.conftest import pod
from tests.k8s.emulator import Emulator, Rule


def list_pods(conn: Connection, ns: str = "default") -> list[dict[str, Any]]:
    core = conn.api("CoreV1Api")
    return list(conn.list_all(Op("list", "pods", namespace=ns), core.list_namespaced_pod, ns))


def test_kubeconfig_path_and_context_reach_the_cluster_with_its_token(
    emu: Emulator, conn: Connection
) -> None:
    emu.seed(pod("a"))
    assert [p["metadata"]["name"] for p in list_pods(conn)] == ["a"]
    assert conn.host == emu.url


def test_unknown_context_is_a_config_error(kubeconfig: Path) -> None:
    conn = Connection(KubernetesConfig(kubeconfig=str(kubeconfig), context="nope"))
    with pytest.raises(errors.InvalidInput) as info:
        conn.api("CoreV1Api")
    assert info.value.code == "kubernetes-config" and "nope" in info.value.message
    assert "kubectl config get-contexts" in info.value.hint


def test_missing_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    conn = Connection(KubernetesConfig(kubeconfig=str(tmp_path / "absent")))
    with pytest.raises(errors.InvalidInput) as info:
        conn.api("CoreV1Api")
    assert info.value.code == "kubernetes-config"


def test_not_in_a_cluster_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    conn = Connection(KubernetesConfig(in_cluster=True))
    with pytest.raises(errors.InvalidInput) as info:
        conn.api("CoreV1Api")
    assert "in-cluster" in info.value.message


def test_namespaces_in_scope_are_validated() -> None:
    with pytest.raises(errors.InvalidInput):
        KubernetesConfig(namespaces=["ok", "../etc"])
    assert Connection(KubernetesConfig(namespaces=["a", "b"])).scoped_namespaces == ["a", "b"]
    assert Connection(KubernetesConfig()).scoped_namespaces is None


def test_expired_credentials_are_reported_with_a_refresh_hint(
    emu: Emulator, conn: Connection
) -> None:
    emu.token = "rotated"  # the kubeconfig's token is no longer accepted
    with pytest.raises(errors.BackendUnavailable) as info:
        list_pods(conn)
    assert info.value.code == "kubernetes-unauthorized" and "401" in info.value.message
    assert "refresh" in info.value.hint


def test_rbac_denial_names_the_verb_resource_and_namespace(emu: Emulator, conn: Connection) -> None:
    emu.rules = [Rule(verbs=("list",), resources=("pods",), namespaces=("team-a",))]
    assert list_pods(conn, "team-a") == []
    with pytest.raises(errors.OperationFailed) as info:
        list_pods(conn, "default")
    err = info.value
    assert err.code == "kubernetes-forbidden"
    assert "refused to list pods in namespace 'default'" in err.message
    assert (
        'User "system:serviceaccount:clawpoint:clawpoint" cannot list resource "pods"'
        in err.message
    )
    assert '"pods"' in err.hint and '"list"' in err.hint and "'default'" in err.hint
    assert err.details["verb"] == "list" and err.details["namespace"] == "default"


def test_transient_faults_are_retried(emu: Emulator, conn: Connection) -> None:
    emu.seed(pod("a"))
    emu.fail_next(503, times=2)
    emu.fail_next(500, times=1)
    before = len(emu.requests)
    assert [p["metadata"]["name"] for p in list_pods(conn)] == ["a"]
    assert len(emu.requests) - before == 4


def test_a_create_throttled_with_429_is_retried_after_retry_after(
    emu: Emulator, conn: Connection
) -> None:
    emu.fail_next(429, method="POST")
    core = conn.api("CoreV1Api")
    made = conn.call(
        Op("create", "pods", namespace="default"), core.create_namespaced_pod, "default", pod("a")
    )
    assert made.metadata.name == "a"
    assert [r.method for r in emu.requests[-2:]] == ["POST", "POST"]


def test_a_budget_refusal_is_not_retried_and_not_forced(emu: Emulator, conn: Connection) -> None:
    from kubernetes import client

    emu.seed(
        pod("web-0", labels={"app": "web"}, phase="Running", ready=True),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    core = conn.api("CoreV1Api")
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name="web-0", namespace="default"))
    before = len(emu.requests)
    with pytest.raises(errors.Conflict) as info:
        conn.call(
            Op("create", "pods/eviction", namespace="default", name="web-0"),
            core.create_namespaced_pod_eviction,
            "web-0",
            "default",
            body,
        )
    assert info.value.code == "kubernetes-disruption-budget"
    assert "needs 1 healthy pods and has 1 currently" in info.value.message
    assert len(emu.requests) - before == 1
    assert [p["metadata"]["name"] for p in list_pods(conn)] == ["web-0"]


def test_not_found_and_conflict(emu: Emulator, conn: Connection) -> None:
    core = conn.api("CoreV1Api")
    with pytest.raises(errors.NotFound):
        conn.call(
            Op("get", "pods", namespace="default", name="x"),
            core.read_namespaced_pod,
            "x",
            "default",
        )
    emu.seed(pod("a"))
    with pytest.raises(errors.Conflict) as info:
        conn.call(
            Op("create", "pods", namespace="default"),
            core.create_namespaced_pod,
            "default",
            pod("a"),
        )
    assert info.value.code == "kubernetes-alreadyexists"


def test_an_unreachable_api_is_backend_unavailable_within_the_retry_bound(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    dead = Emulator()
    dead.url = f"http://127.0.0.1:{port}"
    path = dead.kubeconfig(tmp_path / "kc", context="dead")
    conn = Connection(KubernetesConfig(kubeconfig=str(path), context="dead", retry_total_s=0.5))
    with pytest.raises(errors.BackendUnavailable) as info:
        list_pods(conn)
    assert info.value.code == "kubernetes-unreachable"
    assert f"127.0.0.1:{port}" in info.value.message and "kubectl cluster-info" in info.value.hint


def test_a_tls_failure_is_reported_with_a_ca_hint(emu: Emulator, tmp_path: Path) -> None:
    import yaml

    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        # The emulator speaks plain HTTP: the TLS handshake fails.
        "clusters": [{"name": "c", "cluster": {"server": emu.url.replace("http://", "https://")}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "tls", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "tls",
    }
    path = tmp_path / "kc"
    path.write_text(yaml.safe_dump(doc))
    conn = Connection(KubernetesConfig(kubeconfig=str(path), retry_total_s=0.5))
    with pytest.raises(errors.BackendUnavailable) as info:
        list_pods(conn)
    assert info.value.code == "kubernetes-connection" and "certificate-authority" in info.value.hint
