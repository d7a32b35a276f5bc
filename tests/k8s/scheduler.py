"""The fake kubelet's scheduler: kube-scheduler's filter plugins, written from upstream.

``unschedulable_reasons(pod, node, pods_on_node, managed)`` is every reason ``node`` is
filtered out for ``pod``, in kube-scheduler's own words; ``fit_error(total, reasons)`` is
the message a pod left Pending carries in its ``PodScheduled=False`` (reason
``Unschedulable``) condition. Rules, each from kubernetes/kubernetes:

- **NodeUnschedulable** (pkg/scheduler/framework/plugins/nodeunschedulable): a node with
  ``spec.unschedulable`` is filtered unless the pod tolerates the taint
  ``node.kubernetes.io/unschedulable:NoSchedule``; reason "node(s) were unschedulable".
- **TaintToleration** (pkg/scheduler/framework/plugins/tainttoleration, matching in
  staging/src/k8s.io/api/core/v1/toleration.go ``ToleratesTaint``): only ``NoSchedule`` and
  ``NoExecute`` taints filter; a toleration's empty effect matches all effects, an empty key
  (operator ``Exists``) all keys, ``Exists`` all values, ``Equal`` or no operator the same
  value; reason "node(s) had untolerated taint {KEY: VALUE}" for the first untolerated one.
  A node that is not Ready carries ``node.kubernetes.io/not-ready`` (status False) or
  ``node.kubernetes.io/unreachable`` (Unknown) ``NoSchedule``, as the node lifecycle
  controller's TaintNodesByCondition adds them (pkg/controller/nodelifecycle); so does a
  node no fake kubelet runs on here.
- **NodeAffinity** (pkg/scheduler/framework/plugins/nodeaffinity; matching in
  staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity): every
  ``nodeSelector`` pair must be a label of the node, and one required ``nodeSelectorTerm``
  must match (terms ORed, expressions ANDed; In, NotIn, Exists, DoesNotExist, Gt, Lt;
  ``matchFields`` on ``metadata.name``; a term without requirements matches nothing);
  reason "node(s) didn't match Pod's node affinity/selector".
- **NodeResourcesFit** (pkg/scheduler/framework/plugins/noderesources/fit.go; requests as
  component-helpers/resource ``PodRequests`` sums them): the pod's requests of cpu, memory
  and every extended resource (``nvidia.com/gpu``) against the node's allocatable minus the
  requests of the non-terminal pods bound to it, the largest init container (sidecars
  added) counted; reasons "Insufficient RESOURCE", and "Too many pods" past
  ``allocatable.pods``. A limit without a request stands for the request (defaulting,
  pkg/apis/core/v1/defaults.go).

Each node counts with the reasons of the first filter that rejects it (the framework stops
there). The message (pkg/scheduler/framework/types.go ``FitError.Error``): "0/N nodes are
available: " and the reasons counted, "COUNT REASON", sorted and joined by ", ", then ".";
then DefaultPreemption's verdict (``fit_error``): " preemption: 0/N nodes are available:
...." as a real 1.34 scheduler writes it.
Nothing here imports the product's own placement rules: this is the cluster's side.
Limits: no scoring beyond "fewest pods", no preemption, no inter-pod affinity or topology
spread, no volume or port filters.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

Obj = dict[str, Any]

_SUFFIX: dict[str, Decimal | int] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip
_QUANTITY = re.compile(
    r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)


def quantity(value: Any) -> Decimal:
    """A resource quantity (apimachinery pkg/api/resource: ``500m``, ``2Gi``, ``1e3``)."""
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        return Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2) or ""])
    except InvalidOperation as exc:
        raise ValueError(f"not a quantity: {value!r}") from exc


def _requests(container: Obj) -> dict[str, Decimal]:
    res = container.get("resources") or {}
    out = {str(k): quantity(v) for k, v in (res.get("limits") or {}).items()}
    out.update({str(k): quantity(v) for k, v in (res.get("requests") or {}).items()})
    return out


def pod_requests(spec: Obj) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in _requests(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    running_sidecars: dict[str, Decimal] = {}
    for c in spec.get("initContainers") or []:
        own = _requests(c)
        if c.get("restartPolicy") == "Always":
            for k, v in own.items():
                total[k] = total.get(k, Decimal(0)) + v
                running_sidecars[k] = running_sidecars.get(k, Decimal(0)) + v
            continue
        for k, v in own.items():
            total[k] = max(total.get(k, Decimal(0)), v + running_sidecars.get(k, Decimal(0)))
    for k, v in (spec.get("overhead") or {}).items():
        total[str(k)] = total.get(str(k), Decimal(0)) + quantity(v)
    return total


def _tolerates(tol: Obj, taint: Obj) -> bool:
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if tol.get("key") and tol["key"] != taint.get("key"):
        return False
    op = tol.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (tol.get("value") or "") == (taint.get("value") or "")


def eviction_delay(pod_spec: Obj, taints: list[Obj]) -> float | None:
    """The taint eviction controller's verdict on a pod bound to a node with these taints
    (pkg/controller/tainteviction/taint_eviction.go ``processPodOnNode``): None when no
    ``NoExecute`` taint applies or every one is tolerated without ``tolerationSeconds``
    (kept forever); 0 when one is not tolerated (deleted now); else the least
    ``tolerationSeconds`` of the tolerations used (``getMinTolerationTime``; negative is 0)."""
    no_execute = [t for t in taints if t.get("effect") == "NoExecute"]
    if not no_execute:
        return None
    used: list[Obj] = []
    for taint in no_execute:
        tol = next((t for t in pod_spec.get("tolerations") or [] if _tolerates(t, taint)), None)
        if tol is None:
            return 0.0
        used.append(tol)
    seconds = [t["tolerationSeconds"] for t in used if t.get("tolerationSeconds") is not None]
    if not seconds:
        return None
    return float(max(0, min(int(s) for s in seconds)))


def _untolerated(pod_spec: Obj, taints: list[Obj]) -> Obj | None:
    tols = pod_spec.get("tolerations") or []
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue  # PreferNoSchedule only scores
        if not any(_tolerates(t, taint) for t in tols):
            return taint
    return None


def _match(expr: Obj, values_of: dict[str, str]) -> bool:
    key, op, values = str(expr.get("key")), expr.get("operator"), expr.get("values") or []
    has = key in values_of
    if op == "In":
        return has and values_of[key] in values
    if op == "NotIn":
        return not has or values_of[key] not in values
    if op == "Exists":
        return has
    if op == "DoesNotExist":
        return not has
    if op in ("Gt", "Lt") and has and len(values) == 1:
        try:
            a, b = int(values_of[key]), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _affinity_ok(pod_spec: Obj, node: Obj) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    for k, v in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in required.get("nodeSelectorTerms") or []:
        exprs, mfields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if (
            (exprs or mfields)
            and all(_match(e, labels) for e in exprs)
            and all(_match(f, fields) for f in mfields)
        ):
            return True
    return False


def _condition_taints(node: Obj, managed: bool) -> list[Obj]:
    ready: Obj = next(
        (c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"),
        {},
    )
    state = ready.get("status") if managed else "Unknown"
    if state == "True":
        return []
    key = "node.kubernetes.io/not-ready" if state == "False" else "node.kubernetes.io/unreachable"
    return [{"key": key, "effect": "NoSchedule"}]


def unschedulable_reasons(pod: Obj, node: Obj, pods_on_node: list[Obj], managed: bool) -> list[str]:
    """Why ``node`` is filtered out for ``pod`` (empty: it fits): the reasons of the first
    filter plugin that rejects it, in the default profile's order (NodeUnschedulable,
    TaintToleration, NodeAffinity, NodeResourcesFit: pkg/scheduler/apis/config/v1
    default_plugins.go), since the framework stops at the first failure
    (pkg/scheduler/framework/runtime/framework.go RunFilterPlugins)."""
    spec, nspec = pod.get("spec") or {}, node.get("spec") or {}
    if nspec.get("unschedulable") and _untolerated(
        spec, [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    ):
        return [UNSCHEDULABLE_NODE]
    taint = _untolerated(spec, [*_condition_taints(node, managed), *(nspec.get("taints") or [])])
    if taint is not None:
        return [f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"]
    if not _affinity_ok(spec, node):
        return [AFFINITY_MISMATCH]
    reasons: list[str] = []
    live = [
        p
        for p in pods_on_node
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    alloc = {
        k: quantity(v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
    }
    if "pods" in alloc and len(live) + 1 > alloc["pods"]:
        reasons.append("Too many pods")
    used: dict[str, Decimal] = {}
    for p in live:
        for k, v in pod_requests(p.get("spec") or {}).items():
            used[k] = used.get(k, Decimal(0)) + v
    for k, want in sorted(pod_requests(spec).items()):
        if want > 0 and want > alloc.get(k, Decimal(0)) - used.get(k, Decimal(0)):
            reasons.append(f"Insufficient {k}")
    return reasons


UNSCHEDULABLE_NODE = "node(s) were unschedulable"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
# Only NodeResourcesFit answers Unschedulable (resolvable by preemption); NodeUnschedulable,
# TaintToleration and NodeAffinity answer UnschedulableAndUnresolvable.
_RESOLVABLE = ("Insufficient ", "Too many pods")


def _histogram(total: int, reasons_by_node: dict[str, list[str]]) -> str:
    counts: dict[str, int] = {}
    for reasons in reasons_by_node.values():
        for r in reasons:
            counts[r] = counts.get(r, 0) + 1
    parts = sorted(f"{n} {r}" for r, n in counts.items())
    return f"0/{total} nodes are available: {', '.join(parts)}."


def fit_error(total: int, reasons_by_node: dict[str, list[str]], pod: Obj | None = None) -> str:
    """The PodScheduled=False message: the filters' FitError, then what DefaultPreemption's
    PostFilter said (pkg/scheduler/framework/preemption/preemption.go ``Preempt``): a pod
    with ``preemptionPolicy: Never`` is "not eligible"; otherwise a node filtered by an
    unresolvable plugin is one where "Preemption is not helpful for scheduling", and one
    short of resources has "No preemption victims found for incoming pod" (this scheduler
    never preempts: no pod here has a lower priority to give way). Each part is appended
    with " %v." (FitError.Error's SeparatorFormat), hence the real message's final "..".
    """
    message = _histogram(total, reasons_by_node)
    if (pod or {}).get("spec", {}).get("preemptionPolicy") == "Never":
        post = "not eligible due to preemptionPolicy=Never."
    else:
        post = _histogram(
            total,
            {
                name: [
                    "No preemption victims found for incoming pod"
                    if any(r.startswith(_RESOLVABLE) for r in reasons)
                    else "Preemption is not helpful for scheduling"
                ]
                for name, reasons in reasons_by_node.items()
            },
        )
    return f"{message} preemption: {post}."
