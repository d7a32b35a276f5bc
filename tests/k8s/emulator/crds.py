"""CustomResourceDefinitions of the operators clawpoint inventories, for tests to register.

Minimal but real CRD manifests (apiextensions.k8s.io/v1): group, names, scope, the served
storage version and the subresources the upstream CRDs declare; schemas accept any fields
(``x-kubernetes-preserve-unknown-fields``), since the emulator does not validate schemas.
Versions are those the projects serve in 2026: Kueue ``kueue.x-k8s.io/v1beta1`` (and
``v1beta2`` via ``version=``), Kubeflow Training Operator ``kubeflow.org/v1``, Kubeflow
Trainer ``trainer.kubeflow.org/v1alpha1``, KubeRay ``ray.io/v1``, KServe
``serving.kserve.io/v1beta1``.
"""

from __future__ import annotations

from typing import Any


def crd(
    group: str,
    version: str,
    kind: str,
    plural: str,
    *,
    namespaced: bool = True,
    status: bool = True,
    scale: bool = False,
    short_names: tuple[str, ...] = (),
) -> dict[str, Any]:
    subresources: dict[str, Any] = {}
    if status:
        subresources["status"] = {}
    if scale:
        subresources["scale"] = {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
        }
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short_names:
        names["shortNames"] = list(short_names)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": names,
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                    "subresources": subresources,
                }
            ],
        },
    }


def kueue(version: str = "v1beta1") -> list[dict[str, Any]]:
    g = "kueue.x-k8s.io"
    return [
        crd(g, version, "Workload", "workloads", short_names=("wl",)),
        crd(g, version, "ClusterQueue", "clusterqueues", namespaced=False, short_names=("cq",)),
        crd(g, version, "LocalQueue", "localqueues", short_names=("queue", "queues", "lq")),
        crd(
            g,
            version,
            "ResourceFlavor",
            "resourceflavors",
            namespaced=False,
            status=False,
            short_names=("flavor",),
        ),
    ]


def kubeflow() -> list[dict[str, Any]]:
    return [
        crd("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs"),
        crd("kubeflow.org", "v1", "TFJob", "tfjobs"),
        crd("kubeflow.org", "v2beta1", "MPIJob", "mpijobs"),
        crd("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
    ]


def ray() -> list[dict[str, Any]]:
    return [
        crd("ray.io", "v1", "RayJob", "rayjobs"),
        crd("ray.io", "v1", "RayCluster", "rayclusters"),
    ]


def kserve() -> list[dict[str, Any]]:
    return [
        crd(
            "serving.kserve.io",
            "v1beta1",
            "InferenceService",
            "inferenceservices",
            short_names=("isvc",),
        )
    ]


def all_operators() -> list[dict[str, Any]]:
    return kueue() + kubeflow() + ray() + kserve()
