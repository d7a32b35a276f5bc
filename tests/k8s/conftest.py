"""Fixtures for the Kubernetes tests: a fresh API emulator per test, and the official client."""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.k8s.emulator import Emulator
from tests.k8s.emulator.schema import KUBERNETES_VERSION
from tests.service.conftest import need_criu  # noqa: F401 (the wrapped pods checkpoint with CRIU)


@pytest.fixture
def emu() -> Iterator[Emulator]:
    # Every object a test's client creates, replaces or patches is checked against the schema
    # of the Kubernetes version the docs name (emulator/schema.py); a violation fails the
    # request and, below, the test, even where the test expected the request to fail.
    with Emulator(schema_version=KUBERNETES_VERSION) as server:
        server.namespace("default", "team-a")
        yield server
        assert not server.crashes, f"the emulator failed inside: {server.crashes}"
        assert not server.schema_violations, (
            f"objects sent that the Kubernetes {KUBERNETES_VERSION} schema refuses: "
            f"{server.schema_violations}"
        )


@pytest.fixture
def api(emu: Emulator) -> Any:
    """An ``ApiClient`` of the official ``kubernetes`` package, pointed at the emulator."""
    client = emu.api_client()
    yield client
    client.close()


def pod(
    name: str,
    namespace: str = "default",
    *,
    labels: dict[str, str] | None = None,
    node: str | None = None,
    phase: str | None = None,
    ready: bool = False,
    gpus: int = 0,
) -> dict[str, Any]:
    """A pod manifest (with a status, for ``Emulator.seed``)."""
    container: dict[str, Any] = {"name": "main", "image": "busybox"}
    if gpus:
        container["resources"] = {
            "limits": {"nvidia.com/gpu": str(gpus)},
            "requests": {"nvidia.com/gpu": str(gpus)},
        }
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [container]},
    }
    if node:
        body["spec"]["nodeName"] = node
    if phase:
        body["status"] = {"phase": phase}
        if ready:
            body["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return body


@pytest.fixture
def kubeconfig(emu: Emulator, tmp_path: Any) -> Any:
    """A kubeconfig file for the emulator (context ``emulator``); the emulator checks the token."""
    emu.token = "t0ken"
    return emu.kubeconfig(tmp_path / "kubeconfig", context="emulator", token="t0ken")


@pytest.fixture
def conn(kubeconfig: Any) -> Iterator[Any]:
    """A ``Connection`` of the backend, configured the way a user would: kubeconfig + context."""
    from core.backends.kubernetes.config import KubernetesConfig
    from core.backends.kubernetes.connection import Connection

    connection = Connection(
        KubernetesConfig(kubeconfig=str(kubeconfig), context="emulator", retry_total_s=3)
    )
    yield connection
    connection.close()


# ----- a cluster whose pods run: nodes, a checkpoint volume and the fake kubelet ----------
WRAPPER_CONFIG = "clawpoint-wrapper"
CHECKPOINT_CLAIM = "clawpoint-checkpoints"
# The volume holding the key that signs the workload's manifests: it must outlive every pod of
# the workload (each pod's wrapper signs and verifies with it) and lie outside the store.
KEY_CLAIM = "clawpoint-keys"
KEY_MOUNT = "/var/lib/clawpoint-keys"
# The key lies in a directory the wrapper creates (mode 0700, its own): the volume's root
# belongs to root and the fsGroup, which the wrapper refuses to keep a key in.
KEY_FILE = f"{KEY_MOUNT}/wrapper/store.key"


def node(
    name: str, *, labels: dict[str, str] | None = None, gpus: int = 0, ready: bool = True
) -> dict[str, Any]:
    """A Node manifest with a status (Ready or not), for ``Emulator.seed``."""
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **(labels or {})},
        },
        "spec": {},
        "status": {
            "capacity": dict(alloc),
            "allocatable": dict(alloc),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


# The documented privilege model (docs/kubernetes.md "securityContext for CRIU"): a pod user
# namespace, an unmasked /proc, no capability at all, no privilege escalation, a non-root uid.
# No seccomp profile: CRIU cannot stop a process under any seccomp filter without
# CAP_SYS_ADMIN in the node's user namespace (PTRACE_O_SUSPEND_SECCOMP, kernel/ptrace.c), so
# the pod passes Pod Security "baseline", not "restricted" (which requires a profile).
RUN_AS = 1000
POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUN_AS,
    "runAsGroup": RUN_AS,
    "fsGroup": RUN_AS,
    # Set the volumes' group once, not at every start: a recursive change would make the
    # wrapper's 0600 key group-readable, which it refuses (pkg/volume/volume_linux.go).
    "fsGroupChangePolicy": "OnRootMismatch",
}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "procMount": "Unmasked",
}
# What the docs said before: root, the runtime's default capabilities plus these two, the
# runtime's default seccomp profile. A real runtime refuses the wrapper's namespaces there.
OLD_CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "capabilities": {"add": ["CHECKPOINT_RESTORE", "SYS_PTRACE"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def wrapped_spec(lineage: str, *, mb: int = 8, grace_s: int = 30) -> dict[str, Any]:
    """A pod spec running the self-checking counter under the clawpoint wrapper, with the
    checkpoint volume (a PVC) mounted at /checkpoints and the wrapper's config from a
    ConfigMap; the documented securityContext (``hostUsers: false`` and the rest above)."""
    return {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": grace_s,
        "hostUsers": False,
        "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
        "containers": [
            {
                "name": "main",
                "image": "ghcr.io/example/clawpoint-job:latest",
                "command": ["clawpoint", "run", "--name", lineage, "--"],
                # CRIU's parasite makes its /proc mount point in the payload's working
                # directory (criu/pie/parasite.c get_proc_fd): it must be writable by the
                # pod's user.
                "workingDir": "/tmp",
                "args": [
                    "python",
                    "-m",
                    "core.workloads.counter",
                    "--state-mb",
                    str(mb),
                    "--step-seconds",
                    "0.02",
                ],
                "env": [
                    # A directory of its own inside the emptyDir: the wrapper makes its home 0700,
                    # which it may do only to a directory it owns (the emptyDir is root's, 0777).
                    {"name": "CLAWPOINT_HOME", "value": "/var/lib/clawpoint/home"},
                    {"name": "CLAWPOINT_CONFIG", "value": "/etc/clawpoint/config.toml"},
                ],
                "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
                "volumeMounts": [
                    {"name": "checkpoints", "mountPath": "/checkpoints"},
                    {"name": "config", "mountPath": "/etc/clawpoint"},
                    {"name": "home", "mountPath": "/var/lib/clawpoint"},
                    {"name": "keys", "mountPath": KEY_MOUNT},
                ],
            }
        ],
        "volumes": [
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": CHECKPOINT_CLAIM}},
            {"name": "config", "configMap": {"name": WRAPPER_CONFIG}},
            {"name": "home", "emptyDir": {}},
            {"name": "keys", "persistentVolumeClaim": {"claimName": KEY_CLAIM}},
        ],
    }


def wrapped_meta(
    name: str, lineage: str, namespace: str = "default", **labels: str
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "labels": {"app": lineage, **labels},
        "annotations": {"clawpoint.io/lineage": lineage, "clawpoint.io/engine": "criu"},
    }


def wrapped_pod(name: str, lineage: str, namespace: str = "default", **kw: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": wrapped_meta(name, lineage, namespace),
        "spec": wrapped_spec(lineage, **kw),
    }


def wrapped_job(name: str, lineage: str, namespace: str = "default", **kw: Any) -> dict[str, Any]:
    meta = wrapped_meta(name, lineage, namespace)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": meta["labels"], "annotations": meta["annotations"]},
                "spec": wrapped_spec(lineage, **kw),
            },
        },
    }


