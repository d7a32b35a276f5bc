"""The rules of the two node autoscalers a Kubernetes pool runs under, as upstream states them.

A pool (``[k8s.pools.NAME]``, ``core.backends.kubernetes.pools``) is sized through the
cluster's own mechanism, so what each autoscaler does with its objects is read here, from
the objects as the API serves them (pure: no requests; every rule cites its upstream file).

**Cluster API + cluster-autoscaler** (kubernetes/autoscaler
cluster-autoscaler/cloudprovider/clusterapi, kubernetes-sigs/cluster-api):

- a node group is a MachineDeployment (``cluster.x-k8s.io``) whose bounds are its annotations
  ``cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size`` / ``-max-size``; a missing
  one counts as 0, a value that is not a whole number, a negative one or a max below the min
  is refused (clusterapi_utils.go ``parseScalingBounds``);
- its size is ``spec.replicas`` (clusterapi_nodegroup.go ``TargetSize``), written through the
  ``scale`` subresource (clusterapi_unstructured.go ``SetSize``: the scale client);
- its Machines carry the label ``cluster.x-k8s.io/deployment-name`` (cluster-api
  api/v1beta1 ``MachineDeploymentNameLabel``, set by the MachineSet controller); a Machine's
  Node is ``status.nodeRef.name``, else the Node with the same ``spec.providerID`` (the
  autoscaler's own match: clusterapi_controller.go ``findMachineByProviderID``);
- a node leaves the group the way the autoscaler removes it (clusterapi_nodegroup.go
  ``DeleteNodes``): refused when it would take the group below its min size; otherwise its
  Machine is annotated ``cluster.x-k8s.io/delete-machine`` (``MarkMachineForDeletion``: the
  value is a time, which CAPI does not read) and ``spec.replicas`` lowered by one per node;
  the MachineSet controller deletes annotated Machines before any other
  (cluster-api internal/controllers/machineset/machineset_delete_policy.go: the annotation
  makes a Machine ``mustDelete`` whatever the delete policy), and the Machine controller
  drains its Node and deletes it.

**Karpenter** (kubernetes-sigs/karpenter at 2266468, 2026-08-20):

- a NodePool's nodes carry the label ``karpenter.sh/nodepool`` (pkg/apis/v1/labels.go
  ``NodePoolLabelKey``); each is backed by a NodeClaim whose ``status.nodeName`` names it;
- ``spec.limits`` is a resource list; only ``limits.nodes`` bounds the node count
  (pkg/apis/v1/nodepool.go ``Limits.ExceededBy`` against ``status.resources``, which counts
  ``nodes``); cpu or memory limits cannot be turned into a node count here;
- a node is removed by deleting its NodeClaim (karpenter.sh "Disruption", manual methods: its
  finalizer taints the node ``karpenter.sh/disrupted:NoSchedule``, drains it and terminates
  the instance). Budgets do not limit a deletion made by hand; clawpoint honours them all
  the same, as Karpenter's own consolidation would (``allowed_disruptions``);
- the budget: each budget in ``spec.disruption.budgets`` (default one of ``10%``) that is
  active and applies to the reason (no ``reasons``, or the reason listed) allows ``nodes``
  (a count, or a percentage of the NodePool's nodes rounded up), the smallest wins
  (nodepool.go ``GetAllowedDisruptionsByReason``, ``Budget.GetAllowedDisruptions``); nodes
  already disrupting (NotReady, or marked for deletion) are taken off it, never below 0
  (pkg/controllers/disruption/helpers.go ``BuildDisruptionBudgetMapping``, which counts only
  initialized nodes: label ``karpenter.sh/initialized``);
- nodes come from pending pods: a NodePool has no size to raise (the alpha static NodePools,
  ``spec.replicas`` behind the ``StaticCapacity`` feature gate, off by default, are not used).

Limits: a budget with a ``schedule`` is counted as active at every moment (stricter than
Karpenter, which opens it for ``duration`` after each cron hit).
"""

from __future__ import annotations

import math
import re
from typing import Any

from core import errors

Obj = dict[str, Any]

# ----- Cluster API -----------------------------------------------------------------------
CAPI_GROUP = "cluster.x-k8s.io"
CAPI_VERSION = "v1beta1"
MIN_SIZE_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX_SIZE_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"
DELETE_MACHINE_ANNOTATION = "cluster.x-k8s.io/delete-machine"

# ----- Karpenter -------------------------------------------------------------------------
KARPENTER_GROUP = "karpenter.sh"
KARPENTER_VERSION = "v1"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
INITIALIZED_LABEL = "karpenter.sh/initialized"
DISRUPTED_TAINT = "karpenter.sh/disrupted"
DEFAULT_BUDGETS: list[Obj] = [{"nodes": "10%"}]  # nodepool.go: +kubebuilder:default
# A shrink is consolidation by another hand: the budgets of these reasons apply to it.
SHRINK_REASONS = ("Underutilized", "Empty")
_BUDGET_NODES = re.compile(r"^((100|[0-9]{1,2})%|[0-9]+)$")  # nodepool.go Budget.Nodes pattern


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def name_of(obj: Obj) -> str:
    return str(_meta(obj).get("name") or "")


