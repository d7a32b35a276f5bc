"""Kubernetes ids: ``k8s:KIND/NAMESPACE/NAME`` for workloads, ``k8s:NODE`` for nodes.

Every id is validated here, before any request is built: the kind must be one this backend
knows (case-insensitive, printed in its canonical spelling), the namespace an RFC 1123
label, names RFC 1123 subdomains (lower case letters, digits, ``-`` and ``.``, at most 253
characters; so no ``/``, ``..``, spaces, quotes or shell characters ever reach a URL or a
log line). Bad ids raise ``InvalidInput`` naming what is wrong. No I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core import errors

BACKEND = "k8s"
PREFIX = f"{BACKEND}:"

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Anything outside these can never be part of a valid id; report it by name.
_ALLOWED_CHARS = re.compile(r"^[A-Za-z0-9./:-]*$")


@dataclass(frozen=True)
class WorkloadKind:
    """A workload kind this backend inventories: where the API serves it."""

    kind: str
    group: str
    plural: str
    versions: tuple[str, ...]  # candidates, preferred first; discovery picks the served one
    builtin: bool = False
    aliases: tuple[str, ...] = ()

    @property
    def crd(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


WORKLOAD_KINDS: tuple[WorkloadKind, ...] = (
    WorkloadKind("Pod", "", "pods", ("v1",), builtin=True, aliases=("pods", "po")),
    WorkloadKind("Job", "batch", "jobs", ("v1",), builtin=True, aliases=("jobs",)),
    WorkloadKind("Deployment", "apps", "deployments", ("v1",), builtin=True, aliases=("deploy",)),
    WorkloadKind("StatefulSet", "apps", "statefulsets", ("v1",), builtin=True, aliases=("sts",)),
    WorkloadKind(
        "Workload", "kueue.x-k8s.io", "workloads", ("v1beta2", "v1beta1"), aliases=("wl",)
    ),
    WorkloadKind("PyTorchJob", "kubeflow.org", "pytorchjobs", ("v1",)),
    WorkloadKind("TFJob", "kubeflow.org", "tfjobs", ("v1",)),
    WorkloadKind("MPIJob", "kubeflow.org", "mpijobs", ("v2beta1",)),
    WorkloadKind("TrainJob", "trainer.kubeflow.org", "trainjobs", ("v1alpha1",)),
    WorkloadKind("RayJob", "ray.io", "rayjobs", ("v1",)),
    WorkloadKind("RayCluster", "ray.io", "rayclusters", ("v1",)),
    WorkloadKind(
        "InferenceService",
        "serving.kserve.io",
        "inferenceservices",
        ("v1beta1",),
        aliases=("isvc",),
    ),
)

_BY_NAME: dict[str, WorkloadKind] = {}
for _k in WORKLOAD_KINDS:
    for _alias in (_k.kind, _k.plural, *_k.aliases):
        _BY_NAME[_alias.lower()] = _k


@dataclass(frozen=True)
class WorkloadRef:
    kind: WorkloadKind
    namespace: str
    name: str

    @property
    def path(self) -> str:
        """``KIND/NAMESPACE/NAME``: the workload name below the backend prefix."""
        return f"{self.kind.kind}/{self.namespace}/{self.name}"

    def __str__(self) -> str:
        return PREFIX + self.path


def _bad(what: str, value: str, why: str, hint: str) -> errors.InvalidInput:
    return errors.InvalidInput(
        f"invalid Kubernetes {what} {value!r}: {why}",
        hint=hint,
        details={"id": value},
    )


def _strip_prefix(value: object, what: str, example: str) -> str:
    if not isinstance(value, str) or not value:
        raise errors.InvalidInput(f"empty Kubernetes {what} id", hint=f"pass an id like {example}")
    if len(value) > 600:
        raise _bad(
            f"{what} id",
            value[:40] + "...",
            "longer than any valid id",
            f"pass an id like {example}",
        )
    bad = sorted({c for c in value if not _ALLOWED_CHARS.fullmatch(c)})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        raise _bad(
            f"{what} id",
            value,
            f"it contains {shown}; ids use only letters, digits, '-', '.', '/' and one ':'",
            f"pass an id like {example} (list them with the inventory)",
        )
    backend, sep, rest = value.partition(":")
    if sep:
        if backend != BACKEND:
            raise _bad(
                f"{what} id",
                value,
                f"the prefix {backend!r} is not {BACKEND!r}",
                f"pass an id like {example}",
            )
        return rest
    return value


def kind_named(name: str) -> WorkloadKind:
    """The workload kind called ``name`` (any case, plural or short name)."""
    found = _BY_NAME.get(name.lower()) if isinstance(name, str) else None
    if found is None:
        known = ", ".join(k.kind for k in WORKLOAD_KINDS)
        raise errors.InvalidInput(
            f"unknown Kubernetes workload kind {name!r}",
            hint=f"use one of: {known}",
            details={"kind": name},
        )
    return found


def check_namespace(value: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _LABEL.fullmatch(value):
        raise _bad(
            "namespace",
            str(value),
            "a namespace is an RFC 1123 label (at most 63 lower case letters, digits or '-', "
            "starting and ending with a letter or digit)",
            "list the namespaces (kubectl get namespaces) and pass one of those",
        )
    return value


def check_name(value: str, *, what: str = "name") -> str:
    if not isinstance(value, str) or len(value) > 253 or not _SUBDOMAIN.fullmatch(value):
        raise _bad(
            what,
            str(value),
            "names are RFC 1123 subdomains (at most 253 lower case letters, digits, '-' or "
            "'.', each dot-separated part starting and ending with a letter or digit)",
            "list the objects and pass a name from the list",
        )
    return value


def parse_workload_id(value: str) -> WorkloadRef:
    """``[k8s:]KIND/NAMESPACE/NAME`` -> ``WorkloadRef``; InvalidInput for anything else."""
    example = "k8s:Job/default/train"
    body = _strip_prefix(value, "workload", example)
    parts = body.split("/")
    if len(parts) != 3 or not all(parts):
        raise _bad(
            "workload id",
            value,
            "expected KIND/NAMESPACE/NAME (three parts separated by '/')",
            f"pass an id like {example}",
        )
    kind_s, namespace, name = parts
    return WorkloadRef(kind_named(kind_s), check_namespace(namespace), check_name(name))


def parse_node_id(value: str) -> str:
    """``[k8s:]NODE`` -> the node name; InvalidInput for anything else."""
    body = _strip_prefix(value, "node", "k8s:gpu-node-1")
    return check_name(body, what="node name")


def format_workload_id(kind: str, namespace: str, name: str) -> str:
    return str(WorkloadRef(kind_named(kind), check_namespace(namespace), check_name(name)))


def format_node_id(name: str) -> str:
    return PREFIX + check_name(name, what="node name")
