"""Server-side behaviour of pods/eviction and the scale subresource.

Eviction follows pkg/registry/core/pod/storage/eviction.go: a pod that is Pending,
Succeeded, Failed or already being deleted is deleted without consulting budgets; more than
one matching PodDisruptionBudget is a 500; a budget that allows no disruption is a 429
TooManyRequests whose cause (``DisruptionBudget``) says how many healthy pods it needs and
has; an unready pod under the default ``IfHealthyBudget`` policy may go when the budget is
met. The disruption controller's arithmetic (expected, desired and current healthy pods) is
done at request time over the pods the budget selects (expected = the pods it selects; the
real controller counts the owners' replicas, which is the same once pods exist).

Scale (autoscaling/v1) reads and writes ``spec.replicas`` of Deployments and StatefulSets.
"""

from __future__ import annotations

import math
from typing import Any

from tests.k8s.emulator import patching, status
from tests.k8s.emulator.kinds import Kind
from tests.k8s.emulator.selectors import match_label_selector, selector_string
from tests.k8s.emulator.store import Obj, Store

PDB_CAUSE = "DisruptionBudget"


def _ready(pod: Obj) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def pdb_status(store: Store, pdb: Obj) -> Obj:
    """The status the disruption controller would publish for ``pdb`` now."""
    pods_kind = store.kinds[("", "pods")]
    ns = pdb["metadata"]["namespace"]
    selector = (pdb.get("spec") or {}).get("selector")
    pods, _ = store.list(
        pods_kind, ns, lambda p: match_label_selector(selector, (p["metadata"].get("labels") or {}))
    )
    pods = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    expected = len(pods)
    healthy = sum(1 for p in pods if _ready(p) and not p["metadata"].get("deletionTimestamp"))
    spec = pdb.get("spec") or {}
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = expected
    return {
        "observedGeneration": pdb["metadata"].get("generation", 1),
        "disruptionsAllowed": max(0, healthy - desired),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": "True" if healthy > desired else "False",
                "reason": "SufficientPods" if healthy > desired else "InsufficientPods",
                "message": "",
                "observedGeneration": pdb["metadata"].get("generation", 1),
                "lastTransitionTime": pdb["metadata"]["creationTimestamp"],
            }
        ],
    }


def evict(store: Store, namespace: str, name: str, body: Any, dry_run: bool) -> Obj:
    """POST pods/NAME/eviction; returns the Success ``Status`` or raises the failure."""
    with store.lock:
        if not isinstance(body, dict):
            raise status.bad_request("the body of the request is not a JSON object")
        meta = body.get("metadata") or {}
        if meta.get("name") and meta["name"] != name:
            raise status.bad_request("name in URL does not match name in Eviction object")
        pods_kind = store.kinds[("", "pods")]
        pod = store.get(pods_kind, namespace, name)
        options = body.get("deleteOptions") or {}
        dry_run = dry_run or "All" in (options.get("dryRun") or [])
        grace = options.get("gracePeriodSeconds")
        pre = options.get("preconditions")
        phase = (pod.get("status") or {}).get("phase")
        ignore_pdb = phase in ("Pending", "Succeeded", "Failed") or bool(
            pod["metadata"].get("deletionTimestamp")
        )
        if not ignore_pdb:
            pdb_kind = store.kinds[("policy", "poddisruptionbudgets")]
            labels = pod["metadata"].get("labels") or {}
            pdbs, _ = store.list(
                pdb_kind,
                namespace,
                lambda p: match_label_selector((p.get("spec") or {}).get("selector"), labels),
            )
            if len(pdbs) > 1:
                raise status.ApiError(
                    500,
                    "",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                )
            if pdbs:
                pdb = pdbs[0]
                st = pdb_status(store, pdb)
                policy = (pdb.get("spec") or {}).get(
                    "unhealthyPodEvictionPolicy", "IfHealthyBudget"
                )
                unhealthy_ok = not _ready(pod) and (
                    policy == "AlwaysAllow"
                    or (st["currentHealthy"] >= st["desiredHealthy"] and st["desiredHealthy"] > 0)
                )
                if not unhealthy_ok and st["disruptionsAllowed"] <= 0:
                    raise status.too_many_requests(
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        causes=[
                            {
                                "reason": PDB_CAUSE,
                                "message": f"The disruption budget {pdb['metadata']['name']} needs "
                                f"{st['desiredHealthy']} healthy pods and has {st['currentHealthy']} currently",
                            }
                        ],
                    )
        store.delete(
            pods_kind, namespace, name, dry_run=dry_run, grace_seconds=grace, preconditions=pre
        )
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }


def scale_of(kind: Kind, obj: Obj) -> Obj:
    meta = obj["metadata"]
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
        "status": {
            "replicas": (obj.get("status") or {}).get("replicas", 0),
            "selector": selector_string((obj.get("spec") or {}).get("selector")),
        },
    }


def write_scale(
    store: Store,
    kind: Kind,
    namespace: str,
    name: str,
    body: Any,
    *,
    content_type: str | None,
    dry_run: bool,
) -> Obj:
    """PUT (``content_type`` None) or PATCH of KIND/NAME/scale."""
    with store.lock:
        obj = store.get(kind, namespace, name)
        current = scale_of(kind, obj)
        new = body if content_type is None else patching.apply(True, content_type, current, body)
        if not isinstance(new, dict):
            raise status.bad_request("the body of the request is not a JSON object")
        replicas = (new.get("spec") or {}).get("replicas", 0)
        if not isinstance(replicas, int) or replicas < 0:
            raise status.invalid(
                "Scale",
                name,
                "autoscaling",
                [
                    (
                        "spec.replicas",
                        "Invalid value",
                        f"{replicas}: must be greater than or equal to 0",
                    )
                ],
            )
        rv = (new.get("metadata") or {}).get("resourceVersion")
        if rv and rv != obj["metadata"]["resourceVersion"]:
            raise status.conflict(kind.plural, name, kind.group)
        obj.setdefault("spec", {})["replicas"] = replicas
        updated = store.update(kind, namespace, name, obj, dry_run=dry_run, require_rv=False)
        return scale_of(kind, updated)