def capi_bounds(md: Obj) -> tuple[int, int]:
    """(min, max) of a MachineDeployment from its autoscaler annotations (parseScalingBounds)."""
    notes = _meta(md).get("annotations") or {}

    def read(key: str) -> int:
        raw = notes.get(key)
        if raw is None:
            return 0
        try:
            return int(str(raw).strip())
        except ValueError:
            raise _bad_bounds(md, f"{key}={raw!r} is not a whole number") from None

    low, high = read(MIN_SIZE_ANNOTATION), read(MAX_SIZE_ANNOTATION)
    if low < 0 or high < 0:
        raise _bad_bounds(md, "a size annotation is negative")
    if high < low:
        raise _bad_bounds(md, f"max size {high} is below min size {low}")
    return low, high


def _bad_bounds(md: Obj, why: str) -> errors.InvalidInput:
    return errors.InvalidInput(
        f"MachineDeployment {name_of(md)}: invalid autoscaler bounds ({why}); "
        "cluster-autoscaler refuses this node group too",
        hint=f"fix the {MIN_SIZE_ANNOTATION} / {MAX_SIZE_ANNOTATION} annotations",
    )


def replicas_of(obj: Obj) -> int:
    return int((obj.get("spec") or {}).get("replicas") or 0)


def machines_of(md: Obj, machines: list[Obj]) -> list[Obj]:
    """The Machines of a MachineDeployment (label ``cluster.x-k8s.io/deployment-name``)."""
    name, ns = name_of(md), _meta(md).get("namespace")
    return [
        m
        for m in machines
        if (_meta(m).get("labels") or {}).get(DEPLOYMENT_LABEL) == name
        and _meta(m).get("namespace") == ns
    ]


def node_of_machine(machine: Obj, nodes: list[Obj]) -> str | None:
    """The Node a Machine runs: ``status.nodeRef.name``, else the one with its providerID."""
    ref = ((machine.get("status") or {}).get("nodeRef") or {}).get("name")
    names = {name_of(n) for n in nodes}
    if ref and ref in names:
        return str(ref)
    pid = (machine.get("spec") or {}).get("providerID")
    if pid:
        for n in nodes:
            if (n.get("spec") or {}).get("providerID") == pid:
                return name_of(n)
    return None


# ----- Karpenter -------------------------------------------------------------------------
def nodepool_nodes(pool: Obj, nodes: list[Obj]) -> list[Obj]:
    name = name_of(pool)
    return [n for n in nodes if (_meta(n).get("labels") or {}).get(NODEPOOL_LABEL) == name]


def nodeclaim_of(node: Obj, claims: list[Obj]) -> str | None:
    """The NodeClaim backing a node: ``status.nodeName``, else the same providerID."""
    name, pid = name_of(node), (node.get("spec") or {}).get("providerID")
    for c in claims:
        st = c.get("status") or {}
        if st.get("nodeName") == name or (pid and st.get("providerID") == pid):
            return name_of(c)
    return None


def node_limit(pool: Obj) -> int | None:
    """``spec.limits.nodes`` as a count; None when the limits say nothing about nodes."""
    raw = ((pool.get("spec") or {}).get("limits") or {}).get("nodes")
    if raw is None:
        return None
    try:
        return int(str(raw))
    except ValueError:
        return None  # a quantity like "1k" is not a plain count: not used as a bound


def _ready(node: Obj) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _disrupting(node: Obj) -> bool:
    """NotReady or marked for deletion (helpers.go: counted against the budget)."""
    taints = (node.get("spec") or {}).get("taints") or []
    return (
        not _ready(node)
        or bool(_meta(node).get("deletionTimestamp"))
        or any(t.get("key") == DISRUPTED_TAINT for t in taints)
    )


def budget_value(budget: Obj, num_nodes: int) -> int:
    """What one active budget allows (GetAllowedDisruptions: percentages rounded up); an
    invalid value fails closed (0), as Karpenter does."""
    raw = str(budget.get("nodes", "10%"))
    if not _BUDGET_NODES.fullmatch(raw):
        return 0
    if raw.endswith("%"):
        return math.ceil(int(raw[:-1]) * num_nodes / 100)
    return int(raw)


def allowed_disruptions(
    pool: Obj, nodes: list[Obj], reasons: tuple[str, ...] = SHRINK_REASONS
) -> tuple[int, str]:
    """How many more of the NodePool's nodes may go now, for any of ``reasons``, and the
    budget that sets it (as ``nodes=N`` with its reasons and schedule)."""
    budgets = ((pool.get("spec") or {}).get("disruption") or {}).get("budgets")
    if budgets is None:
        budgets = DEFAULT_BUDGETS
    counted = [
        n for n in nodepool_nodes(pool, nodes)
        if (_meta(n).get("labels") or {}).get(INITIALIZED_LABEL) == "true"
    ]  # fmt: skip
    num, busy = len(counted), sum(1 for n in counted if _disrupting(n))
    best, why = math.inf, "no budget applies"
    for b in budgets:
        applies = not b.get("reasons") or any(r in (b.get("reasons") or []) for r in reasons)
        if not applies:
            continue
        value = budget_value(b, num)
        if value < best:
            best, why = value, describe_budget(b)
    if best == math.inf:
        return 10**6, why
    return max(int(best) - busy, 0), why + (f", {busy} node(s) already disrupting" if busy else "")


def describe_budget(b: Obj) -> str:
    text = f"budget nodes={b.get('nodes', '10%')}"
    if b.get("reasons"):
        text += f" for {','.join(b['reasons'])}"
    if b.get("schedule"):
        text += f" (schedule {b['schedule']!r}, {b.get('duration')})"
    return text


def consolidation_policy(pool: Obj) -> str:
    disruption = (pool.get("spec") or {}).get("disruption") or {}
    return str(disruption.get("consolidationPolicy") or "WhenEmptyOrUnderutilized")
