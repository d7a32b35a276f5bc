"""Queue depth against the emulator: pending pods by reason, Kueue queues, oldest age."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from core.backends.kubernetes.connection import Connection
from core.backends.kubernetes.inventory import Inventory
from core.backends.kubernetes.queue import QueueReader
from core.signals.queue import coerce
from tests.k8s.conftest import pod
from tests.k8s.emulator import Emulator, Rule, crds

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def at(minutes_ago: float) -> str:
    return (NOW - timedelta(minutes=minutes_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def waiting(
    name: str, ns: str, minutes_ago: float, *, message: str = "", gpus: int = 0, gated: bool = False
) -> dict[str, Any]:
    body = pod(name, ns, gpus=gpus)
    body["metadata"]["creationTimestamp"] = at(minutes_ago)
    body["status"] = {"phase": "Pending"}
    if gated:
        body["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    elif message:
        body["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
            }
        ]
    return body


def workload(
    name: str,
    queue: str,
    minutes_ago: float,
    *,
    admitted_to: str | None = None,
    gpus: int = 1,
    finished: bool = False,
) -> dict[str, Any]:
    conds: list[dict[str, Any]] = []
    status: dict[str, Any] = {"conditions": conds}
    if admitted_to:
        conds += [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
        ]
        status["admission"] = {"clusterQueue": admitted_to, "podSetAssignments": []}
    else:
        conds.append(
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Pending",
                "message": "insufficient unused quota",
            }
        )
    if finished:
        conds.append({"type": "Finished", "status": "True", "reason": "Succeeded"})
    template = {
        "spec": {
            "containers": [
                {"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ]
        }
    }
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": at(minutes_ago)},
        "spec": {
            "queueName": queue,
            "podSets": [{"name": "main", "count": 2, "template": template}],
        },
        "status": status,
    }


def kueue_queues(emu: Emulator) -> None:
    emu.seed(*crds.kueue())
    emu.seed(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq-gpu"},
            "spec": {},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq-idle"},
            "spec": {},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "LocalQueue",
            "metadata": {"name": "lq-gpu", "namespace": "team-a"},
            "spec": {"clusterQueue": "cq-gpu"},
        },
    )


def test_pending_pods_by_reason_with_the_oldest_age(emu: Emulator, conn: Connection) -> None:
    emu.seed(
        waiting(
            "a",
            "default",
            30,
            message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.",
            gpus=4,
        ),
        waiting(
            "b",
            "default",
            90,
            message="0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
        ),
        waiting("c", "default", 5, gated=True, gpus=1),
        waiting("d", "default", 1),
        pod("run", node="n1", phase="Running", gpus=2),
        pod(
            "starting", node="n1", phase="Pending"
        ),  # bound to a node: not waiting for the scheduler
        waiting("x", "team-a", 10, message="0/3 nodes are available: 3 Insufficient amd.com/gpu."),
    )
    entries = {e.partition: e for e in QueueReader(Inventory(conn)).queue_depth(now=NOW)}
    default = entries["namespace/default"]
    assert default.pending == 4
    assert default.pending_by_reason == {
        "InsufficientGPU": 1,
        "Unschedulable": 1,
        "SchedulingGated": 1,
        "NotYetScheduled": 1,
    }
    assert default.oldest_pending_age_s == 90 * 60
    assert default.pending_gpus == 5 and default.running == 1 and default.running_gpus == 2
    assert entries["namespace/team-a"].pending_by_reason == {"InsufficientGPU": 1}
    assert not any(p.startswith(("localqueue/", "clusterqueue/")) for p in entries)  # no Kueue here


def test_kueue_pending_and_admitted_per_queue(emu: Emulator, conn: Connection) -> None:
    kueue_queues(emu)
    emu.seed(
        workload("wl-old", "lq-gpu", 120, gpus=4),
        workload("wl-new", "lq-gpu", 15, gpus=1),
        workload("wl-run", "lq-gpu", 300, admitted_to="cq-gpu", gpus=8),
        workload("wl-done", "lq-gpu", 600, admitted_to="cq-gpu", finished=True),
    )
    entries = {e.partition: e for e in QueueReader(Inventory(conn)).queue_depth(now=NOW)}
    for name in ("localqueue/team-a/lq-gpu", "clusterqueue/cq-gpu"):
        q = entries[name]
        assert (q.pending, q.admitted, q.running) == (2, 1, 1), name
        assert q.pending_by_reason == {"Pending": 2}
        assert q.oldest_pending_age_s == 120 * 60
        assert q.pending_gpus == 2 * 4 + 2 * 1 and q.running_gpus == 16
    idle = entries["clusterqueue/cq-idle"]
    assert (idle.pending, idle.admitted, idle.oldest_pending_age_s) == (0, 0, None)
    # The entries fit the planner's queue-depth contract unchanged.
    depth = coerce(entries["clusterqueue/cq-gpu"], backend="k8s")
    assert depth.backend == "k8s" and depth.partition == "clusterqueue/cq-gpu" and depth.backlog


def test_namespaced_credentials_still_get_cluster_queues_from_local_queues(
    emu: Emulator, conn: Connection
) -> None:
    kueue_queues(emu)
    emu.seed(workload("wl", "lq-gpu", 20))
    emu.rules = [
        Rule(verbs=("get",), resources=("*",), api_groups=("*",)),
        Rule(verbs=("list",), resources=("pods",)),
        Rule(
            verbs=("list",), resources=("workloads", "localqueues"), api_groups=("kueue.x-k8s.io",)
        ),
    ]
    entries = {e.partition: e for e in QueueReader(Inventory(conn)).queue_depth(now=NOW)}
    assert entries["clusterqueue/cq-gpu"].pending == 1 and "clusterqueue/cq-idle" not in entries
