"""A pod's size as Kubernetes states it, read and rewritten: the wrapped container's CPU and
memory (its limit, else its request), its GPUs, the GPU class of its node, the pod's QoS
class, and the container resources a resize writes.

Rules read from kubernetes/kubernetes:

- **QoS class** (pkg/apis/core/helper/qos/qos.go ``ComputePodQOS``): only cpu and memory
  count; no container with a request or limit of either is ``BestEffort``; every container
  with cpu and memory limits equal to its requests (a request left out defaults to the
  limit, pkg/apis/core/v1/defaults.go) is ``Guaranteed``; anything else ``Burstable``.
  Init containers count as containers.
- **resizePolicy** (staging/src/k8s.io/api/core/v1/types.go ``ContainerResizePolicy``): per
  resource, ``NotRequired`` (the default, also spelt ``PreferNoRestart`` since 1.33) or
  ``RestartContainer``.
- **GPU class**: the node label GPU feature discovery sets, ``nvidia.com/gpu.product``
  (k8s.io/gpu-feature-discovery), or the one ``k8s.gpu_class_label`` names.

Pure functions on raw JSON, no I/O. Limits: the wrapped container only (``pods.container_of``).
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

from core.backends.kubernetes.lineages import CONTAINER_ANNOTATION
from core.backends.kubernetes.objects import quantity
from core.sizes import MIB, memory_text

Obj = dict[str, Any]

GPU_CLASS_LABEL = "nvidia.com/gpu.product"
QOS_RESOURCES = ("cpu", "memory")
NO_RESTART = ("NotRequired", "PreferNoRestart", "")


def wrapped_name(pod: Obj) -> str | None:
    """The wrapped container's name: ``clawpoint.io/container`` when it names one, else the
    first container's; None when the pod has none."""
    wanted = ((pod.get("metadata") or {}).get("annotations") or {}).get(CONTAINER_ANNOTATION)
    names = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or []]
    if wanted and wanted in names:
        return str(wanted)
    return names[0] if names else None


def container_named(spec: Obj, name: str | None) -> Obj:
    return next((c for c in spec.get("containers") or [] if c.get("name") == name), {})


def _amount(res: Obj, kind: str, name: str) -> Decimal | None:
    return quantity(((res.get(kind) or {}) or {}).get(name))


def container_size(container: Obj) -> tuple[float | None, int | None]:
    """(cpus, memory in MiB) the container may use: its limit, else its request; None where
    neither is set (not limited)."""
    res = container.get("resources") or {}
    cpu = _amount(res, "limits", "cpu")
    if cpu is None:
        cpu = _amount(res, "requests", "cpu")
    mem = _amount(res, "limits", "memory")
    if mem is None:
        mem = _amount(res, "requests", "memory")
    return (
        float(cpu) if cpu is not None else None,
        -(-int(mem) // MIB) if mem is not None else None,  # rounded up, as core.sizes does
    )


def gpu_class_of(spec: Obj, node_labels: dict[str, str] | None, label: str) -> str | None:
    """The GPU model the pod asks for (its nodeSelector on ``label``), else its node's."""
    wanted = (spec.get("nodeSelector") or {}).get(label)
    if wanted:
        return str(wanted)
    found = (node_labels or {}).get(label)
    return str(found) if found else None


def qos_class(spec: Obj) -> str:
    """``Guaranteed``, ``Burstable`` or ``BestEffort`` (``ComputePodQOS``)."""
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        limits = {
            k: quantity(v) for k, v in (res.get("limits") or {}).items() if k in QOS_RESOURCES
        }
        requests = {
            k: quantity(v) for k, v in (res.get("requests") or {}).items() if k in QOS_RESOURCES
        }
        requests = {**limits, **requests}  # a request left out is the limit
        if any(v for v in limits.values()) or any(v for v in requests.values()):
            any_set = True
        if set(limits) != set(QOS_RESOURCES) or any(requests[k] != limits[k] for k in limits):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def resize_policy(container: Obj, resource: str) -> str:
    """The container's restart policy for resizing ``resource`` (NotRequired by default)."""
    for p in container.get("resizePolicy") or []:
        if p.get("resourceName") == resource:
            return str(p.get("restartPolicy") or "NotRequired")
    return "NotRequired"


def _cpu_text(cpus: float) -> str:
    milli = round(cpus * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def resized(container: Obj, *, cpus: float | None, memory_mb: int | None) -> Obj:
    """The container's ``resources`` with the new size: the limit set where it had one (or
    had neither), the request set where it equalled the limit or stood alone, and lowered
    where it would exceed the new limit. A resource given as None is left as it is."""
    res = copy.deepcopy(container.get("resources") or {})
    limits, requests = dict(res.get("limits") or {}), dict(res.get("requests") or {})
    for name, value in (("cpu", cpus), ("memory", memory_mb)):
        if value is None:
            continue
        text = _cpu_text(value) if name == "cpu" else memory_text(int(value))
        new = Decimal(str(value)) if name == "cpu" else Decimal(value) * MIB
        limit, request = quantity(limits.get(name)), quantity(requests.get(name))
        if limit is None and request is not None:
            requests[name] = text  # only a request: the size is the request
            continue
        if limit is None or request is None or request == limit or request > new:
            requests[name] = text
        limits[name] = text
    out: Obj = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out
