"""The live suite: the same scenarios against a real cluster (kind, k3s, a cloud cluster).

Runs only with ``-m live_k8s`` and ``KUBECONFIG`` set; otherwise every test here is skipped.
What the cluster needs (docs/kubernetes.md, "The live suite"):

- ``CLAWPOINT_LIVE_IMAGE``: an image with clawpoint and CRIU installed (the wrapper runs in
  it as the container entrypoint);
- ``CLAWPOINT_LIVE_NAMESPACE`` (default ``clawpoint-live``): created if missing, deleted at
  the end; the kubeconfig's identity must be allowed what deploy/kubernetes/rbac.yaml grants,
  plus creating namespaces, ConfigMaps, PVCs, Jobs, Deployments and PDBs there;
- ``CLAWPOINT_LIVE_STORAGE_CLASS``: a ReadWriteMany storage class for the checkpoint volume;
- at least two schedulable nodes (migrate and drain move pods between them).
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = "live_k8s" in (config.getoption("-m") or "")
    for item in items:
        if "live_k8s" not in item.keywords:
            continue
        if not selected:
            item.add_marker(pytest.mark.skip(reason="live Kubernetes suite: run with -m live_k8s"))
        elif not os.environ.get("KUBECONFIG"):
            item.add_marker(pytest.mark.skip(reason="live Kubernetes suite: set KUBECONFIG"))
        elif not os.environ.get("CLAWPOINT_LIVE_IMAGE"):
            item.add_marker(
                pytest.mark.skip(reason="live Kubernetes suite: set CLAWPOINT_LIVE_IMAGE")
            )
