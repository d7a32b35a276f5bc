"""Fixtures for the Kubernetes tests: a fresh API emulator per test, and the official client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.k8s.emulator import Emulator


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as server:
        server.namespace("default", "team-a")
        yield server
        assert not server.crashes, f"the emulator failed inside: {server.crashes}"


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
    from core.backends.kubernetes.connection import Connection, KubernetesConfig

    connection = Connection(
        KubernetesConfig(kubeconfig=str(kubeconfig), context="emulator", retry_total_s=3)
    )
    yield connection
    connection.close()
