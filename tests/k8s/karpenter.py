"""Karpenter's disruption of a node, modelled for the tests (the emulator runs no Karpenter).

``Karpenter(emu).disrupt(node, reason)`` does what Karpenter does to one candidate node,
by its documented rules (kubernetes-sigs/karpenter at 2266468, 2026-08-20; karpenter.sh
"Disruption" and "Well-Known Annotations"):

- **Which pods block.** A pod blocks when it is active (not Succeeded/Failed, no
  ``deletionTimestamp``: ``IsActive``) and ``karpenter.sh/do-not-disrupt`` is active on it:
  the value ``"true"``, or a positive Go duration not yet elapsed since ``status.startTime``
  (no start time: still active); any other value counts as absent
  (pkg/utils/pod/scheduling.go ``IsDisruptable``, ``IsDoNotDisruptActive``). On the Node the
  annotation blocks only with ``"true"`` (pkg/controllers/state/statenode.go
  ``ValidateNodeDisruptable``). The check is ``ValidatePodsDisruptable``, which also refuses a
  node whose pods a PodDisruptionBudget would not let go (asked here as the eviction API
  answers a dry run).
- **Which methods it blocks.** The graceful class, consolidation (``Underutilized``) and
  emptiness (``Empty``), always; the eventual class, drift (``Drifted``), unless the
  NodeClaim sets ``terminationGracePeriod`` (pkg/controllers/disruption/types.go
  ``NewCandidate``, drift.go/emptiness.go/*consolidation.go ``Class``). Blocked: ``Refused``,
  nothing changed (Karpenter skips the candidate and tries again later).
- **What it does not block.** Expiration (``Expired``), a spot interruption
  (``Interrupted``) and a forceful deletion of the node (``Deleted``) go through the
  termination controller whatever the pods say: it evicts what ``IsEvictable`` allows, and a
  pod with the annotation goes when the node's ``terminationGracePeriod`` runs out or the
  instance is gone, modelled here as its deletion (the kubelet sends SIGTERM either way).
- **How a node goes.** Tainted ``karpenter.sh/disrupted:NoSchedule`` (v1
  ``DisruptedNoScheduleTaint``), each evictable pod evicted through the eviction API (so the
  pods get their grace period and SIGTERM), mirror pods left, then, once no active pod is left
  on it, the Node deleted; ``on_node_gone`` tells the fake kubelet the machine is gone.

**NodePools and NodeClaims** (``karpenter_crds``, ``nodepool``, ``seed_claimed_node``,
``Termination``): the karpenter.sh/v1 CRDs as upstream declares them (both cluster-scoped;
NodePool with the ``status`` and ``scale`` subresources, specpath ``.spec.replicas`` and
statuspath ``.status.nodes``: pkg/apis/v1/nodepool.go; NodeClaim with ``status``:
nodeclaim.go), a node of a NodePool labelled ``karpenter.sh/nodepool`` and
``karpenter.sh/initialized`` with a NodeClaim (finalizer ``karpenter.sh/termination``) whose
``status.nodeName`` names it, and the termination of a deleted NodeClaim
(pkg/controllers/node/termination, nodeclaim/lifecycle): the node tainted
``karpenter.sh/disrupted:NoSchedule``, its pods evicted through the eviction API (a budget
refusal is tried again; a pod with an active ``karpenter.sh/do-not-disrupt`` is not evicted
and holds the node, as without a ``terminationGracePeriod``), then the Node deleted, the
kubelet told, and the finalizer removed. The API server refuses nothing about a NodeClaim's
deletion, and budgets do not limit a deletion made by hand (karpenter.sh "Disruption",
manual methods): only clawpoint's plan checks them.

Not modelled: the choice of candidates (the test names the node), replacement nodes,
provisioning for pending pods, the 15 s consolidation validation wait.
"""

from __future__ import annotations

