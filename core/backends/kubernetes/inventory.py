"""Kubernetes inventory: ``Inventory`` reads nodes and workloads from the cluster and maps
them (``node_info``, ``workload_info``) into ``NodeInfo`` / ``WorkloadInfo``.

Workloads: Pods, Jobs, Deployments and StatefulSets always; Kueue Workloads, Kubeflow
training jobs (PyTorchJob, TFJob, MPIJob, TrainJob), RayJobs, RayClusters and KServe
InferenceServices when discovery shows their CRDs (the served version is picked from
``ids.WORKLOAD_KINDS``, preferred first).

A 403 on any kind, an operator's included, raises (naming the permission) rather than
silently leaving that kind out. All parsing is done on the raw JSON (pure functions in
``objects``, ``node_info`` and ``workload_info``), so a field the client's models do not
know never breaks a read. Limits: a snapshot; allocated GPUs count only pods in the
namespaces in scope; pods report their own ids, not their owners'.
"""

from __future__ import annotations

from typing import Any

from core import errors
from core.backends.kubernetes import ids
from core.backends.kubernetes.connection import Connection, Op
from core.backends.kubernetes.lineages import STANDBY_ANNOTATION
from core.backends.kubernetes.node_info import NodeDetail, node_detail, to_node_info
from core.backends.kubernetes.objects import pod_spec_gpus
from core.backends.kubernetes.workload_info import to_workload
from core.model import NodeInfo, WorkloadInfo

Obj = dict[str, Any]


# ----- reading from the cluster ------------------------------------------------------------


