"""Pre-flight of a move: would the scheduler place this pod on that node?

Before a plan stops anything (migrate, drain, failover, resume ``--to``), the pod spec the
workload would run with on its target is checked against each candidate node with the rules
of kube-scheduler's filter plugins, read from kubernetes/kubernetes:

- **TaintToleration** (pkg/scheduler/framework/plugins/tainttoleration): a ``NoSchedule`` or
  ``NoExecute`` taint excludes the node unless one toleration tolerates it
  (staging/src/k8s.io/api/core/v1/toleration.go ``ToleratesTaint``: an empty effect matches
  every effect, an empty key with ``Exists`` every key, ``Exists`` every value, ``Equal`` (or
  no operator) the same value). ``PreferNoSchedule`` only scores, it never filters.
- **NodeResourcesFit** (pkg/scheduler/framework/plugins/noderesources/fit.go): the pod's
  requests (component-helpers/resource ``PodRequests``: the sum over containers, at least the
  largest init container, restartable init containers (sidecars) added, plus
  ``spec.overhead``) must fit the node's allocatable minus the requests of the non-terminal
  pods bound to it; one pod slot must be free (``allocatable.pods``). A request absent where
  a limit is set is the limit (pkg/apis/core/v1/defaults.go).
- **NodeAffinity** (pkg/scheduler/framework/plugins/nodeaffinity,
  component-helpers/scheduling/corev1/nodeaffinity): every ``nodeSelector`` pair must be a
  node label, and one of the required ``nodeSelectorTerms`` must match (terms ORed; a term's
  expressions ANDed; ``In``/``NotIn``/``Exists``/``DoesNotExist``/``Gt``/``Lt``;
  ``matchFields`` on ``metadata.name``; an empty term matches nothing).
- **NodeUnschedulable** (pkg/scheduler/framework/plugins/nodeunschedulable): a cordoned node
  takes the pod only if it tolerates ``node.kubernetes.io/unschedulable:NoSchedule``.
- The node must be Ready (the node lifecycle controller taints a node that is not; a node
  whose Ready condition is Unknown has stopped reporting).

Limits: the usage of a node is computed from the pods this connection can list (namespaces
out of RBAC scope are not seen, so a node can look freer than it is); inter-pod affinity,
topology spread, volume topology, host ports and DRA claims are not checked: the scheduler
still decides, this only refuses what it would certainly refuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from core import errors
from core.backends.kubernetes.objects import conditions, quantity

Obj = dict[str, Any]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_TERMINAL = ("Succeeded", "Failed")


@dataclass
class Fit:
    """One node's verdict: ``reasons`` empty means the pod would fit."""

    node: str
    reasons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.reasons


# ----- tolerations --------------------------------------------------------------------------
def tolerates(toleration: Obj, taint: Obj) -> bool:
    """One toleration against one taint (core/v1 ``Toleration.ToleratesTaint``)."""
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if effect and effect != taint.get("effect"):
        return False
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")
    return False  # Lt/Gt (alpha) and unknown operators: not trusted to tolerate


