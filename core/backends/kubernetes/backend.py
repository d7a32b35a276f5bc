"""``KubernetesBackend``: the Backend protocol on a Kubernetes cluster (ids ``k8s:...``).

Inventory and queue depth come from ``inventory`` / ``queue``. Actions are plans of small
named steps, each one API request or one wait, routed through two dispatch tables
(``plans.PLANS`` by action, ``steps.STEPS`` by step; ``capabilities()`` is the first's
keys); every mutating request is previewed with ``dryRun=All`` when the plan is made (``scope.dry_run``):

- checkpoint: ``pods/exec`` into each wrapped pod of the workload; the wrapper (container
  entrypoint) writes the checkpoint to the checkpoint volume (a PVC).
- preempt: checkpoint, then suspend (Job ``spec.suspend``, or for a Job Kueue admitted its
  Workload's ``spec.active``, as Kueue owns the Job's suspend; Kueue Workload ``spec.active``;
  Kubeflow ``runPolicy.suspend``; TrainJob / RayJob / RayCluster ``spec.suspend``; KServe's
  stop annotation) or scale a Deployment/StatefulSet to 0 (the count kept in an annotation).
  The pods' SIGTERM (grace period) makes the wrapper checkpoint once more.
- resume: the inverse patch; a resumed Job's new pod restores its newest good checkpoint.
- migrate: a bare wrapped Pod is checkpointed and stopped, recreated (new name) with required
  node affinity to ``to`` (or away from its node), and the old pod is deleted only after the
  new one runs restored from that checkpoint. A Job: checkpoint, suspend, wait for its pod
  to end, clear ``startTime`` through ``jobs/status``, set its template's node affinity,
  unsuspend; its next pod restores (``jobs``: the server's rule; steps it would refuse on a
  running Job are previewed as "validated when reached"). A Kueue-admitted Job is refused.
- resize: a wrapped bare Pod's new CPU, memory, GPUs or GPU class: in place through
  ``pods/resize`` when the server (1.33+), the change and the container's resizePolicy allow
  it, else the migrate path with the new requests and limits (``resize``).
- scale: replicas (``scale`` subresource) or Job parallelism; never below the floor
  (``k8s.min_replicas`` or the workload's ``clawpoint.io/min-replicas``).
- drain_node: cordon; move every wrapped pod as migrate does; evict the rest through the
  Eviction API, waiting up to ``eviction_wait_s`` on a PodDisruptionBudget, then reporting
  it (never a delete instead); pods nothing recreates need ``force``; pods of namespaces
  out of scope are listed as not handled and the drain fails while they run (``nodes``).
  undrain_node: uncordon (and remove a failover's out-of-service taint).
- failover (a node, or a workload on it): the node must be NotReady or tainted for
  interruption; a NotReady node is fenced first (``nodes``: cordon, out-of-service taint,
  and an expired lease or a person's word); each wrapped pod is then restored from its
  newest good checkpoint elsewhere.
- scale_pool: a ``[k8s.pools.NAME]`` Cluster API MachineDeployment grown through its
  ``scale`` subresource; it or a Karpenter NodePool shrunk by draining the nodes that lose
  least with save, then removing them the autoscaler's way (``pools``, ``autoscalers``).
- unsaved work (not an action; the watch pass and the checkpoint step): running wrapped pods
  whose newest checkpoint is stale carry ``karpenter.sh/do-not-disrupt`` so Karpenter does not
  consolidate their node; removed once a fresh one exists (``disruption``).

Ids are validated before any request (``ids``). Limits: one wrapped container per pod;
Deployment/StatefulSet pods are not moved one by one (preempt/resume or drain them);
Kubeflow/Ray/KServe pods are suspended through their operator, not checkpointed here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from core import errors, logs
from core.actions import ActionParams
from core.backends import dispatch
from core.backends.base import PlanDraft, ProgressFn, poll_until
from core.backends.disruption_guard import ChangeSink, GuardPass
from core.backends.kubernetes import (
    disruption,
    handoff,
    ids,
    lineages,
    mutations,
    placement,
    plans,
    pools,
    step_args,
    steps,
)
from core.backends.kubernetes.config import KubernetesConfig
from core.backends.kubernetes.connection import Connection, Op
from core.backends.kubernetes.inventory import Inventory
from core.backends.kubernetes.kubelet_api import CheckpointProbe, probe_checkpoint_api
from core.backends.kubernetes.node_info import NodeDetail
from core.backends.kubernetes.pods import pods_of, with_placement
from core.backends.kubernetes.queue import QueueEntry, QueueReader
from core.model import Action, CheckpointInfo, NodeInfo, PoolInfo, WorkloadInfo
from core.store.store import CheckpointStore

log = logs.get_logger(__name__)

# Every step op: one API request or wait (``steps``), and a live move's (``handoff``).
STEPS = steps.STEPS | handoff.STEPS
Obj = dict[str, Any]


def _qualified(ckpt: CheckpointInfo) -> CheckpointInfo:
    """A store checkpoint with ``k8s:`` ids (its own and its parent's)."""
    parent = f"{ids.PREFIX}{ckpt.parent}" if ckpt.parent else None
    return ckpt.model_copy(update={"id": f"{ids.PREFIX}{ckpt.id}", "parent": parent})


class KubernetesBackend:
    """The Backend protocol for Kubernetes (name ``k8s``, the id prefix)."""

    name = ids.BACKEND

    def __init__(self, config: KubernetesConfig | None = None, *, api_client: Any = None) -> None:
        self.cfg = config or KubernetesConfig()
        self.conn = Connection(self.cfg, api_client=api_client)
        self.inventory = Inventory(self.conn)
        self._names = 0

    def close(self) -> None:
        self.conn.close()

    # ----- inventory ------------------------------------------------------------------
    def capabilities(self) -> frozenset[Action]:
        return dispatch.capabilities(plans.PLANS)

    def nodes(self) -> list[NodeInfo]:
        return self.inventory.nodes()

    def workloads(self) -> list[WorkloadInfo]:
        return self.inventory.workloads()

    def get_workload(self, name: str) -> WorkloadInfo:
        return self.inventory.get_workload(name)

    def queue_depth(self) -> list[QueueEntry]:
        return QueueReader(self.inventory).queue_depth()

    def node_detail(self, node: str) -> NodeDetail:
        name = ids.parse_node_id(node)
        for d in self.inventory.node_details():
            if d.name == name:
                return d
        raise errors.NotFound(
            f"no Kubernetes node {name}", hint="list the nodes (kubectl get nodes)"
        )

    def pools(self) -> list[PoolInfo]:
        """``PoolSource``: the ``[k8s.pools]`` MachineDeployments and NodePools (``pools``)."""
        return pools.pools(self)

    def get_node(self, node: str) -> NodeInfo:
        name = ids.parse_node_id(node)
        for n in self.nodes():
            if n.name == name:
                return n
        raise errors.NotFound(
            f"no Kubernetes node {name}", hint="list the nodes (kubectl get nodes)"
        )

    def guard_unsaved_work(self, now: datetime, on_change: ChangeSink) -> GuardPass:
        """``karpenter.sh/do-not-disrupt`` on running wrapped pods with stale checkpoints,
        removed once fresh (``disruption``)."""
        return disruption.reconcile(self, now, on_change)

    def probe_checkpoint_api(
        self, node: str, pod: str, namespace: str, container: str
    ) -> CheckpointProbe:
        """Whether the kubelet checkpoint API answers on ``node`` (forensic exports only)."""
        return probe_checkpoint_api(self.conn, node, namespace, pod, container)

    # ----- checkpoints ------------------------------------------------------------------
    def store(self) -> CheckpointStore | None:
        return CheckpointStore(Path(self.cfg.checkpoint_dir)) if self.cfg.checkpoint_dir else None

    def _lineages(self, name: str) -> list[str]:
        """Every lineage the workload's pods write (one per pod of a multi-pod workload)."""
        ref = ids.parse_workload_id(name)
        raw = self.read_raw(ref)
        return lineages.workload_lineages(ref.kind.kind, raw, pods_of(self, ref, raw))

    def checkpoints(self, workload: str | None = None) -> list[CheckpointInfo]:
        store = self.store()
        if store is None:
            return []
        if workload is None:
            return [_qualified(c) for c in store.list(None)]
        return [_qualified(c) for lineage in self._lineages(workload) for c in store.list(lineage)]

    def newest_seq(self, lineage: str) -> int:
        store = self.store()
        if store is None:
            return 0
        return max((c.seq for c in store.list(lineage)), default=0)

    def newest_good(self, lineage: str) -> CheckpointInfo | None:
        store = self.store()
        return store.newest_good(lineage) if store is not None else None

    # ----- raw reads used by plans --------------------------------------------------------
    def read_raw(self, ref: ids.WorkloadRef) -> Obj:
        return self.inventory.read_raw(ref)

    def list_pods(self, namespace: str | None, **selectors: str | None) -> list[Obj]:
        core = self.conn.api("CoreV1Api")
        sel = {k: v for k, v in selectors.items() if v}
        if namespace is not None:
            return list(
                self.conn.list_all(
                    Op("list", "pods", "", namespace), core.list_namespaced_pod, namespace, **sel
                )
            )
        scope = self.conn.scoped_namespaces
        if scope is None:
            return list(
                self.conn.list_all(Op("list", "pods"), core.list_pod_for_all_namespaces, **sel)
            )
        return [p for ns in scope for p in self.list_pods(ns, **selectors)]

    def target_node(self, wanted: Any, *, away_from: str | None = None) -> str | None:
        """The node named by ``to`` (``n2`` or ``k8s:n2``), checked to exist; whether it takes
        the pod (Ready, not cordoned, tolerated, fitting) is ``preflight``'s, with every
        reason at once."""
        if wanted is None:
            return None
        name = ids.parse_node_id(str(wanted))
        if away_from and name == away_from:
            raise errors.InvalidInput(
                f"the workload is already on {ids.PREFIX}{name}",
                hint=f"pass another node as {errors.arg('to')}, or omit it to let the scheduler "
                "pick one",
            )
        self.get_node(name)  # NotFound
        return name

    def preflight(
        self,
        spec: Obj,
        *,
        to: str | None,
        away: list[str],
        what: str,
        pod: tuple[str, str] | None = None,
    ) -> list[str]:
        """Before anything stops: the nodes the pod ``spec`` (as it would be created there)
        would be scheduled on, by the scheduler's filter rules (``placement``). With ``to``,
        that node must fit (Conflict naming it and each reason); without, at least one node
        off ``away`` must (Conflict naming every node's reasons). ``pod``: (namespace, name)
        of the pod being moved, whose own requests do not count against its target."""
        placed = with_placement(spec, to=to, away_from=away)
        nodes = [
            n
            for n in self.inventory.raw_nodes()
            if str(n["metadata"]["name"]) not in away
            and (to is None or n["metadata"]["name"] == to)
        ]
        pods = self.inventory.raw_pods(
            field_selector="status.phase!=Succeeded,status.phase!=Failed"
        )
        fits = placement.check_nodes(placed, nodes, pods, skip_pod=pod)
        if to is not None:
            (fit,) = fits or [placement.Fit(to, ["not found"])]
            if not fit.ok:
                raise placement.refuse_target(fit, what)
            return [to]
        good = [f.node for f in fits if f.ok]
        if not good:
            raise placement.refuse_nowhere(fits, what)
        return good

    def next_pod_name(self, old: str) -> str:
        """A new name for a recreated pod: ``NAME-cpN`` (a previous ``-cpN`` replaced)."""
        base, sep, tail = old.rpartition("-cp")
        stem = base if sep and tail.isdigit() else old
        self._names += 1
        stamp = int(time.time()) % 100000
        return ids.check_name(f"{stem[:230]}-cp{stamp}{self._names}")

    def wait_until(self, what: str, timeout_s: float, check: Callable[[], Any]) -> Any:
        """Poll ``check()`` until it returns a truthy value; OperationFailed on timeout."""
        return poll_until(
            what,
            timeout_s,
            check,
            every_s=self.cfg.poll_interval_s,
            hint="look at the pods' events and the wrapper's log, then retry the plan",
        )

    # ----- plans ----------------------------------------------------------------------
    def plan(self, action: Action, target: str, params: ActionParams) -> PlanDraft:
        # Every step's arguments and references are checked against their op's models.
        draft = dispatch.plan(
            plans.PLANS, self, action, target, params, backend=self.name,
            args=step_args.ARGS, outputs=step_args.OUTPUTS,
        )  # fmt: skip
        previews = mutations.preview(self, draft.steps)
        draft.scope.dry_run = previews
        # Every interface shows the step lines: each mutating one says what the server
        # answered to it with dryRun=All (the objects themselves are in scope.dry_run).
        verdicts = {p["step"]: p for p in previews}
        for s in draft.steps:
            p = verdicts.get(s.name)
            if p is not None and p.get("deferred"):
                s.description += f" [{p['request']}: {p['deferred']}]"
            elif p is not None:
                verdict = f"refused now: {p['refused']}" if p.get("refused") else "accepted"
                s.description += f" [server dry run: {p['request']}: {verdict}]"
        return draft

    def run_step(self, op: str, args: dict[str, Any], progress: ProgressFn) -> dict[str, Any]:
        return dispatch.run_step(
            STEPS, self, op, args, progress, backend="Kubernetes",
            outputs=step_args.OUTPUTS,
        )  # fmt: skip

    def recover_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        return steps.recover_step(self, op, args)

    def reconcile_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        return steps.recover_step(self, op, args)
