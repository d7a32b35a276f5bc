"""Inventory through the official client against the emulator: nodes with GPU and spot
labels and taints, every workload kind (with and without the operators' CRDs), namespaces in
scope, RBAC denials, and malformed ids that send nothing."""

from __future__ import annotations

from typing import Any

import pytest

from core import errors
from core.backends.kubernetes import ids
from core.backends.kubernetes.config import KubernetesConfig
from core.backends.kubernetes.connection import Connection
from core.backends.kubernetes.inventory import Inventory
from core.model import NodeHealth, WorkloadState
from tests.k8s.conftest import pod
from tests.k8s.emulator import Emulator, Rule, crds
from tests.k8s.test_ids import HOSTILE_WORKLOADS


def gpu_node(
    name: str,
    labels: dict[str, str],
    *,
    gpus: int = 8,
    ready: str = "True",
    taints: list[dict[str, str]] | None = None,
    cordoned: bool = False,
    pressure: str | None = None,
) -> dict[str, Any]:
    conds = [
        {
            "type": "Ready",
            "status": ready,
            "message": "kubelet is posting ready status"
            if ready == "True"
            else "Kubelet stopped posting node status.",
        }
    ]
    if pressure:
        conds.append({"type": pressure, "status": "True", "message": f"{pressure} on the node"})
    resources = {"cpu": "95800m", "memory": "1056Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints or [], **({"unschedulable": True} if cordoned else {})},
        "status": {"conditions": conds, "allocatable": resources, "capacity": resources},
    }


def seed_nodes(emu: Emulator) -> None:
    emu.seed(
        gpu_node(
            "karpenter-spot",
            {
                "karpenter.sh/capacity-type": "spot",
                "karpenter.sh/nodepool": "gpu",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "topology.kubernetes.io/zone": "us-east-1a",
                "topology.kubernetes.io/region": "us-east-1",
            },
        ),
        gpu_node(
            "eks-ondemand",
            {
                "eks.amazonaws.com/capacityType": "ON_DEMAND",
                "eks.amazonaws.com/nodegroup": "ng-1",
                "node.kubernetes.io/instance-type": "g6.12xlarge",
            },
            gpus=4,
        ),
        gpu_node(
            "gke-spot-reclaimed",
            {
                "cloud.google.com/gke-spot": "true",
                "cloud.google.com/gke-nodepool": "a3",
                "topology.kubernetes.io/zone": "us-central1-b",
            },
            taints=[{"key": "cloud.google.com/impending-node-termination", "effect": "NoSchedule"}],
        ),
        gpu_node(
            "aks-spot",
            {
                "kubernetes.azure.com/scalesetpriority": "spot",
                "kubernetes.azure.com/agentpool": "gpuspot",
            },
            taints=[
                {
                    "key": "kubernetes.azure.com/scalesetpriority",
                    "value": "spot",
                    "effect": "NoSchedule",
                }
            ],
        ),
        gpu_node(
            "consolidating",
            {"karpenter.sh/capacity-type": "on-demand"},
            taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}],
        ),
        gpu_node(
            "lost",
            {},
            ready="Unknown",
            taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}],
        ),
        gpu_node("cordoned", {}, cordoned=True, pressure="DiskPressure"),
    )


def test_nodes_with_gpu_spot_labels_taints_and_conditions(emu: Emulator, conn: Connection) -> None:
    seed_nodes(emu)
    emu.seed(
        pod("train-0", node="karpenter-spot", phase="Running", gpus=4),
        pod("train-1", "team-a", node="karpenter-spot", phase="Running", gpus=2),
        pod("done", node="karpenter-spot", phase="Succeeded", gpus=8),  # terminal: holds nothing
    )
    nodes = {n.name: n for n in Inventory(conn).nodes()}
    spot = nodes["karpenter-spot"]
    assert spot.id == "k8s:karpenter-spot" and spot.backend == "k8s"
    assert spot.spot and spot.health is NodeHealth.HEALTHY and spot.schedulable
    assert spot.gpus == 8 and spot.cpus == 95 and spot.memory_mb == 1056 * 1024
    assert spot.labels["gpus_allocated"] == "6" and spot.labels["gpus_free"] == "2"
    assert (spot.labels["instance_type"], spot.labels["zone"], spot.labels["region"]) == (
        "p5.48xlarge",
        "us-east-1a",
        "us-east-1",
    )
    assert spot.labels["capacity_type"] == "spot" and spot.partitions == ["gpu"]
    assert sorted(spot.workloads) == ["k8s:Pod/default/train-0", "k8s:Pod/team-a/train-1"]
    ondemand = nodes["eks-ondemand"]
    assert (
        not ondemand.spot and ondemand.labels["capacity_type"] == "on-demand" and ondemand.gpus == 4
    )
    assert ondemand.partitions == ["ng-1"]
    reclaimed = nodes["gke-spot-reclaimed"]
    assert reclaimed.spot and reclaimed.health is NodeHealth.DEGRADED and not reclaimed.schedulable
    assert reclaimed.labels["disruption"] == "interruption" and "interruption" in reclaimed.state
    assert "cloud.google.com/impending-node-termination" in reclaimed.reason
    aks = nodes["aks-spot"]
    assert aks.spot and aks.health is NodeHealth.HEALTHY  # the AKS spot taint is not a notice
    consolidating = nodes["consolidating"]
    assert not consolidating.spot and consolidating.labels["disruption"] == "disruption"
    lost = nodes["lost"]
    assert (
        lost.health is NodeHealth.DOWN and not lost.schedulable and lost.state.startswith("unknown")
    )
    assert "Kubelet stopped posting node status." in lost.reason
    cordoned = nodes["cordoned"]
    assert cordoned.health is NodeHealth.DEGRADED and not cordoned.schedulable
    assert cordoned.state == "ready+diskpressure+cordoned"


