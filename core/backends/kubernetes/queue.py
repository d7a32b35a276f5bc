"""Queue depth on Kubernetes: pods waiting for the scheduler, and Kueue's queues.

Two sources, one record type (``QueueEntry``, with the field names of the queue-depth
contract in ``core.signals.queue``, so ``coerce`` maps it unchanged):

- Pods not yet bound to a node (phase Pending, no ``spec.nodeName``), per namespace
  (``partition = "namespace/NS"``), counted by reason: ``InsufficientGPU`` (the scheduler's
  message names ``Insufficient nvidia.com/gpu`` or ``amd.com/gpu``), else the PodScheduled
  condition's reason (``Unschedulable``, ...), ``SchedulingGated`` (Kueue holds pods with a
  scheduling gate until admission) or ``NotYetScheduled``. ``running`` counts Running pods.
- Kueue Workloads, per LocalQueue (``localqueue/NS/NAME``) and per ClusterQueue
  (``clusterqueue/NAME``, through the LocalQueue's ``spec.clusterQueue``): pending = neither
  admitted, finished nor deactivated, by the reason of their QuotaReserved (or Evicted)
  condition; ``running`` = admitted and not finished (also in ``admitted``). Every queue
  that exists appears, even when empty. ClusterQueues that the credentials may not list
  are derived from the LocalQueues alone.

Ages are measured from ``creationTimestamp``. Limits: a snapshot; pending GPUs are the
effective requests of the waiting pods / pod sets; no priorities yet.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from core import errors
from core.backends.kubernetes import ids
from core.backends.kubernetes.connection import Op
from core.backends.kubernetes.inventory import Inventory
from core.backends.kubernetes.objects import conditions, pod_spec_gpus, ts
from core.backends.kubernetes.workload_info import workload_gpus
from core.schema_base import Model

Obj = dict[str, Any]
_GPU_SHORTAGE = re.compile(r"Insufficient (nvidia\.com|amd\.com)/gpu")


class QueueEntry(Model):
    backend: str = ids.BACKEND
    partition: str
    pending: int = 0
    pending_by_reason: dict[str, int] = Field(default_factory=dict)
    oldest_pending_age_s: float | None = None
    pending_gpus: int = 0
    running: int = 0
    running_gpus: int = 0
    admitted: int | None = None  # Kueue queues only

    def add_pending(self, reason: str, gpus: int, age_s: float | None) -> None:
        self.pending += 1
        self.pending_by_reason[reason] = self.pending_by_reason.get(reason, 0) + 1
        self.pending_gpus += gpus
        if age_s is not None and (
            self.oldest_pending_age_s is None or age_s > self.oldest_pending_age_s
        ):
            self.oldest_pending_age_s = age_s


def _age(obj: Obj, now: datetime) -> float | None:
    created = ts((obj.get("metadata") or {}).get("creationTimestamp"))
    return max(0.0, (now - created).total_seconds()) if created else None


def pending_reason(pod: Obj) -> str | None:
    """Why a pod waits for a node, or None when it is not waiting for the scheduler."""
    spec, st = pod.get("spec") or {}, pod.get("status") or {}
    if st.get("phase") != "Pending" or spec.get("nodeName"):
        return None
    if spec.get("schedulingGates"):
        return "SchedulingGated"
    cond = conditions(pod).get("PodScheduled") or {}
    if str(cond.get("status")) == "False":
        if _GPU_SHORTAGE.search(str(cond.get("message") or "")):
            return "InsufficientGPU"
        return str(cond.get("reason") or "Unschedulable")
    return "NotYetScheduled"


def pod_queues(pods: list[Obj], now: datetime) -> list[QueueEntry]:
    by_ns: dict[str, QueueEntry] = {}
    for pod in pods:
        ns = str((pod.get("metadata") or {}).get("namespace", ""))
        entry = by_ns.setdefault(ns, QueueEntry(partition=f"namespace/{ns}"))
        reason = pending_reason(pod)
        gpus = pod_spec_gpus(pod.get("spec"))
        if reason is not None:
            entry.add_pending(reason, gpus, _age(pod, now))
        elif (pod.get("status") or {}).get("phase") == "Running":
            entry.running += 1
            entry.running_gpus += gpus
    return [by_ns[k] for k in sorted(by_ns)]


def _kueue_status(wl: Obj) -> tuple[str, str]:
    """("pending", reason) | ("admitted", "") | ("done", "")."""
    conds = conditions(wl)
    if str((conds.get("Finished") or {}).get("status")) == "True":
        return "done", ""
    if (wl.get("spec") or {}).get("active") is False:
        return "done", ""
    if str((conds.get("Admitted") or {}).get("status")) == "True":
        return "admitted", ""
    evicted = conds.get("Evicted") or {}
    if str(evicted.get("status")) == "True":
        return "pending", f"Evicted:{evicted.get('reason') or 'Evicted'}"
    reserved = conds.get("QuotaReserved") or {}
    return "pending", str(reserved.get("reason") or "Pending")


def kueue_queues(
    workloads: list[Obj], local_queues: list[Obj], cluster_queues: list[Obj], now: datetime
) -> list[QueueEntry]:
    lq_to_cq: dict[tuple[str, str], str] = {}
    entries: dict[str, QueueEntry] = {}

    def entry(partition: str) -> QueueEntry:
        return entries.setdefault(partition, QueueEntry(partition=partition, admitted=0))

    for cq in cluster_queues:
        entry(f"clusterqueue/{cq['metadata']['name']}")
    for lq in local_queues:
        meta = lq.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        entry(f"localqueue/{key[0]}/{key[1]}")
        cq_name = (lq.get("spec") or {}).get("clusterQueue")
        if cq_name:
            lq_to_cq[key] = str(cq_name)
            entry(f"clusterqueue/{cq_name}")
    for wl in workloads:
        meta, spec = wl.get("metadata") or {}, wl.get("spec") or {}
        ns, queue = str(meta.get("namespace", "")), spec.get("queueName")
        admission = (wl.get("status") or {}).get("admission") or {}
        targets = []
        if queue:
            targets.append(f"localqueue/{ns}/{queue}")
        target_cq = admission.get("clusterQueue") or (
            lq_to_cq.get((ns, str(queue))) if queue else None
        )
        if target_cq:
            targets.append(f"clusterqueue/{target_cq}")
        state, reason = _kueue_status(wl)
        gpus = workload_gpus("Workload", wl)
        for partition in targets:
            e = entry(partition)
            if state == "pending":
                e.add_pending(reason, gpus, _age(wl, now))
            elif state == "admitted":
                e.running += 1
                e.admitted = (e.admitted or 0) + 1
                e.running_gpus += gpus
    return [entries[k] for k in sorted(entries)]


class QueueReader:
    """Reads what ``pod_queues`` and ``kueue_queues`` need through an ``Inventory``."""

    def __init__(self, inventory: Inventory) -> None:
        self.inv = inventory

    def queue_depth(self, now: datetime | None = None) -> list[QueueEntry]:
        now = now or datetime.now(UTC)
        out = pod_queues(self.inv.raw_pods(), now)
        version = self.inv.served_versions().get("Workload")
        if version is None:
            return out
        workloads = self.inv.raw("Workload")
        conn, group = self.inv.conn, "kueue.x-k8s.io"
        custom = conn.api("CustomObjectsApi")
        local: list[Obj] = []
        scope = conn.scoped_namespaces
        if scope is None:
            local += conn.list_all(
                Op("list", "localqueues", group),
                custom.list_custom_object_for_all_namespaces,
                group,
                version,
                "localqueues",
            )
        for ns in scope or []:
            local += conn.list_all(
                Op("list", "localqueues", group, ns),
                custom.list_namespaced_custom_object,
                group,
                version,
                ns,
                "localqueues",
            )
        try:
            cluster = list(
                conn.list_all(
                    Op("list", "clusterqueues", group),
                    custom.list_cluster_custom_object,
                    group,
                    version,
                    "clusterqueues",
                )
            )
        except errors.OperationFailed as exc:
            if exc.code != "kubernetes-forbidden":
                raise
            cluster = []  # namespaced credentials: ClusterQueues come from the LocalQueues
        return out + kueue_queues(workloads, local, cluster, now)
