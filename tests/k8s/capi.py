"""Cluster API for the tests: its CRDs in the emulator and a controller that makes Machines
and Nodes follow a MachineDeployment's replicas (the emulator runs no Cluster API).

``ClusterAPI(emu, kubelet).start()`` runs one thread that, every ``poll_s``, does what the
MachineDeployment, MachineSet and Machine controllers do together, by upstream's rules
(kubernetes-sigs/cluster-api, internal/controllers/{machinedeployment,machineset,machine}):

- **Scale**: a MachineDeployment with fewer live Machines than ``spec.replicas`` gets new ones
  (named ``MD-XXXXX``, labelled ``cluster.x-k8s.io/deployment-name`` and
  ``cluster.x-k8s.io/cluster-name``, finalizer ``machine.cluster.x-k8s.io``); one with more
  deletes the surplus, Machines annotated ``cluster.x-k8s.io/delete-machine`` first
  (machineset_delete_policy.go: the annotation makes a Machine ``mustDelete`` under every
  delete policy), then the newest (the ``Newest`` policy; upstream's default, ``Random``,
  is not reproducible in a test).
- **Machine → Node**: a new Machine's infrastructure comes up at once: a Node of the same
  name with ``spec.providerID`` ``emulated://NAME``, Ready, handed to the fake kubelet; the
  Machine's ``status.nodeRef`` and ``spec.providerID`` point at it (phase Running).
- **Machine deletion**: the Node is cordoned and drained (every pod evicted through the
  eviction API as ``kubectl drain`` does, so budgets hold; DaemonSet and mirror pods left),
  then the Node is deleted, the kubelet told, and the finalizer removed.
- **Status**: ``status.replicas``, ``readyReplicas`` and ``selector`` (the scale
  subresource's ``labelSelectorPath``).

The API server's own refusals are the emulator's: the ``scale`` subresource takes only a
whole ``spec.replicas`` >= 0 (apimachinery validation of autoscaling/v1 Scale). It accepts a
size above the autoscaler's max annotation (the annotation is cluster-autoscaler's, no
webhook checks it on scale), so only clawpoint's plan refuses that.

Not modelled: MachineSets as objects (the MachineDeployment owns its Machines here), rolling
updates, MachineHealthChecks, infrastructure and bootstrap templates.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from typing import Any

from tests.k8s.conftest import node as node_manifest
from tests.k8s.emulator import crds, status, workloads
from tests.k8s.emulator.store import Obj

GROUP, VERSION = "cluster.x-k8s.io", "v1beta1"
DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"
CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
DELETE_ANNOTATION = "cluster.x-k8s.io/delete-machine"
FINALIZER = "machine.cluster.x-k8s.io"
MIN_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
MAX_ANNOTATION = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"


def capi_crds() -> list[dict[str, Any]]:
    """MachineDeployment (status, and scale: specpath .spec.replicas, statuspath
    .status.replicas, selectorpath .status.selector, as its kubebuilder markers say) and
    Machine (status)."""
    md = crds.crd(GROUP, VERSION, "MachineDeployment", "machinedeployments", scale=True,
                  short_names=("md",))  # fmt: skip
    sub = md["spec"]["versions"][0]["subresources"]["scale"]
    sub["labelSelectorPath"] = ".status.selector"
    return [md, crds.crd(GROUP, VERSION, "Machine", "machines", short_names=("ma",))]


def machine_deployment(
    name: str, replicas: int, *, min_size: int | None = 0, max_size: int | None = 4,
    namespace: str = "default", cluster: str = "c1",
) -> dict[str, Any]:  # fmt: skip
    notes = {}
    if min_size is not None:
        notes[MIN_ANNOTATION] = str(min_size)
    if max_size is not None:
        notes[MAX_ANNOTATION] = str(max_size)
    labels = {CLUSTER_LABEL: cluster, DEPLOYMENT_LABEL: name}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": namespace, "annotations": notes},
        "spec": {
            "clusterName": cluster,
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"clusterName": cluster}},
        },
    }


def machine_of(md: str, node: str, *, namespace: str = "default") -> dict[str, Any]:
    """A Machine of MachineDeployment ``md`` that runs ``node`` (status.nodeRef)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Machine",
        "metadata": {"name": f"{md}-{node}", "namespace": namespace,
                     "labels": {DEPLOYMENT_LABEL: md}, "finalizers": [FINALIZER]},
        "spec": {"clusterName": "c1"},
        "status": {"phase": "Running",
                   "nodeRef": {"apiVersion": "v1", "kind": "Node", "name": node}},
    }  # fmt: skip