def test_terminal_pods_do_not_hold_gpus(emu: Emulator, conn: Connection) -> None:
    seed_nodes(emu)
    emu.seed(
        pod("done", node="eks-ondemand", phase="Succeeded", gpus=4),
        pod("failed", node="eks-ondemand", phase="Failed", gpus=4),
    )
    node = next(n for n in Inventory(conn).nodes() if n.name == "eks-ondemand")
    assert node.labels["gpus_allocated"] == "0" and node.workloads == []
    selectors = [r.query.get("fieldSelector") for r in emu.requests if r.path == "/api/v1/pods"]
    assert selectors == ["status.phase!=Succeeded,status.phase!=Failed"]


def _template(gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "trainer",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def seed_every_kind(emu: Emulator) -> None:
    emu.seed(*crds.all_operators())
    ns = {"namespace": "team-a"}
    emu.seed(
        pod("solo", "team-a", node="karpenter-spot", phase="Running", gpus=1),
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", **ns, "labels": {"kueue.x-k8s.io/queue-name": "lq-gpu"}},
            "spec": {"parallelism": 2, "suspend": True, "template": _template(4)},
            "status": {},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "serve", **ns},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "x"}},
                "template": _template(1),
            },
            "status": {"replicas": 3, "readyReplicas": 3},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db", **ns},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "x"}},
                "template": _template(0),
            },
            "status": {"replicas": 0, "availableReplicas": 0},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {
                "name": "job-train-1a2b3",
                **ns,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": "train",
                        "uid": "u1",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "queueName": "lq-gpu",
                "podSets": [{"name": "main", "count": 2, "template": _template(4)}],
            },
            "status": {
                "conditions": [
                    {
                        "type": "QuotaReserved",
                        "status": "False",
                        "reason": "Pending",
                        "message": "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, 8 more needed",
                    }
                ]
            },
        },
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "bert", **ns},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": _template(8)},
                    "Worker": {"replicas": 3, "template": _template(8)},
                }
            },
            "status": {
                "conditions": [
                    {"type": "Created", "status": "True"},
                    {"type": "Running", "status": "True"},
                ]
            },
        },
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": "tune", **ns},
            "spec": {
                "entrypoint": "python tune.py",
                "rayClusterSpec": {
                    "headGroupSpec": {"template": _template(0)},
                    "workerGroupSpecs": [
                        {"groupName": "gpu", "replicas": 2, "template": _template(1)}
                    ],
                },
            },
            "status": {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"},
        },
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "shared", **ns},
            "spec": {
                "suspend": True,
                "headGroupSpec": {"template": _template(1)},
                "workerGroupSpecs": [],
            },
            "status": {"state": "suspended"},
        },
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": "llama", **ns},
            "spec": {
                "predictor": {
                    "minReplicas": 2,
                    "model": {
                        "modelFormat": {"name": "huggingface"},
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    },
                }
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    )


def test_every_workload_kind_is_inventoried(emu: Emulator, conn: Connection) -> None:
    seed_every_kind(emu)
    found = {w.id: w for w in Inventory(conn).workloads()}
    expect = {
        "k8s:Pod/team-a/solo": (WorkloadState.RUNNING, 1),
        "k8s:Job/team-a/train": (WorkloadState.STOPPED, 8),
        "k8s:Deployment/team-a/serve": (WorkloadState.RUNNING, 3),
        "k8s:StatefulSet/team-a/db": (WorkloadState.STOPPED, 0),
        "k8s:Workload/team-a/job-train-1a2b3": (WorkloadState.PENDING, 8),
        "k8s:PyTorchJob/team-a/bert": (WorkloadState.RUNNING, 32),
        "k8s:RayJob/team-a/tune": (WorkloadState.RUNNING, 2),
        "k8s:RayCluster/team-a/shared": (WorkloadState.STOPPED, 1),
        "k8s:InferenceService/team-a/llama": (WorkloadState.RUNNING, 2),
    }
    assert {k: (w.state, w.gpus) for k, w in found.items()} == expect
    solo = found["k8s:Pod/team-a/solo"]
    assert (
        solo.node == "karpenter-spot"
        and solo.namespace == "team-a"
        and solo.name == "Pod/team-a/solo"
    )
    wl = found["k8s:Workload/team-a/job-train-1a2b3"]
    assert wl.labels["queue"] == "lq-gpu" and wl.labels["owner"] == "Job/team-a/train"
    assert "insufficient unused quota for nvidia.com/gpu" in wl.message
    assert found["k8s:Job/team-a/train"].partition == "lq-gpu"


