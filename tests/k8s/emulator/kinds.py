"""The resource types the emulator serves: built-in kinds, and custom ones from CRDs.

A ``Kind`` holds what the API server knows about a resource: group/version, plural and
kind names, scope, subresources, which field selectors it accepts, how its names are
validated. Built-ins cover what the clawpoint backend relies on (namespaces, nodes, pods,
apps/v1 deployments and statefulsets, batch/v1 jobs, policy/v1 PodDisruptionBudgets,
coordination.k8s.io/v1 Leases, CRDs themselves). Custom kinds appear when a CustomResourceDefinition is created (see
``from_crd``); only the CRD's storage version is served.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    fields: frozenset[str] = COMMON_FIELDS
    name_format: str = "subdomain"  # "subdomain" (RFC 1123 subdomain) or "label"
    builtin: bool = True
    categories: tuple[str, ...] = ()
    defaults: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


def _k(group: str, version: str, plural: str, kind: str, namespaced: bool, **kw: Any) -> Kind:
    return Kind(group, version, plural, kind, namespaced, singular=kind.lower(), **kw)


BUILTIN: tuple[Kind, ...] = (
    _k(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        short_names=("ns",),
        subresources=frozenset({"status"}),
        fields=COMMON_FIELDS | {"status.phase"},
        name_format="label",
    ),
    _k(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        short_names=("no",),
        subresources=frozenset({"status", "proxy"}),
        fields=COMMON_FIELDS | {"spec.unschedulable"},
    ),
    _k(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        short_names=("po",),
        subresources=frozenset({"status", "eviction", "resize"}),
        fields=COMMON_FIELDS
        | {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        },
        categories=("all",),
    ),
    _k(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        short_names=("deploy",),
        subresources=frozenset({"status", "scale"}),
        categories=("all",),
    ),
    _k(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        short_names=("sts",),
        subresources=frozenset({"status", "scale"}),
        categories=("all",),
    ),
    _k(
        "batch",
        "v1",
        "jobs",
        "Job",
        True,
        subresources=frozenset({"status"}),
        fields=COMMON_FIELDS | {"status.successful"},
        categories=("all",),
    ),
    _k("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",)),
    _k(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        True,
        short_names=("pvc",),
        subresources=frozenset({"status"}),
    ),
    _k(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        short_names=("pdb",),
        subresources=frozenset({"status"}),
    ),
    # Node heartbeats: each kubelet renews ``kube-node-lease/<node>`` (coordination.k8s.io/v1,
    # namespaced; kubernetes/kubernetes pkg/apis/coordination/types.go). No status subresource.
    _k("coordination.k8s.io", "v1", "leases", "Lease", True),
    _k(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        short_names=("crd", "crds"),
        subresources=frozenset({"status"}),
    ),
)

# Where the apiserver's preferred version of each built-in group lives (discovery order).
BUILTIN_GROUPS = ("apps", "batch", "policy", "coordination.k8s.io", "apiextensions.k8s.io")


def from_crd(crd: dict[str, Any]) -> Kind:
    """The served kind of a CustomResourceDefinition (its storage version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    versions = spec.get("versions") or []
    storage = next((v for v in versions if v.get("storage")), versions[0] if versions else {})
    subs = set((storage.get("subresources") or {}).keys())
    selectable = {
        str(f.get("jsonPath", "")).lstrip(".")
        for f in storage.get("selectableFields") or []
        if f.get("jsonPath")
    }
    return Kind(
        group=str(spec.get("group", "")),
        version=str(storage.get("name", "v1")),
        plural=str(names.get("plural", "")),
        kind=str(names.get("kind", "")),
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        singular=str(names.get("singular") or str(names.get("kind", "")).lower()),
        short_names=tuple(names.get("shortNames") or ()),
        subresources=frozenset(subs),
        fields=COMMON_FIELDS | selectable,
        builtin=False,
        categories=tuple(names.get("categories") or ()),
    )


def discovery_entry(kind: Kind) -> list[dict[str, Any]]:
    """The APIResourceList entries of a kind: the resource, then each subresource."""
    main: dict[str, Any] = {
        "name": kind.plural,
        "singularName": kind.singular,
        "namespaced": kind.namespaced,
        "kind": kind.kind,
        "verbs": list(ALL_VERBS),
    }
    if kind.short_names:
        main["shortNames"] = list(kind.short_names)
    if kind.categories:
        main["categories"] = list(kind.categories)
    entries = [main]
    for sub in sorted(kind.subresources):
        if sub == "status":
            entries.append(
                {
                    "name": f"{kind.plural}/status",
                    "singularName": "",
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        elif sub == "scale":
            entries.append(
                {
                    "name": f"{kind.plural}/scale",
                    "singularName": "",
                    "namespaced": kind.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }
            )
        elif sub == "eviction":
            entries.append(
                {
                    "name": f"{kind.plural}/eviction",
                    "singularName": "",
                    "namespaced": kind.namespaced,
                    "group": "policy",
                    "version": "v1",
                    "kind": "Eviction",
                    "verbs": ["create"],
                }
            )
        elif sub == "resize":
            entries.append(
                {
                    "name": f"{kind.plural}/resize",
                    "singularName": "",
                    "namespaced": kind.namespaced,
                    "kind": kind.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        elif sub == "proxy":
            entries.append(
                {
                    "name": f"{kind.plural}/proxy",
                    "singularName": "",
                    "namespaced": kind.namespaced,
                    "kind": "NodeProxyOptions",
                    "verbs": ["create", "delete", "get", "patch", "update"],
                }
            )
    return entries
