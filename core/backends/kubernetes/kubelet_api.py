"""The kubelet checkpoint API (KEP-2008), reached through the API server's node proxy.

``POST /api/v1/nodes/NODE/proxy/checkpoint/NAMESPACE/POD/CONTAINER?timeout=N`` asks the
node's kubelet for a checkpoint archive of one container (RBAC: ``nodes/proxy``, and on
newer clusters ``nodes/checkpoint``). It writes a tar under ``/var/lib/kubelet/checkpoints``
on that node: a forensic / export copy, not something clawpoint restores from.

``probe_checkpoint_api`` reports what a node answers, in words a person can act on:

- 200 ``{"items": [path]}``: available (``archive`` = the path on the node);
- 404: off (the ``ContainerCheckpoint`` feature gate is disabled on the kubelet) or no such
  pod/container;
- 500: the container runtime refused (containerd/CRI-O without checkpoint support, or CRIU
  missing on the node);
- 403: not permitted: clawpoint's identity lacks ``nodes/proxy`` (deliberately left out of
  deploy/kubernetes/rbac.yaml; the opt-in ClusterRole is
  deploy/kubernetes/optional/checkpoint-probe-rbac.yaml). Nothing reached the kubelet.

Restoring a container from such an archive (containerd's experimental restore-via-create,
CRI-O) and KEP-5823 pod restore are never offered here: ``restore_supported`` stays False.
Limits: probing takes a real checkpoint of the container when the API is on.
"""

from __future__ import annotations

import json
from typing import Literal

from core import errors
from core.backends.kubernetes import ids
from core.backends.kubernetes.connection import Connection, Op, translate
from core.schema_base import Model


class CheckpointProbe(Model):
    node: str
    state: Literal["available", "off", "refused", "not_permitted"]
    message: str
    archive: str | None = None
    restore_supported: bool = False  # no probe of restore exists that we trust; see above


def probe_checkpoint_api(
    conn: Connection, node: str, namespace: str, pod: str, container: str, *, timeout_s: int = 60
) -> CheckpointProbe:
    node = ids.parse_node_id(node)
    namespace = ids.check_namespace(namespace)
    pod = ids.check_name(pod, what="pod name")
    container = ids.check_name(container, what="container name")
    core = conn.api("CoreV1Api")
    path = f"checkpoint/{namespace}/{pod}/{container}"
    op = Op("create", "nodes/proxy", "", None, node)
    # Called once, without the connection's retries: a 500 here is the runtime's answer,
    # not a transient fault of the API server.
    try:
        resp = core.connect_post_node_proxy_with_path(
            node, path, _preload_content=False, _request_timeout=timeout_s + 15
        )
    except Exception as exc:
        mapped = translate(exc, op, where=conn.host)
        code = int(getattr(exc, "status", 0) or 0)
        text = str(getattr(exc, "body", "") or exc).strip()[:300]
        if isinstance(mapped, errors.NotFound):
            return CheckpointProbe(
                node=node,
                state="off",
                message=f"the kubelet checkpoint API is off on {node} (404: the "
                "ContainerCheckpoint feature gate is disabled, or there is no container "
                f"{namespace}/{pod}/{container}): {text}",
            )
        if code == 403:
            # The probe is optional and its RBAC opt-in: an answer, not a failure.
            return CheckpointProbe(
                node=node,
                state="not_permitted",
                message=f"not permitted to probe the kubelet checkpoint API on {node}: the "
                "clawpoint identity lacks nodes/proxy (create), which the default RBAC leaves "
                "out; apply deploy/kubernetes/optional/checkpoint-probe-rbac.yaml to allow it "
                f"({text})",
            )
        if code == 500:
            return CheckpointProbe(
                node=node,
                state="refused",
                message=f"the container runtime on {node} refused the checkpoint (500): {text}",
            )
        if isinstance(mapped, errors.ClawpointError):
            raise mapped from exc
        raise errors.BackendUnavailable(
            f"the Kubernetes API did not answer {op.describe()}: {mapped}",
            hint="check that the cluster is reachable, then retry",
        ) from exc
    try:
        items = json.loads(resp.data).get("items") or []
    except (ValueError, AttributeError):
        items = []
    return CheckpointProbe(
        node=node,
        state="available",
        message=f"the kubelet checkpoint API works on {node}: a forensic archive was written on "
        "the node (restore from it is not offered)",
        archive=str(items[0]) if items else None,
    )