import contextlib
import copy
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.k8s.conftest import node as node_manifest
from tests.k8s.emulator import crds, status, workloads
from tests.k8s.emulator.store import Obj

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
DISRUPTED_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
GRACEFUL = ("Underutilized", "Empty")
EVENTUAL = ("Drifted",)
FORCEFUL = ("Expired", "Interrupted", "Deleted")
_UNIT_NS = {"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class Refused(Exception):
    """Karpenter does not disrupt the node now (the reason as its event says it)."""


@dataclass
class Disruption:
    node: str
    reason: str
    evicted: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def go_duration_s(value: str) -> float | None:
    """Go's ``time.ParseDuration`` for the forms it accepts (seconds; None when invalid)."""
    text = value[1:] if value[:1] in "+-" else value
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(text):
        m = _PART.match(text, pos)
        if m is None:
            return None
        total += float(m.group(1)) * _UNIT_NS[m.group(2)] / 1e9
        pos = m.end()
    if not text:
        return None
    return -total if value.startswith("-") else total


def _ts(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_active(pod: Obj) -> bool:
    return not _terminal(pod) and not pod["metadata"].get("deletionTimestamp")


def do_not_disrupt_active(pod: Obj, now: datetime) -> bool:
    value = (pod["metadata"].get("annotations") or {}).get(DO_NOT_DISRUPT)
    if value is None:
        return False
    if value == "true":
        return True
    duration = go_duration_s(value)
    if duration is None or duration <= 0:
        return False  # invalid: as if absent (Karpenter records an event)
    started = _ts((pod.get("status") or {}).get("startTime"))
    return started is None or (now - started).total_seconds() < duration


def _mirror(pod: Obj) -> bool:
    return any(o.get("kind") == "Node" for o in pod["metadata"].get("ownerReferences") or [])


class Karpenter:
    """Karpenter's disruption of one named node, over the emulator's store."""

    def __init__(
        self,
        emu: object,
        *,
        termination_grace_period: bool = False,
        on_node_gone: Callable[[str], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = emu.store  # type: ignore[attr-defined]
        self.tgp = termination_grace_period  # the NodeClaim's spec.terminationGracePeriod set
        self.on_node_gone = on_node_gone
        self.clock = clock
        self.pods_kind = self.store.kinds[("", "pods")]
        self.nodes_kind = self.store.kinds[("", "nodes")]

    def pods_on(self, node: str) -> list[Obj]:
        items, _ = self.store.list(
            self.pods_kind, None, lambda p: (p.get("spec") or {}).get("nodeName") == node
        )
        return list(items)

    def blockers(self, node: str) -> list[str]:
        """Why the node may not be disrupted gracefully now (empty: it may)."""
        now = self.clock()
        obj = self.store.get(self.nodes_kind, "", node)
        why = []
        if (obj["metadata"].get("annotations") or {}).get(DO_NOT_DISRUPT) == "true":
            why.append(f'disruption is blocked through the "{DO_NOT_DISRUPT}" annotation')
        for pod in self.pods_on(node):
            m = pod["metadata"]
            if is_active(pod) and do_not_disrupt_active(pod, now):
                why.append(f'pod {m["namespace"]}/{m["name"]} has "{DO_NOT_DISRUPT}" annotation')
        if why:
            return why
        for pod in self.pods_on(node):
            m = pod["metadata"]
            if not is_active(pod) or _mirror(pod):
                continue
            try:
                workloads.evict(self.store, m["namespace"], m["name"], {}, dry_run=True)
            except status.ApiError as exc:
                why.append(f"pdb prevents pod evictions ({m['namespace']}/{m['name']}: {exc})")
        return why

    def disrupt(
        self, node: str, reason: str = "Underutilized", timeout_s: float = 60
    ) -> Disruption:
        """Disrupt ``node`` for ``reason``; ``Refused`` (nothing changed) when Karpenter would
        not. Returns once the node is gone."""
        if reason not in GRACEFUL + EVENTUAL + FORCEFUL:
            raise ValueError(f"not a disruption reason Karpenter has: {reason}")
        checked = reason in GRACEFUL or (reason in EVENTUAL and not self.tgp)
        if checked:
            why = self.blockers(node)
            if why:
                raise Refused(f"{reason}: {'; '.join(why)}")
        self._taint(node)
        done = Disruption(node, reason)
        now = self.clock()
        for pod in self.pods_on(node):
            m = pod["metadata"]
            if not is_active(pod) or _mirror(pod):
                continue
            ref = f"{m['namespace']}/{m['name']}"
            if do_not_disrupt_active(pod, now):
                # only reached for the methods that do not honour it: the instance goes
                self.store.delete(self.pods_kind, m["namespace"], m["name"])
                done.deleted.append(ref)
                continue
            workloads.evict(self.store, m["namespace"], m["name"], {}, dry_run=False)
            done.evicted.append(ref)
        deadline = time.monotonic() + timeout_s
        while [p for p in self.pods_on(node) if not _terminal(p) and not _mirror(p)]:
            if time.monotonic() > deadline:
                raise AssertionError(f"the pods on {node} did not go within {timeout_s} s")
            time.sleep(0.05)
        self.store.delete(self.nodes_kind, "", node)
        if self.on_node_gone is not None:
            self.on_node_gone(node)
        return done

    def _taint(self, node: str) -> None:
        obj = copy.deepcopy(self.store.get(self.nodes_kind, "", node))
        taints = obj["spec"].setdefault("taints", [])
        if not any(t.get("key") == DISRUPTED_TAINT["key"] for t in taints):
            taints.append(dict(DISRUPTED_TAINT))
        self.store.update(self.nodes_kind, "", node, obj, api=False)


# ----- NodePools and NodeClaims ----------------------------------------------------------
GROUP, VERSION = "karpenter.sh", "v1"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
INITIALIZED_LABEL = "karpenter.sh/initialized"
TERMINATION_FINALIZER = "karpenter.sh/termination"


def karpenter_crds() -> list[dict[str, Any]]:
    pool = crds.crd(GROUP, VERSION, "NodePool", "nodepools", namespaced=False, scale=True)
    pool["spec"]["versions"][0]["subresources"]["scale"]["statusReplicasPath"] = ".status.nodes"
    claim = crds.crd(GROUP, VERSION, "NodeClaim", "nodeclaims", namespaced=False)
    return [pool, claim]


def nodepool(
    name: str, *, limits: dict[str, str] | None = None, budgets: list[dict[str, Any]] | None = None,
    policy: str = "WhenEmptyOrUnderutilized",
) -> dict[str, Any]:  # fmt: skip
    """A NodePool as the API server stores it (defaults applied: the 10% budget)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws",
                                                   "kind": "EC2NodeClass", "name": "default"},
                                  "requirements": []}},
            "limits": dict(limits or {}),
            "disruption": {"consolidationPolicy": policy, "consolidateAfter": "0s",
                           "budgets": budgets if budgets is not None else [{"nodes": "10%"}]},
        },
    }  # fmt: skip


def seed_claimed_node(emu: Any, pool: str, name: str, *, kubelet: Any = None) -> None:
    """A node Karpenter launched for ``pool``: the Node (Ready, initialized) and its
    NodeClaim ``NAME-claim``; handed to the fake kubelet when one runs."""
    pid = f"emulated://{name}"
    node = node_manifest(name, labels={NODEPOOL_LABEL: pool, INITIALIZED_LABEL: "true"})
    node["spec"] = {"providerID": pid}
    claim = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeClaim",
        "metadata": {"name": f"{name}-claim", "labels": {NODEPOOL_LABEL: pool},
                     "finalizers": [TERMINATION_FINALIZER]},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                  "name": "default"}, "requirements": []},
        "status": {"nodeName": name, "providerID": pid,
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip
    emu.seed(node, claim)
    if kubelet is not None:
        with kubelet._lock:
            kubelet.nodes.add(name)


class Termination:
    """Karpenter's termination of deleted NodeClaims, one thread over the emulator's store."""

    def __init__(self, emu: Any, kubelet: Any = None, *, poll_s: float = 0.05) -> None:
        self.store, self.kubelet, self.poll_s = emu.store, kubelet, poll_s
        self.claims = self.store.kinds[(GROUP, "nodeclaims")]
        self.nodes = self.store.kinds[("", "nodes")]
        self.pods = self.store.kinds[("", "pods")]
        self.errors: list[str] = []
        self.terminated: list[str] = []  # nodes, in order
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Termination:
        self._thread = threading.Thread(target=self._run, daemon=True, name="fake-karpenter")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                items, _ = self.store.list(self.claims, None,
                                           lambda c: bool(c["metadata"].get("deletionTimestamp")))  # fmt: skip
                for claim in items:
                    self._terminate(claim)
            except status.ApiError as exc:
                if exc.code not in (404, 409):
                    self.errors.append(repr(exc))
            except Exception as exc:  # keep running; the test reads .errors
                self.errors.append(repr(exc))
            self._stop.wait(self.poll_s)

    def _terminate(self, claim: Obj) -> None:
        node = (claim.get("status") or {}).get("nodeName")
        if node and not self._drained(str(node)):
            return
        if node:
            with contextlib.suppress(status.ApiError):
                self.store.delete(self.nodes, "", node)
                self.terminated.append(str(node))
            if self.kubelet is not None:
                with self.kubelet._lock:
                    self.kubelet.nodes.discard(node)
        current = copy.deepcopy(self.store.get(self.claims, "", claim["metadata"]["name"]))
        current["metadata"]["finalizers"] = [
            f for f in current["metadata"].get("finalizers") or [] if f != TERMINATION_FINALIZER
        ]
        self.store.update(self.claims, "", current["metadata"]["name"], current, api=False)

    def _drained(self, node: str) -> bool:
        try:
            obj = copy.deepcopy(self.store.get(self.nodes, "", node))
        except status.ApiError:
            return True
        taints = obj["spec"].setdefault("taints", [])
        if not any(t.get("key") == DISRUPTED_TAINT["key"] for t in taints):
            taints.append(dict(DISRUPTED_TAINT))
            self.store.update(self.nodes, "", node, obj, api=False)
        pods, _ = self.store.list(self.pods, None,
                                  lambda p: (p.get("spec") or {}).get("nodeName") == node)  # fmt: skip
        left = [p for p in pods if is_active(p) and not _mirror(p)]
        now = datetime.now(UTC)
        for p in left:
            m = p["metadata"]
            if do_not_disrupt_active(p, now):
                continue  # holds the node (no terminationGracePeriod here)
            with contextlib.suppress(status.ApiError):  # a budget: tried again next pass
                workloads.evict(self.store, m["namespace"], m["name"], {}, dry_run=False)
        return not left