class Inventory:
    """Reads nodes and workloads through a ``Connection`` (namespaces in scope respected)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._served: dict[str, str] | None = None  # kind -> served version

    # discovery
    def served_versions(self, *, refresh: bool = False) -> dict[str, str]:
        """Kind -> the version the cluster serves, for every kind in ``ids.WORKLOAD_KINDS``."""
        if self._served is not None and not refresh:
            return self._served
        served: dict[str, str] = {k.kind: k.versions[0] for k in ids.WORKLOAD_KINDS if k.builtin}
        apis = self.conn.api("ApisApi")
        groups = self.conn.call_json(Op("get", "apis"), apis.get_api_versions).get("groups") or []
        offered = {
            str(g.get("name")): [str(v.get("version")) for v in g.get("versions") or []]
            for g in groups
        }
        custom = self.conn.api("CustomObjectsApi")
        resources: dict[tuple[str, str], set[str]] = {}
        for kind in ids.WORKLOAD_KINDS:
            if kind.builtin or kind.group not in offered:
                continue
            for version in kind.versions:
                if version not in offered[kind.group]:
                    continue
                key = (kind.group, version)
                if key not in resources:
                    body = self.conn.call_json(
                        Op("get", "apis", group=kind.group),
                        custom.get_api_resources,
                        kind.group,
                        version,
                    )
                    resources[key] = {str(r.get("name")) for r in body.get("resources") or []}
                if kind.plural in resources[key]:
                    served[kind.kind] = version
                    break
        self._served = served
        return served

    # raw lists
    def _list(self, kind: ids.WorkloadKind, version: str, **selectors: str) -> list[Obj]:
        namespaces = self.conn.scoped_namespaces
        out: list[Obj] = []
        if kind.builtin:
            api_name, method = {
                "Pod": ("CoreV1Api", "pod"),
                "Job": ("BatchV1Api", "job"),
                "Deployment": ("AppsV1Api", "deployment"),
                "StatefulSet": ("AppsV1Api", "stateful_set"),
            }[kind.kind]
            api = self.conn.api(api_name)
            if namespaces is None:
                fn = getattr(api, f"list_{method}_for_all_namespaces")
                out += self.conn.list_all(Op("list", kind.plural, kind.group), fn, **selectors)
            for ns in namespaces or []:
                fn = getattr(api, f"list_namespaced_{method}")
                out += self.conn.list_all(
                    Op("list", kind.plural, kind.group, ns), fn, ns, **selectors
                )
            return out
        custom = self.conn.api("CustomObjectsApi")
        if namespaces is None:
            out += self.conn.list_all(
                Op("list", kind.plural, kind.group),
                custom.list_custom_object_for_all_namespaces,
                kind.group,
                version,
                kind.plural,
                **selectors,
            )
        for ns in namespaces or []:
            out += self.conn.list_all(
                Op("list", kind.plural, kind.group, ns),
                custom.list_namespaced_custom_object,
                kind.group,
                version,
                ns,
                kind.plural,
                **selectors,
            )
        return out

    def raw_pods(self, **selectors: str) -> list[Obj]:
        return self._list(ids.kind_named("Pod"), "v1", **selectors)

    def raw_nodes(self) -> list[Obj]:
        core = self.conn.api("CoreV1Api")
        return list(self.conn.list_all(Op("list", "nodes"), core.list_node))

    def raw(self, kind_name: str) -> list[Obj]:
        """Every object of a workload kind in scope; [] when its CRD is not served."""
        kind = ids.kind_named(kind_name)
        version = self.served_versions().get(kind.kind)
        return [] if version is None else self._list(kind, version)

    # the core model
    def node_details(self) -> list[NodeDetail]:
        nodes = self.raw_nodes()
        live = self.raw_pods(field_selector="status.phase!=Succeeded,status.phase!=Failed")
        by_node: dict[str, list[Obj]] = {}
        for p in live:
            name = (p.get("spec") or {}).get("nodeName")
            if name:
                by_node.setdefault(str(name), []).append(p)
        label = self.conn.config.gpu_class_label
        return [node_detail(n, by_node.get(str(n["metadata"]["name"]), []), label) for n in nodes]

    def nodes(self) -> list[NodeInfo]:
        return [to_node_info(d) for d in self.node_details()]

    def workloads(self) -> list[WorkloadInfo]:
        out: list[WorkloadInfo] = []
        served = self.served_versions()
        for kind in ids.WORKLOAD_KINDS:
            version = served.get(kind.kind)
            if version is None:
                continue
            raws = self._list(kind, version)
            if kind.kind == "Pod":  # a live move's standby is not a workload (yet)
                raws = [r for r in raws if not is_standby(r)]
            labels = self._gpu_node_labels(raws) if kind.kind == "Pod" else None
            out += [self._workload(kind, raw, labels) for raw in raws]
        return out

    def _workload(
        self, kind: ids.WorkloadKind, raw: Obj, labels: dict[str, dict[str, str]] | None
    ) -> WorkloadInfo:
        return to_workload(kind, raw, labels, self.conn.config.gpu_class_label)

    def _gpu_node_labels(self, pods: list[Obj]) -> dict[str, dict[str, str]] | None:
        """Node -> labels, read only when a pod with GPUs does not select its GPU class
        itself (its class is then its node's)."""
        label = self.conn.config.gpu_class_label
        if not any(
            pod_spec_gpus(p.get("spec"))
            and label not in ((p.get("spec") or {}).get("nodeSelector") or {})
            for p in pods
        ):
            return None
        return {
            str(n["metadata"]["name"]): dict((n.get("metadata") or {}).get("labels") or {})
            for n in self.raw_nodes()
        }

    def get_workload(self, workload_id: str) -> WorkloadInfo:
        """One workload by id; the id is validated before any request is sent."""
        ref = ids.parse_workload_id(workload_id)
        raw = self.read_raw(ref)
        labels = self._gpu_node_labels([raw]) if ref.kind.kind == "Pod" else None
        return self._workload(ref.kind, raw, labels)

    def read_raw(self, ref: ids.WorkloadRef) -> Obj:
        """The object behind ``ref`` as the API returns it; the namespace scope and whether
        the cluster serves the kind are checked before any request is sent."""
        scope = self.conn.scoped_namespaces
        if scope is not None and ref.namespace not in scope:
            raise errors.InvalidInput(
                f"namespace {ref.namespace!r} is outside the namespaces in scope ({', '.join(scope)})",
                hint="add it to k8s.namespaces or pass a workload from a namespace in scope",
            )
        version = self.served_versions().get(ref.kind.kind)
        if version is None:
            raise errors.NotFound(
                f"this cluster does not serve {ref.kind.kind} ({ref.kind.crd} is not installed)",
                hint="install its operator, or list the workloads this cluster has",
            )
        op = Op("get", ref.kind.plural, ref.kind.group, ref.namespace, ref.name)
        if ref.kind.builtin:
            api_name, method = {
                "Pod": ("CoreV1Api", "read_namespaced_pod"),
                "Job": ("BatchV1Api", "read_namespaced_job"),
                "Deployment": ("AppsV1Api", "read_namespaced_deployment"),
                "StatefulSet": ("AppsV1Api", "read_namespaced_stateful_set"),
            }[ref.kind.kind]
            return self.conn.call_json(
                op, getattr(self.conn.api(api_name), method), ref.name, ref.namespace
            )
        custom = self.conn.api("CustomObjectsApi")
        return self.conn.call_json(
            op,
            custom.get_namespaced_custom_object,
            ref.kind.group,
            version,
            ref.namespace,
            ref.kind.plural,
            ref.name,
        )


def is_standby(pod: Obj) -> bool:
    """A live move's standby pod that has not taken the workload over yet."""
    return STANDBY_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})