def untolerated(spec: Obj, taints: list[Obj]) -> list[Obj]:
    """The node's NoSchedule/NoExecute taints that no toleration of ``spec`` tolerates."""
    tols = [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
    return [
        t
        for t in taints
        if t.get("effect") in ("NoSchedule", "NoExecute")
        and not any(tolerates(tol, t) for tol in tols)
    ]


def taint_text(taint: Obj) -> str:
    value = taint.get("value") or ""
    return f"{taint.get('key')}{'=' + value if value else ''}:{taint.get('effect')}"


# ----- resources ----------------------------------------------------------------------------
def _container_requests(container: Obj) -> dict[str, Decimal]:
    res = container.get("resources") or {}
    out: dict[str, Decimal] = {}
    # A limit without a request is the request (API defaulting of a pod).
    for source in (res.get("limits") or {}, res.get("requests") or {}):
        for name, value in source.items():
            q = quantity(value)
            if q is not None:
                out[str(name)] = q
    return out


def _add(into: dict[str, Decimal], more: dict[str, Decimal]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, Decimal(0)) + v


def pod_requests(spec: Obj) -> dict[str, Decimal]:
    """What the scheduler counts for a pod spec (component-helpers ``PodRequests``)."""
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        _add(total, _container_requests(c))
    sidecars: dict[str, Decimal] = {}
    for c in spec.get("initContainers") or []:
        own = _container_requests(c)
        if c.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
            _add(total, own)
            _add(sidecars, own)
            continue
        # an ordinary init container runs alone (with the sidecars started before it)
        peak = dict(own)
        _add(peak, sidecars)
        for k, v in peak.items():
            total[k] = max(total.get(k, Decimal(0)), v)
    for name, value in (spec.get("overhead") or {}).items():
        q = quantity(value)
        if q is not None:
            total[str(name)] = total.get(str(name), Decimal(0)) + q
    return total


def _show(name: str, value: Decimal) -> str:
    if name == "cpu":
        return f"{value.normalize():f}"
    if name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
        return f"{int(value) // (1024 * 1024)}Mi"
    return f"{value.normalize():f}"


def requests_of(pods: list[Obj]) -> dict[str, Decimal]:
    """What ``pods`` hold of their node together: the sum of their ``pod_requests``."""
    used: dict[str, Decimal] = {}
    for p in pods:
        _add(used, pod_requests(p.get("spec") or {}))
    return used


def resource_reasons(spec: Obj, node: Obj, others: list[Obj]) -> list[str]:
    alloc = {
        str(k): quantity(v)
        for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
    }
    used = requests_of(others)
    reasons: list[str] = []
    slots = alloc.get("pods")
    if slots is not None and len(others) + 1 > slots:
        reasons.append(f"too many pods ({len(others)} of {slots} slots used)")
    for name, want in sorted(pod_requests(spec).items()):
        if want <= 0:
            continue
        have = alloc.get(name) or Decimal(0)
        free = have - used.get(name, Decimal(0))
        if want > free:
            reasons.append(
                f"insufficient {name}: requests {_show(name, want)}, "
                f"{_show(name, max(free, Decimal(0)))} free of {_show(name, have)} allocatable"
            )
    return reasons


# ----- node affinity ------------------------------------------------------------------------
def _expr_matches(expr: Obj, values_of: dict[str, str]) -> bool:
    key, op = str(expr.get("key") or ""), expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    present = key in values_of
    if op == "In":
        return present and values_of[key] in values
    if op == "NotIn":
        return not present or values_of[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            have, bound = int(values_of[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _term_matches(term: Obj, labels: dict[str, str], name: str) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node
    return all(_expr_matches(e, labels) for e in exprs) and all(
        _expr_matches(f, {"metadata.name": name}) for f in fields
    )


def affinity_reasons(spec: Obj, node: Obj) -> list[str]:
    meta = node.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    name = str(meta.get("name") or "")
    reasons = [
        f"nodeSelector {k}={v} does not match (label {k}={labels[k]!r})"
        if k in labels
        else f"nodeSelector {k}={v} does not match (no label {k})"
        for k, v in sorted((spec.get("nodeSelector") or {}).items())
        if labels.get(str(k)) != str(v)
    ]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is not None:
        terms = required.get("nodeSelectorTerms") or []
        if not any(_term_matches(t, labels, name) for t in terms):
            reasons.append("the pod's required node affinity does not match the node's labels")
    return reasons


# ----- one node, all rules ------------------------------------------------------------------
def check_node(spec: Obj, node: Obj, pods_on_node: list[Obj]) -> Fit:
    """Every reason the pod ``spec`` cannot land on ``node`` (``pods_on_node``: the others)."""
    name = str((node.get("metadata") or {}).get("name") or "")
    nspec = node.get("spec") or {}
    fit = Fit(name)
    ready = str((conditions(node).get("Ready") or {}).get("status") or "Unknown")
    if ready != "True":
        fit.reasons.append(
            "not Ready" if ready == "False" else "not Ready (the node stopped reporting)"
        )
    if nspec.get("unschedulable") and untolerated(
        spec, [{"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}]
    ):
        fit.reasons.append("cordoned (spec.unschedulable)")
    taints = [t for t in nspec.get("taints") or [] if isinstance(t, dict)]
    if nspec.get("unschedulable"):  # checked above, not twice
        taints = [t for t in taints if t.get("key") != UNSCHEDULABLE_TAINT]
    fit.reasons += [f"taint {taint_text(t)} not tolerated" for t in untolerated(spec, taints)]
    fit.reasons += affinity_reasons(spec, node)
    live = [p for p in pods_on_node if (p.get("status") or {}).get("phase") not in _TERMINAL]
    fit.reasons += resource_reasons(spec, node, live)
    return fit


def pods_by_node(
    pods: list[Obj], *, skip_pod: tuple[str, str] | None = None
) -> dict[str, list[Obj]]:
    """The pods bound to each node (by name), ``skip_pod`` (namespace, name) left out."""
    by_node: dict[str, list[Obj]] = {}
    for p in pods:
        m = p.get("metadata") or {}
        if skip_pod and (m.get("namespace"), m.get("name")) == skip_pod:
            continue
        bound = (p.get("spec") or {}).get("nodeName")
        if bound:
            by_node.setdefault(str(bound), []).append(p)
    return by_node


def check_nodes(
    spec: Obj, nodes: list[Obj], pods: list[Obj], *, skip_pod: tuple[str, str] | None = None
) -> list[Fit]:
    """``check_node`` over ``nodes``; ``skip_pod`` (namespace, name): the pod being moved,
    whose own requests do not count against its target."""
    by_node = pods_by_node(pods, skip_pod=skip_pod)
    return [
        check_node(spec, n, by_node.get(str((n.get("metadata") or {}).get("name")), []))
        for n in nodes
    ]


def refuse_target(fit: Fit, what: str) -> errors.Conflict:
    """The plan-time refusal of a ``to`` that does not fit, naming each reason."""
    return errors.Conflict(
        f"{what} cannot run on node {fit.node}: {'; '.join(fit.reasons)}",
        code="kubernetes-node-does-not-fit",
        hint="pick a node that tolerates, fits and matches the pod (taints and free GPUs: "
        "clawpoint nodes --backend k8s), or change the pod's tolerations, requests or "
        "selectors; nothing was stopped",
        details={"node": fit.node, "reasons": list(fit.reasons)},
    )


def refuse_nowhere(fits: list[Fit], what: str) -> errors.Conflict:
    per_node = "; ".join(f"{f.node}: {', '.join(f.reasons)}" for f in fits) or "no other node"
    return errors.Conflict(
        f"no node can take {what} ({per_node})",
        code="kubernetes-no-node-fits",
        hint="free or add a node that tolerates, fits and matches the pod, uncordon one, or "
        "change the pod's tolerations, requests or selectors; nothing was stopped",
        details={"reasons": {f.node: list(f.reasons) for f in fits}},
    )
