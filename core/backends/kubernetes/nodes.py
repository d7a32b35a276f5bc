"""What a drain may do to the pods of a node, and when a lost node counts as fenced.

**Drain** follows ``kubectl drain``'s own filters (kubernetes/kubectl pkg/drain/filters.go):

- DaemonSet pods are left where they are (``--ignore-daemonsets``: their controller would
  put them back at once); mirror pods of static pods (annotation
  ``kubernetes.io/config.mirror``) are skipped, the API cannot remove them;
- a pod no controller owns (no ``ownerReference`` with ``controller: true``) is refused
  unless forced (``--force``): nothing recreates it, its work is gone; the same for a pod
  with ``emptyDir`` data (``--delete-emptydir-data``). clawpoint folds both flags into one
  ``force`` parameter, which makes the drain a destructive action (``core.actions``). A
  wrapped pod is exempt from the ``emptyDir`` rule (it checkpoints itself on SIGTERM onto the
  checkpoint volume; its ``emptyDir`` is the wrapper's scratch space), and from both while
  ``save`` holds and the drain moves it through a checkpoint (a bare or Job pod);
- pods of namespaces outside ``k8s.namespaces`` are not touched: the plan lists them as not
  handled, and the drain's last step (``check_node_drained``) fails while any of them (or
  anything else but DaemonSet and mirror pods) still runs there, so the drain is never
  reported as done while the node still runs work. When the credentials cannot list pods of
  every namespace, the plan says so and that step fails closed: the node cannot be shown
  empty.

**Fencing** (failover of a NotReady node): a lost node's pods are restored elsewhere only once
the node is fenced, so that a node that is merely cut off cannot keep running (and
checkpointing) the same lineage next to its copy. The plan first cordons the node and taints
it ``node.kubernetes.io/out-of-service:NoExecute``, the taint of the non-graceful node
shutdown (KEP-2268, GA in 1.28: the pod GC then force-deletes its pods and the attach/detach
controller detaches their volumes, kubernetes/kubernetes pkg/controller/podgc/gc_controller.go
``gcTerminating``; the kubelet evicts every pod that does not tolerate it, should the node come
back). And one of:

- its heartbeat Lease (``kube-node-lease/<node>``, ``renewTime + leaseDurationSeconds``,
  coordination.k8s.io/v1) has expired: its kubelet has not reached the API for a full lease;
  a lease that stopped before the node went NotReady but has not expired yet is waited on
  (the step fails if the lease is renewed meanwhile); no lease at all counts as expired (a
  running kubelet recreates it within a renew interval);
- or a person says the node is fenced (``fenced``, a person-only parameter: see
  ``core.actions`` and ``core.guardrails.policy``; an agent cannot carry it by itself).

A lease renewed after the node went NotReady means a live kubelet (say, a node cut off from
part of the control plane, or one reporting itself NotReady): failover is refused. The taint
is what upstream asks a person to add once the node is shut down; an expired lease shows that
the kubelet stopped talking to the API, not that the machine is off, which is why a person's
word is the other way in. A Ready node with a spot notice is alive: no fencing applies (its
pods are stopped through the API, and the wrapper checkpoints on SIGTERM).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from core import errors
from core.backends.kubernetes import ids
from core.backends.kubernetes.builders import REASON_ANNOTATION, patch_step, step
from core.backends.kubernetes.connection import Op
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.pods import live, meta, owner_kind
from core.model import PlanStep

Obj = dict[str, Any]

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
LEASE_NAMESPACE = "kube-node-lease"
# Seconds of slack when comparing the lease with the Ready condition's lastTransitionTime,
# which the API serializes to whole seconds (metav1.Time).
_SKEW_S = 1.0


def name_of(pod: Obj) -> str:
    return f"{meta(pod).get('namespace')}/{meta(pod).get('name')}"


# ----- drain --------------------------------------------------------------------------------
def left_alone(pod: Obj) -> str | None:
    """Why a drain leaves this pod where it is (kubectl drain does too), or None."""
    if owner_kind(pod) == "DaemonSet":
        return "DaemonSet pod (its controller would recreate it on the node)"
    if MIRROR_ANNOTATION in (meta(pod).get("annotations") or {}):
        return "mirror pod of a static pod (the kubelet owns it)"
    return None


def needs_force(pod: Obj, *, wrapped: bool, moved: bool) -> str | None:
    """Why evicting this pod loses work (kubectl drain wants --force or
    --delete-emptydir-data), or None. ``moved``: the drain moves it through a checkpoint;
    ``wrapped``: its wrapper checkpoints on SIGTERM (its emptyDir is scratch)."""
    if moved:
        return None
    if owner_kind(pod) is None:
        return "no controller recreates it"
    volumes = (pod.get("spec") or {}).get("volumes") or []
    if not wrapped and any("emptyDir" in v for v in volumes):
        return "its emptyDir data is deleted"
    return None


def refuse_unforced(node: str, unforced: list[tuple[str, str]]) -> errors.Conflict:
    listed = "; ".join(f"{p} ({why})" for p, why in unforced)
    return errors.Conflict(
        f"draining {node} would evict pods whose work is lost: {listed}",
        hint="give them a controller (a Job, a Deployment) or run them under the clawpoint "
        "wrapper, or drain with force=true (destructive: a person must approve), as "
        "'kubectl drain --force --delete-emptydir-data' would",
        code="kubernetes-drain-unmanaged",
        details={"pods": [p for p, _ in unforced]},
    )


def cluster_pods_on(b: KubeContext, node: str) -> list[Obj] | None:
    """Every pod on ``node``, in every namespace; None when the credentials may not list them."""
    core = b.conn.api("CoreV1Api")
    try:
        return list(
            b.conn.list_all(
                Op("list", "pods"),
                core.list_pod_for_all_namespaces,
                field_selector=f"spec.nodeName={node}",
            )
        )
    except errors.OperationFailed as exc:
        if exc.code == "kubernetes-forbidden":
            return None
        raise


def still_running(pods: list[Obj]) -> list[str]:
    """The pods a drained node may not run any more (DaemonSet and mirror pods may stay)."""
    return sorted(name_of(p) for p in pods if live(p) and left_alone(p) is None)


def outside_scope(b: KubeContext, node: str) -> tuple[list[str], bool]:
    """Pods of namespaces out of scope running on ``node``, and whether that is known."""
    scope = b.conn.scoped_namespaces
    if scope is None:
        return [], True
    pods = cluster_pods_on(b, node)
    if pods is None:
        return [], False
    return still_running([p for p in pods if meta(p).get("namespace") not in scope]), True


def check_drained_step(
    b: KubeContext, node: str, *, visible: bool, name: str = "check_drained"
) -> PlanStep:
    what = (
        "check that nothing but DaemonSet and mirror pods still runs on it, in any namespace"
        if visible
        else "try to check that nothing else runs on it (these credentials cannot list pods "
        "of every namespace: the node is not reported drained unless they can)"
    )
    return step(name, "check_node_drained", f"{node}: {what}", node=node)


def run_check_drained(b: KubeContext, args: Obj) -> Obj:
    node = ids.check_name(str(args["node"]), what="node name")
    pods = cluster_pods_on(b, node)
    if pods is None:
        scope = ", ".join(b.conn.scoped_namespaces or [])
        raise errors.OperationFailed(
            f"{node} is cordoned and the pods of {scope} on it are handled, but these "
            "credentials cannot list pods of other namespaces: the node is not known to be "
            "drained",
            hint=f"check with 'kubectl get pods -A --field-selector spec.nodeName={node}' and "
            "drain the rest with rights there, or let clawpoint's service account list pods "
            "cluster-wide (deploy/kubernetes/rbac.yaml)",
            code="kubernetes-drain-unconfirmed",
            details={"node": node},
        )
    left = still_running(pods)
    if left:
        raise errors.OperationFailed(
            f"{node} is cordoned but not drained: {len(left)} pod(s) not handled still run "
            f"there: {', '.join(left)}",
            hint="these are outside clawpoint's namespaces (k8s.namespaces) or appeared since "
            f"the plan: drain them with rights there ('kubectl drain {node}'), or widen the "
            "namespaces and drain again",
            code="kubernetes-drain-partial",
            details={"node": node, "not_handled": left},
        )
    return {"node": node, "drained": True}


# ----- fencing ------------------------------------------------------------------------------
def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def read_node(b: KubeContext, node: str) -> Obj:
    core = b.conn.api("CoreV1Api")
    return b.conn.call_json(Op("get", "nodes", "", None, node), core.read_node, node)


def read_lease(b: KubeContext, node: str) -> Obj:
    api = b.conn.api("CoordinationV1Api")
    return b.conn.call_json(
        Op("get", "leases", "coordination.k8s.io", LEASE_NAMESPACE, node),
        api.read_namespaced_lease,
        node,
        LEASE_NAMESPACE,
    )


def lease_times(lease: Obj) -> tuple[datetime | None, int]:
    spec = lease.get("spec") or {}
    renewed = _time(spec.get("renewTime")) or _time(spec.get("acquireTime"))
    return renewed, int(spec.get("leaseDurationSeconds") or 0)


def _not_ready_since(node_obj: Obj) -> datetime | None:
    for c in (node_obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return _time(c.get("lastTransitionTime"))
    return None


def fence_steps(b: KubeContext, node: str, fenced: bool) -> tuple[list[PlanStep], Obj]:
    """The steps that fence a NotReady ``node`` before anything of it is restored, and what
    the plan says about it (``scope.fencing``); Conflict when it cannot be fenced now."""
    node_obj = read_node(b, node)
    steps: list[PlanStep] = []
    info: Obj = {"node": node}
    if fenced:
        info["by"] = "person"
        info["why"] = "a person confirmed the node is fenced (out-of-band approval)"
    else:
        by_person = (
            "a person who fenced it (powered off, or cut off from the network and the "
            "checkpoint storage) can say so: failover with fenced=true (a person must approve "
            "it out of band)"
        )
        alive_hint = (
            f"find out why {node} is NotReady; once it is fenced its lease expires and "
            f"failover proceeds, or {by_person}"
        )
        try:
            lease: Obj | None = read_lease(b, node)
        except errors.NotFound:
            # A running kubelet recreates its lease within a renew interval (10 s by
            # default): none at all says as much as an expired one.
            lease = None
        except errors.OperationFailed as exc:
            raise errors.Conflict(
                f"cannot tell whether {node}'s kubelet is still alive: its heartbeat lease "
                f"{LEASE_NAMESPACE}/{node} cannot be read ({exc.message})",
                hint="grant get on leases in kube-node-lease (deploy/kubernetes/rbac.yaml), "
                f"or {by_person}",
                code="kubernetes-node-unfenced",
            ) from exc
        if lease is None:
            info["by"] = "lease"
            info["why"] = f"it has no heartbeat lease ({LEASE_NAMESPACE}/{node}) at all"
            return [*steps, _fence_patch(node, node_obj, info)], info
        renewed, duration = lease_times(lease)
        now = datetime.now(UTC)
        if renewed is None or duration <= 0:
            raise errors.Conflict(
                f"{node}'s heartbeat lease has no renewTime or duration: it cannot show the "
                "node stopped",
                hint=alive_hint,
                code="kubernetes-node-unfenced",
            )
        expires = renewed + timedelta(seconds=duration)
        info["lease"] = {"renewed": renewed.isoformat(), "expires": expires.isoformat()}
        since = _not_ready_since(node_obj)
        if expires <= now:
            info["by"] = "lease"
            info["why"] = f"its heartbeat lease expired at {expires:%H:%M:%S} UTC"
        elif since is None or renewed > since + timedelta(seconds=_SKEW_S):
            raise errors.Conflict(
                f"{node} is NotReady but its kubelet renewed its heartbeat lease at "
                f"{renewed:%H:%M:%S} UTC, after the node went NotReady: it is alive and may "
                "still run (and checkpoint) its pods; restoring them elsewhere now would let "
                "two copies write one lineage",
                hint=alive_hint,
                code="kubernetes-node-alive",
                details={"node": node, "renewed": renewed.isoformat()},
            )
        else:
            info["by"] = "lease"
            info["why"] = (
                f"its heartbeat lease stopped before the node went NotReady; the plan waits "
                f"until it expires at {expires:%H:%M:%S} UTC (and stops if it is renewed)"
            )
            wait_s = max(0.0, (expires - now).total_seconds())
            steps.append(
                step("wait_lease_expired", "wait_lease_expired",
                     f"wait until {node}'s heartbeat lease expires (stop if its kubelet renews it)",
                     node=node, renewed=renewed.isoformat(), timeout_s=wait_s + 30.0)
            )  # fmt: skip
    return [*steps, _fence_patch(node, node_obj, info)], info


def _fence_patch(node: str, node_obj: Obj, info: Obj) -> PlanStep:
    """Cordon and taint out-of-service in one patch (taints are an atomic list: the whole
    list is sent, the node's other taints kept)."""
    taints = [dict(t) for t in (node_obj.get("spec") or {}).get("taints") or []]
    if not any(t.get("key") == OUT_OF_SERVICE and t.get("effect") == "NoExecute" for t in taints):
        taints.append({"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"})
    patch = {
        "spec": {"unschedulable": True, "taints": taints},
        "metadata": {"annotations": {REASON_ANNOTATION: f"fenced for failover: {info['why']}"}},
    }
    return patch_step("fence", "Node", "", node, patch,
                      f"fence {node}: cordon it and taint it {OUT_OF_SERVICE}=nodeshutdown:"
                      "NoExecute (non-graceful node shutdown) before anything of it is restored "
                      "elsewhere")  # fmt: skip


def run_wait_lease_expired(b: KubeContext, args: Obj) -> Obj:
    node = ids.check_name(str(args["node"]), what="node name")
    seen = _time(args.get("renewed"))

    def expired() -> bool:
        renewed, duration = lease_times(read_lease(b, node))
        if renewed is not None and seen is not None and renewed > seen:
            raise errors.Conflict(
                f"{node}'s kubelet renewed its heartbeat lease at {renewed:%H:%M:%S} UTC: the "
                "node is alive; failover stopped before changing anything",
                hint=f"find out why {node} is NotReady, or fence it and have a person say so "
                "(failover with fenced=true)",
                code="kubernetes-node-alive",
            )
        return renewed is None or renewed + timedelta(seconds=duration) <= datetime.now(UTC)

    b.wait_until(f"{node}'s heartbeat lease to expire", float(args["timeout_s"]), expired)
    return {"node": node, "lease_expired": True}


def without_out_of_service(node_obj: Obj) -> list[Obj] | None:
    """The node's taints minus the out-of-service one, or None when it has none (undrain)."""
    taints = (node_obj.get("spec") or {}).get("taints") or []
    kept = [t for t in taints if t.get("key") != OUT_OF_SERVICE]
    return kept if len(kept) != len(taints) else None