class ClusterAPI:
    """The Cluster API controllers over the emulator's store, with the fake kubelet."""

    def __init__(self, emu: Any, kubelet: Any = None, *, poll_s: float = 0.05) -> None:
        self.emu, self.store, self.kubelet, self.poll_s = emu, emu.store, kubelet, poll_s
        self.errors: list[str] = []
        self.deleted: list[str] = []  # Machines deleted, in order
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seq = 0

    def kind(self, plural: str) -> Any:
        return self.store.kinds[(GROUP, plural)] if plural != "nodes" else self.store.kinds[
            ("", "nodes")]  # fmt: skip

    # ----- lifecycle --------------------------------------------------------------------
    def start(self) -> ClusterAPI:
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-capi")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> ClusterAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except status.ApiError as exc:
                if exc.code not in (404, 409):
                    self.errors.append(repr(exc))
            except Exception as exc:  # keep running; the test reads .errors
                self.errors.append(repr(exc))
            self._stop.wait(self.poll_s)

    # ----- one pass -----------------------------------------------------------------------
    def sync(self) -> None:
        with self.store.lock:
            mds, _ = self.store.list(self.kind("machinedeployments"), None, lambda o: True)
            machines, _ = self.store.list(self.kind("machines"), None, lambda o: True)
        for m in machines:
            if m["metadata"].get("deletionTimestamp"):
                self._finish_deletion(m)
        for md in mds:
            self._scale(md, machines)

    def _of(self, md: Obj, machines: list[Obj]) -> list[Obj]:
        name, ns = md["metadata"]["name"], md["metadata"]["namespace"]
        return [
            m for m in machines
            if (m["metadata"].get("labels") or {}).get(DEPLOYMENT_LABEL) == name
            and m["metadata"]["namespace"] == ns
        ]  # fmt: skip

    def _scale(self, md: Obj, machines: list[Obj]) -> None:
        mine = [m for m in self._of(md, machines) if not m["metadata"].get("deletionTimestamp")]
        want = int((md.get("spec") or {}).get("replicas") or 0)
        for _ in range(want - len(mine)):
            mine.append(self._create_machine(md))
        if len(mine) > want:
            # mustDelete (annotated) first, then the newest
            order = sorted(
                mine,
                key=lambda m: (
                    DELETE_ANNOTATION not in (m["metadata"].get("annotations") or {}),
                    -int(m["metadata"]["resourceVersion"]),
                ),
            )
            for m in order[: len(mine) - want]:
                self.store.delete(self.kind("machines"), m["metadata"]["namespace"],
                                  m["metadata"]["name"])  # fmt: skip
                self.deleted.append(m["metadata"]["name"])
        live = [m for m in mine if not m["metadata"].get("deletionTimestamp")]
        ready = sum(1 for m in live if (m.get("status") or {}).get("nodeRef"))
        sel = ",".join(f"{k}={v}" for k, v in sorted(md["spec"]["selector"]["matchLabels"].items()))
        new_status = {"replicas": len(live), "readyReplicas": ready, "selector": sel}
        if (md.get("status") or {}) != new_status:
            with contextlib.suppress(status.ApiError):
                self.store.set_status(self.kind("machinedeployments"),
                                      md["metadata"]["namespace"], md["metadata"]["name"],
                                      new_status)  # fmt: skip

    def _create_machine(self, md: Obj) -> Obj:
        self._seq += 1
        ns, md_name = md["metadata"]["namespace"], md["metadata"]["name"]
        name = f"{md_name}-{int(time.time() * 1000) % 100000:05d}{self._seq}"
        pid = f"emulated://{name}"
        labels = dict(
            ((md["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
        )
        labels[DEPLOYMENT_LABEL] = md_name
        self.store.create(self.kind("nodes"), "", {**node_manifest(name), "spec": {"providerID": pid}},
                          api=False)  # fmt: skip
        if self.kubelet is not None:
            with self.kubelet._lock:
                self.kubelet.nodes.add(name)
        self.store.create(
            self.kind("machines"), ns,
            {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Machine",
                "metadata": {"name": name, "namespace": ns, "labels": labels,
                             "finalizers": [FINALIZER]},
                "spec": {"clusterName": md["spec"].get("clusterName", ""), "providerID": pid},
            },
            api=False,
        )  # fmt: skip
        st = {"phase": "Running", "nodeRef": {"apiVersion": "v1", "kind": "Node", "name": name}}
        made: Obj = self.store.set_status(self.kind("machines"), ns, name, st)
        return made

    def _finish_deletion(self, machine: Obj) -> None:
        """The Machine controller's deletion: drain the Node, delete it, drop the finalizer."""
        ns, name = machine["metadata"]["namespace"], machine["metadata"]["name"]
        node = ((machine.get("status") or {}).get("nodeRef") or {}).get("name")
        if node and not self._drained(node):
            return
        if node:
            with contextlib.suppress(status.ApiError):
                self.store.delete(self.kind("nodes"), "", node)
            if self.kubelet is not None:
                with self.kubelet._lock:
                    self.kubelet.nodes.discard(node)
        current = copy.deepcopy(self.store.get(self.kind("machines"), ns, name))
        current["metadata"]["finalizers"] = [
            f for f in current["metadata"].get("finalizers") or [] if f != FINALIZER
        ]
        self.store.update(self.kind("machines"), ns, name, current, api=False)

    def _drained(self, node: str) -> bool:
        nodes_kind, pods_kind = self.kind("nodes"), self.store.kinds[("", "pods")]
        try:
            obj = copy.deepcopy(self.store.get(nodes_kind, "", node))
        except status.ApiError:
            return True
        if not obj["spec"].get("unschedulable"):
            obj["spec"]["unschedulable"] = True
            self.store.update(nodes_kind, "", node, obj, api=False)
        pods, _ = self.store.list(pods_kind, None,
                                  lambda p: (p.get("spec") or {}).get("nodeName") == node)  # fmt: skip
        left = []
        for p in pods:
            m = p["metadata"]
            owners = {o.get("kind") for o in m.get("ownerReferences") or []}
            if "DaemonSet" in owners or "Node" in owners:
                continue
            if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            left.append(p)
            if not m.get("deletionTimestamp"):
                with contextlib.suppress(status.ApiError):  # a budget: tried again next pass
                    workloads.evict(self.store, m["namespace"], m["name"], {}, dry_run=False)
        return not left
