"""Drain and failover of Kubernetes nodes as a real cluster demands (``core.backends.kubernetes.nodes``).

- drain follows ``kubectl drain``'s filters (kubernetes/kubectl pkg/drain/filters.go): pods
  no controller recreates, and pods with emptyDir data, are refused unless forced (a
  destructive variant that needs a person); pods of namespaces outside ``k8s.namespaces``
  are listed as not handled and the drain is not reported executed while they run;
- failover of a NotReady node fences it first (cordon + ``node.kubernetes.io/out-of-service``
  NoExecute, KEP-2268) and only once its heartbeat Lease expired, or a person says it is
  fenced (``fenced``, a person-only parameter); a node whose kubelet still renews its lease
  is refused.

Most tests need no CRIU (nothing is checkpointed); the one that restores does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.backends.kubernetes.backend import KubernetesBackend
from core.config import load_settings
from core.guardrails.policy import PolicyConfig, PolicyContext, PolicyRule, evaluate
from core.model import Action, Plan, Principal, PrincipalKind, RiskClass
from core.service.facade import Service, bootstrap
from tests.k8s.conftest import node, pod, wrapped_pod
from tests.k8s.emulator.rbac import Rule
from tests.k8s.test_actions import (
    assert_intact,
    k8s_config,
    pods,
    running,
    step_of,
    wait_for,
)

PERSON = Principal(id="tester", kind=PrincipalKind.PERSON)
AGENT = Principal(id="agent-1", kind=PrincipalKind.AGENT)
WRITES = ("POST", "PATCH", "PUT", "DELETE")
OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Service]:
    home = tmp_path / "home"
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    yield bootstrap(load_settings(home))


def use(svc: Service, kubeconfig: Path, store_dir: Path | None, **kw: Any) -> KubernetesBackend:
    backend = KubernetesBackend(k8s_config(kubeconfig, store_dir, eviction_wait_s=1, **kw))
    svc.backends["k8s"] = backend
    return backend


def managed(name: str, namespace: str = "default", *, node_name: str = "n1") -> dict[str, Any]:
    """A running pod a ReplicaSet owns (a controller recreates it: drain may evict it)."""
    body = pod(name, namespace, node=node_name, phase="Running", ready=True)
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-rs", "uid": "u-" + name,
         "controller": True}
    ]  # fmt: skip
    return body


def writes_since(emu: Any, before: int) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in emu.requests[before:] if r.method in WRITES]


def node_obj(emu: Any, name: str) -> dict[str, Any]:
    return dict(emu.store.get(emu.store.kinds[("", "nodes")], "", name))


# ----- drain --------------------------------------------------------------------------------
def test_scoped_drain_lists_a_pod_of_another_namespace_and_is_not_reported_executed(
    emu: Any, service: Service, kubeconfig: Path
) -> None:
    use(service, kubeconfig, None, namespaces=["default"])
    emu.seed(node("n1"), node("n2"), managed("web"), managed("other", "team-a"))

    plan = service.plan(Action.DRAIN_NODE, "k8s:n1", {})
    assert plan.scope.not_handled == ["team-a/other"]
    assert "NOT HANDLED" in plan.summary and "team-a/other" in plan.summary

    result = service.act(Action.DRAIN_NODE, "k8s:n1", {}, principal=PERSON, confirmed=True)
    assert result.status != "executed", result.message
    assert "team-a/other" in result.message and "not drained" in result.message
    assert node_obj(emu, "n1")["spec"]["unschedulable"] is True
    assert "web" not in pods(emu), "what is in scope is drained"
    assert "other" in pods(emu, "team-a"), "what is out of scope is never touched"


def test_scoped_drain_says_when_it_cannot_see_other_namespaces(
    emu: Any, service: Service, kubeconfig: Path
) -> None:
    use(service, kubeconfig, None, namespaces=["default"])
    emu.seed(node("n1"), node("n2"), managed("web"), managed("other", "team-a"))
    emu.rules = [  # a RoleBinding in default, and nodes cluster-wide: no pods elsewhere
        Rule(verbs=("*",), resources=("*",), api_groups=("*",), namespaces=("default",)),
        Rule(verbs=("get", "list", "watch", "patch"), resources=("nodes",)),
    ]

    plan = service.plan(Action.DRAIN_NODE, "k8s:n1", {})
    assert plan.scope.other_namespaces_visible is False
    assert "cannot list pods outside default" in plan.summary

    result = service.act(Action.DRAIN_NODE, "k8s:n1", {}, principal=PERSON, confirmed=True)
    assert result.status != "executed", result.message
    assert "not known to be drained" in result.message
    assert "other" in pods(emu, "team-a")


def test_drain_refuses_unmanaged_pods_unless_forced_as_a_destructive_action(
    emu: Any, service: Service, kubeconfig: Path
) -> None:
    use(service, kubeconfig, None)
    scratchy = managed("scratchy")
    scratchy["spec"]["volumes"] = [{"name": "tmp", "emptyDir": {}}]
    emu.seed(
        node("n1"),
        node("n2"),
        pod("loose", node="n1", phase="Running", ready=True),  # no controller
        scratchy,  # a controller, but local data (kubectl: --delete-emptydir-data)
        managed("web"),
    )
    before = len(emu.requests)
    with pytest.raises(errors.Conflict) as info:
        service.act(Action.DRAIN_NODE, "k8s:n1", {}, principal=PERSON, confirmed=True)
    assert info.value.code == "kubernetes-drain-unmanaged"
    assert "default/loose" in info.value.message and "default/scratchy" in info.value.message
    assert "force" in info.value.hint
    assert writes_since(emu, before) == [], "nothing was stopped, cordoned or even previewed"
    assert {"loose", "scratchy", "web"} <= set(pods(emu))
    assert not node_obj(emu, "n1")["spec"].get("unschedulable")

    forced = service.plan(Action.DRAIN_NODE, "k8s:n1", {"force": True})
    assert forced.risk is RiskClass.DESTRUCTIVE
    assert sorted(f.split(":")[0] for f in forced.scope.forced) == [
        "default/loose",
        "default/scratchy",
    ]
    asked = service.act(Action.DRAIN_NODE, "k8s:n1", {"force": True}, principal=AGENT)
    assert asked.status in ("approval_required", "denied"), asked.status
    assert {"loose", "scratchy", "web"} <= set(pods(emu))

    done = service.act(
        Action.DRAIN_NODE, "k8s:n1", {"force": True}, principal=PERSON, confirmed=True
    )
    assert done.status == "executed", done.message
    assert not {"loose", "scratchy", "web"} & set(pods(emu))


def test_drain_leaves_daemonset_and_mirror_pods_and_still_reports_drained(
    emu: Any, service: Service, kubeconfig: Path
) -> None:
    use(service, kubeconfig, None)
    ds = managed("agent")
    ds["metadata"]["ownerReferences"][0].update(kind="DaemonSet", name="agent")
    mirror = pod("etcd-n1", node="n1", phase="Running", ready=True)
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    emu.seed(node("n1"), node("n2"), ds, mirror, managed("web"))

    result = service.act(Action.DRAIN_NODE, "k8s:n1", {}, principal=PERSON, confirmed=True)
    assert result.status == "executed", result.message
    assert {"agent", "etcd-n1"} <= set(pods(emu)) and "web" not in pods(emu)
    assert result.plan is not None and len(result.plan.scope.left) == 2


# ----- fencing: the guardrail --------------------------------------------------------------
def test_fenced_needs_a_person_out_of_band_whatever_the_rules_say() -> None:
    plan = Plan(
        action=Action.FAILOVER,
        target="k8s:n2",
        backend="k8s",
        params={"fenced": True},
        steps=[],
        risk=RiskClass.DESTRUCTIVE,
        summary="fail over n2",
    ).sealed()
    allow_all = PolicyConfig(rules=[PolicyRule(id="yolo", outcome="allow")])
    decision = evaluate(plan, allow_all, PolicyContext())
    assert decision.outcome.value == "approve" and decision.approval == "out-of-band"
    assert decision.rule_id.startswith("person-only")
    deny = PolicyConfig(rules=[PolicyRule(id="never", outcome="deny")])
    assert evaluate(plan, deny, PolicyContext()).outcome.value == "deny", "a deny stays a deny"
    plain = plan.model_copy(update={"params": {}}).sealed()
    assert evaluate(plain, allow_all, PolicyContext()).outcome.value == "allow"


# ----- fencing: the cluster ----------------------------------------------------------------
def partition(emu: Any, kubelet: Any, name: str) -> None:
    """The node controller marks ``name`` NotReady while its kubelet (still alive) keeps
    renewing its lease; returns once a renewal after the transition is visible."""
    since = datetime.now(UTC).replace(microsecond=0)
    current = node_obj(emu, name)
    conds = [c for c in current["status"]["conditions"] if c["type"] != "Ready"]
    conds.append(
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
         "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ")}
    )  # fmt: skip
    emu.store.set_status(
        emu.store.kinds[("", "nodes")], "", name, {**current["status"], "conditions": conds}
    )
    leases = emu.store.kinds[("coordination.k8s.io", "leases")]

    def renewed_after() -> bool:
        stamp = emu.store.get(leases, "kube-node-lease", name)["spec"]["renewTime"]
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")) > since + timedelta(seconds=1.5)

    wait_for("a lease renewal after NotReady", renewed_after, timeout_s=10)


def test_kubelet_renews_leases_and_stops_for_a_crashed_node(emu: Any, kubelet: Any) -> None:
    leases = emu.store.kinds[("coordination.k8s.io", "leases")]

    def stamp(name: str) -> str | None:
        try:
            return str(emu.store.get(leases, "kube-node-lease", name)["spec"]["renewTime"])
        except Exception:
            return None

    first = wait_for("n1's lease", lambda: stamp("n1"))
    wait_for("a renewal", lambda: stamp("n1") != first, timeout_s=5)
    lease = emu.store.get(leases, "kube-node-lease", "n2")
    assert lease["spec"]["holderIdentity"] == "n2" and lease["spec"]["leaseDurationSeconds"] > 0
    kubelet.crash_node("n2")
    time.sleep(0.2)
    frozen = stamp("n2")
    time.sleep(kubelet.lease_s)
    assert stamp("n2") == frozen, "a crashed node's lease is not renewed"
    assert stamp("n1") != first


def test_failover_of_a_notready_node_whose_lease_is_renewed_is_refused(
    emu: Any, kubelet: Any, service: Service, kubeconfig: Path, store_dir: Path
) -> None:
    use(service, kubeconfig, store_dir)
    partition(emu, kubelet, "n2")
    before = len(emu.requests)
    with pytest.raises(errors.Conflict) as info:
        service.plan(Action.FAILOVER, "k8s:n2", {})
    assert info.value.code == "kubernetes-node-alive"
    assert "fenced=true" in info.value.hint
    assert writes_since(emu, before) == []
    assert not node_obj(emu, "n2")["spec"].get("taints")


def test_failover_with_a_persons_word_fences_then_restores(
    need_criu: None,
    emu: Any,
    kubelet: Any,
    service: Service,
    kubeconfig: Path,
    store_dir: Path,
) -> None:
    use(service, kubeconfig, store_dir)
    manifest = wrapped_pod("fragile", "fragile")
    manifest["spec"]["nodeName"] = "n2"
    emu.seed(manifest)
    wait_for("fragile runs", lambda: running(emu, "fragile"))
    wait_for("progress", lambda: step_of(kubelet, "fragile") > 10)
    saved = service.act(Action.CHECKPOINT, "k8s:Pod/default/fragile", {}, principal=PERSON,
                        confirmed=True)  # fmt: skip
    assert saved.status == "executed", saved.message
    partition(emu, kubelet, "n2")
    with pytest.raises(errors.Conflict, match="alive"):
        service.plan(Action.FAILOVER, "k8s:n2", {})

    before = len(emu.requests)
    asked = service.act(Action.FAILOVER, "k8s:n2", {"fenced": True}, principal=AGENT)
    assert asked.status in ("approval_required", "denied"), asked.status
    assert writes_since(emu, before) == [] or all(
        "dryRun" in r.query for r in emu.requests[before:] if r.method in WRITES
    )
    plan = service.plan(Action.FAILOVER, "k8s:n2", {"fenced": True})
    assert plan.scope.fencing["by"] == "person"
    assert plan.risk is RiskClass.DESTRUCTIVE

    before = len(emu.requests)
    result = service.act(
        Action.FAILOVER, "k8s:n2", {"fenced": True}, principal=PERSON, confirmed=True
    )
    assert result.status == "executed", result.message
    sent = [r for r in emu.requests[before:] if r.method in WRITES and not r.query.get("dryRun")]
    fence = next(
        i for i, r in enumerate(sent) if r.method == "PATCH" and r.path.endswith("/nodes/n2")
    )
    first_pod = next(i for i, r in enumerate(sent) if "/pods" in r.path)
    assert fence < first_pod, [(r.method, r.path) for r in sent]
    n2 = node_obj(emu, "n2")
    assert n2["spec"]["unschedulable"] is True
    assert {"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"} in n2["spec"][
        "taints"
    ]
    moved = [n for n in pods(emu) if n.startswith("fragile-cp")]
    assert moved and pods(emu)[moved[0]]["spec"]["nodeName"] in ("n1", "n3")
    assert_intact(kubelet)

    undrain = service.plan(Action.UNDRAIN_NODE, "k8s:n2", {})
    assert undrain.steps[0].args["patch"]["spec"]["taints"] == []


# ----- the emulator's Lease (coordination.k8s.io/v1) ---------------------------------------
def test_emulator_serves_leases_with_the_apis_validation(emu: Any, api: Any) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    emu.namespace("kube-node-lease")
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    preferred = groups["coordination.k8s.io"].preferred_version
    assert preferred is not None and preferred.version == "v1"
    resources = client.CoordinationV1Api(api).get_api_resources().resources
    (leases,) = [r for r in resources if r.name == "leases"]
    assert leases.namespaced and leases.kind == "Lease"
    assert {"get", "list", "watch", "update", "patch"} <= set(leases.verbs)

    leases_api = client.CoordinationV1Api(api)
    spec: dict[str, Any] = {"holderIdentity": "n1", "leaseDurationSeconds": 0}
    body: Any = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "n1"},
        "spec": spec,
    }
    with pytest.raises(ApiException) as info:  # pkg/apis/coordination/validation
        leases_api.create_namespaced_lease("kube-node-lease", body)
    assert info.value.status == 422 and "must be greater than 0" in str(info.value.body)
    spec["leaseDurationSeconds"] = 40
    leases_api.create_namespaced_lease("kube-node-lease", body)
    leases_api.patch_namespaced_lease(
        "n1", "kube-node-lease", {"spec": {"renewTime": "2026-12-01T10:00:00.000000Z"}}
    )
    got = leases_api.read_namespaced_lease("n1", "kube-node-lease").spec
    assert got is not None and got.lease_duration_seconds == 40 and got.renew_time is not None