def test_operator_kinds_are_skipped_when_their_crds_are_absent(
    emu: Emulator, conn: Connection
) -> None:
    seed_every_kind(emu)
    from kubernetes import client

    ext = client.ApiextensionsV1Api(emu.api_client(token="t0ken"))
    for crd in crds.ray() + crds.kserve():
        ext.delete_custom_resource_definition(crd["metadata"]["name"])
    inv = Inventory(conn)
    kinds = {w.labels["kind"] for w in inv.workloads()}
    assert kinds == {"Pod", "Job", "Deployment", "StatefulSet", "Workload", "PyTorchJob"}
    assert "RayJob" not in inv.served_versions()
    with pytest.raises(errors.NotFound) as info:
        inv.get_workload("k8s:RayJob/team-a/tune")
    assert "rayjobs.ray.io is not installed" in info.value.message


def test_the_served_kueue_version_is_discovered(emu: Emulator, conn: Connection) -> None:
    emu.seed(*crds.kueue("v1beta2"))
    emu.seed(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": "default"},
            "spec": {"podSets": []},
        }
    )
    inv = Inventory(conn)
    assert inv.served_versions()["Workload"] == "v1beta2"
    assert [w.id for w in inv.workloads()] == ["k8s:Workload/default/w"]


def test_get_workload_reads_one_object(emu: Emulator, conn: Connection) -> None:
    seed_every_kind(emu)
    inv = Inventory(conn)
    assert inv.get_workload("k8s:pytorchjob/team-a/bert").state is WorkloadState.RUNNING
    assert inv.get_workload("Deployment/team-a/serve").gpus == 3
    with pytest.raises(errors.NotFound):
        inv.get_workload("k8s:Job/team-a/missing")


def test_namespaces_in_scope_bound_every_read(emu: Emulator, kubeconfig: Any) -> None:
    seed_every_kind(emu)
    emu.seed(pod("elsewhere", phase="Running"))
    conn = Connection(
        KubernetesConfig(kubeconfig=str(kubeconfig), context="emulator", namespaces=["default"])
    )
    emu.rules = [
        Rule(verbs=("get", "list"), resources=("*",), api_groups=("*",), namespaces=("default",)),
        Rule(verbs=("get",), resources=("*",), api_groups=("*",)),
    ]
    inv = Inventory(conn)
    assert [w.id for w in inv.workloads()] == ["k8s:Pod/default/elsewhere"]
    with pytest.raises(errors.InvalidInput) as info:
        inv.get_workload("k8s:Job/team-a/train")
    assert "outside the namespaces in scope" in info.value.message
    namespaces = {
        r.path.split("/namespaces/")[1].split("/")[0]
        for r in emu.requests
        if "/namespaces/" in r.path
    }
    assert namespaces == {"default"}


def test_rbac_denial_names_the_missing_permission(emu: Emulator, conn: Connection) -> None:
    seed_nodes(emu)
    emu.rules = [
        Rule(verbs=("list",), resources=("pods",)),
        Rule(verbs=("get",), resources=("*",), api_groups=("*",)),
    ]
    with pytest.raises(errors.OperationFailed) as info:
        Inventory(conn).nodes()
    err = info.value
    assert err.code == "kubernetes-forbidden"
    assert "refused to list nodes at cluster scope" in err.message
    assert 'resources: ["nodes"], verbs: ["list"]' in err.hint and "ClusterRoleBinding" in err.hint
    emu.rules.append(Rule(verbs=("list",), resources=("nodes",)))
    emu.seed(*crds.ray())
    with pytest.raises(errors.OperationFailed) as info:
        Inventory(conn).workloads()
    assert "refused to list jobs.batch" in info.value.message
    assert 'apiGroups: ["batch"]' in info.value.hint


@pytest.mark.parametrize("bad", HOSTILE_WORKLOADS)
def test_malformed_ids_send_no_request(emu: Emulator, conn: Connection, bad: str) -> None:
    inv = Inventory(conn)
    with emu.refuse_requests(), pytest.raises(errors.InvalidInput):
        inv.get_workload(bad)


def test_ids_are_checked_before_discovery(emu: Emulator, conn: Connection) -> None:
    with emu.refuse_requests(), pytest.raises(errors.InvalidInput):
        Inventory(conn).get_workload("k8s:Job/default/a;reboot")
    assert ids.parse_workload_id("k8s:Job/default/a").name == "a"
