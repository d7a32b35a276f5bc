"""The fake kubelet's part of in-place pod resize (``FakeKubelet`` calls ``sync`` each pass).

As the kubelet does (kubernetes/kubernetes pkg/kubelet/kubelet.go ``handlePodResourcesResize``
and pkg/kubelet/allocation; KEP-1287 "Kubelet and API Server Interaction"): when a running
pod's desired cpu/memory (``spec.containers[].resources``) differ from what it runs with
(``status.containerStatuses[].resources``), the resize is admitted if the pod's new requests
fit the node's allocatable beside the requests of the node's other pods; then the new
resources are reported applied (``resources``, and the requests as ``allocatedResources``)
and any ``PodResizePending``/``PodResizeInProgress`` condition is removed. Otherwise the pod
gets ``PodResizePending`` with reason ``Infeasible`` and the kubelet's message ("Node didn't
have enough capacity: ...") and keeps running as it was
(staging/src/k8s.io/api/core/v1/types.go ``PodResizePending``, ``PodReasonInfeasible``).

Limits: no cgroups enforce the values (the fake kubelet has none), so "applied" is reported
at once, without an ``InProgress`` stage; ``Deferred`` is never reported (nothing here frees
room later); the first container only, as the fake kubelet runs.
"""

from __future__ import annotations

import contextlib
import copy
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from tests.k8s import scheduler
from tests.k8s.emulator import status

if TYPE_CHECKING:
    from tests.k8s.kubelet import FakeKubelet

Obj = dict[str, Any]
RESIZABLE = ("cpu", "memory")
CONDITIONS = ("PodResizePending", "PodResizeInProgress")


def applied(container: Obj) -> Obj:
    """The cpu/memory part of a container's resources, as a status reports them."""
    res = container.get("resources") or {}
    out: Obj = {}
    for part in ("limits", "requests"):
        values = {k: v for k, v in (res.get(part) or {}).items() if k in RESIZABLE}
        if part == "requests":  # a request left out is its limit (API defaulting)
            lim = {k: v for k, v in (res.get("limits") or {}).items() if k in RESIZABLE}
            values = {**lim, **values}
        if values:
            out[part] = values
    return out


def _same(a: Obj, b: Obj) -> bool:
    def norm(r: Obj) -> dict[tuple[str, str], Decimal]:
        return {
            (part, k): scheduler.quantity(v)
            for part in ("limits", "requests")
            for k, v in (r.get(part) or {}).items()
        }

    return norm(a) == norm(b)


def _shortfall(kubelet: FakeKubelet, pod: Obj) -> str | None:
    """The kubelet's Infeasible message when the new requests do not fit, else None."""
    node = kubelet.store.get(kubelet.nodes_kind, "", pod["spec"]["nodeName"])
    alloc = (node.get("status") or {}).get("allocatable") or {}
    others, _ = kubelet.store.list(
        kubelet.pods_kind,
        None,
        lambda p: (
            (p.get("spec") or {}).get("nodeName") == pod["spec"]["nodeName"]
            and p["metadata"]["uid"] != pod["metadata"]["uid"]
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ),
    )
    used: dict[str, Decimal] = {}
    for p in others:
        for k, v in scheduler.pod_requests(p.get("spec") or {}).items():
            used[k] = used.get(k, Decimal(0)) + v
    want = scheduler.pod_requests(pod.get("spec") or {})
    for res in RESIZABLE:
        if res in want and res in alloc:
            capacity = scheduler.quantity(alloc[res]) - used.get(res, Decimal(0))
            if want[res] > capacity:
                return (
                    f"Node didn't have enough capacity: {res}, requested: "
                    f"{int(want[res] * (1000 if res == 'cpu' else 1))}, capacity: "
                    f"{int(capacity * (1000 if res == 'cpu' else 1))}"
                )
    return None


def sync(kubelet: FakeKubelet) -> None:
    """Admit and report, or refuse, each pending resize of a running pod on a managed node."""
    pods, _ = kubelet.store.list(
        kubelet.pods_kind,
        None,
        lambda p: (
            (p.get("spec") or {}).get("nodeName") in kubelet.nodes
            and (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ),
    )
    for pod in pods:
        st = copy.deepcopy(pod.get("status") or {})
        statuses = st.get("containerStatuses") or []
        containers = (pod.get("spec") or {}).get("containers") or []
        if not statuses or not containers or "resources" not in statuses[0]:
            continue
        desired = applied(containers[0])
        conds = [c for c in st.get("conditions") or [] if c.get("type") not in CONDITIONS]
        if _same(desired, statuses[0].get("resources") or {}):
            if len(conds) == len(st.get("conditions") or []):
                continue  # nothing pending, nothing to clear
        else:
            why = _shortfall(kubelet, pod)
            if why is not None:
                pending = {"type": "PodResizePending", "status": "True", "reason": "Infeasible",
                           "message": why}  # fmt: skip
                if pending in (st.get("conditions") or []):
                    continue
                conds.append(pending)
            else:
                statuses[0]["resources"] = desired
                statuses[0]["allocatedResources"] = desired.get("requests") or {}
        st["conditions"] = conds
        st["containerStatuses"] = statuses
        m = pod["metadata"]
        with contextlib.suppress(status.ApiError):
            kubelet.store.set_status(kubelet.pods_kind, m["namespace"], m["name"], st)