@pytest.fixture
def store_dir(tmp_path: Any) -> Any:
    """The host directory standing in for the checkpoint PVC (ReadWriteMany)."""
    path = tmp_path / "pvc"
    path.mkdir()
    return path


@pytest.fixture
def kubelet(emu: Emulator, tmp_path: Any, store_dir: Any) -> Iterator[Any]:
    """Nodes n1, n2, n3 (n2 a GPU spot node), the wrapper's ConfigMap, and the fake kubelet."""
    from tests.k8s.kubelet import FakeKubelet

    if os.geteuid() != 0:
        pytest.skip(
            "the fake kubelet starts containers as a runtime does (namespaces, mounts, "
            "privileges): run the tests as root (make test does)"
        )
    key_dir = tmp_path / "keys"
    key_dir.mkdir(mode=0o700)
    # The node's seccomp directory (the kubelet's <root-dir>/seccomp), for Localhost profiles.
    seccomp_root = tmp_path / "seccomp"
    (seccomp_root / "profiles").mkdir(parents=True)

    emu.seed(
        node("n1", labels={"karpenter.sh/capacity-type": "on-demand"}),
        node("n2", labels={"karpenter.sh/capacity-type": "spot"}, gpus=1),
        node("n3", labels={"karpenter.sh/capacity-type": "on-demand"}),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": WRAPPER_CONFIG, "namespace": "default"},
            "data": {"config.toml": f'[store]\npath = "/checkpoints"\nkey = "{KEY_FILE}"\n'},
        },
    )
    fake = FakeKubelet(
        emu,
        tmp_path / "pods",
        nodes=["n1", "n2", "n3"],
        volumes={CHECKPOINT_CLAIM: store_dir, KEY_CLAIM: key_dir},
        seccomp_root=seccomp_root,
    )
    with fake:
        yield fake
    assert not fake.errors, f"the fake kubelet failed: {fake.errors}"


def wait_for(what: str, check: Any, timeout_s: float = 60) -> Any:
    """``check()``'s first truthy value, polled every 50 ms; fails naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
