"""Node pools on Kubernetes: ``[k8s.pools.NAME]`` names a Cluster API MachineDeployment
(sized by cluster-autoscaler's rules) or a Karpenter NodePool, and ``scale_pool`` resizes it
through the cluster's own mechanism (core.backends.kubernetes.pools, autoscalers).

Against the API emulator with models of the Cluster API controllers (tests/k8s/capi.py) and
of Karpenter's termination of a deleted NodeClaim (tests/k8s/karpenter.py). The installed
``clawpoint`` lists pools, grows a MachineDeployment within its max, and refuses what must be
refused (exit codes of docs/cli.md); a shrink under a wrapped pod runs the real wrapper under
the fake kubelet with real CRIU: the pod is checkpointed and restored on a node that stays,
its state intact, before its node's Machine goes. The autoscalers' rules are pinned by the
upstream cases they cite.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.actions import params_for
from core.backends.kubernetes import autoscalers as rules
from core.backends.kubernetes.backend import KubernetesBackend
from core.backends.kubernetes.config import KubePoolConfig
from core.model import Action, utcnow
from core.service.facade import Service
from tests.cli.conftest import Cli
from tests.k8s.capi import (
    DELETE_ANNOTATION,
    ClusterAPI,
    capi_crds,
    machine_deployment,
)
from tests.k8s.conftest import node, wait_for, wrapped_pod
from tests.k8s.karpenter import Termination, karpenter_crds, nodepool, seed_claimed_node
from tests.k8s.test_actions import (  # noqa: F401 - fixtures
    act,
    assert_intact,
    k8s_config,
    pods,
    running,
    step_of,
)

POOLS = {
    "gpu": KubePoolConfig(kind="cluster-api", object="md-gpu", price_per_hour=2.5),
    "burst": KubePoolConfig(kind="karpenter", spot=True, price_per_hour=0.9),
}
CONFIG = """
[k8s]
enabled = true
kubeconfig = "{kubeconfig}"
context = "emulator"
retry_total_s = 2
poll_interval_s = 0.1
start_timeout_s = 60

[k8s.pools.gpu]
kind = "cluster-api"
object = "md-gpu"
price_per_hour = 2.5

[k8s.pools.burst]
kind = "karpenter"
spot = true
price_per_hour = 0.9

[capacity]
max_added_per_hour = 10.0
"""


def objects(emu: Any, group: str, plural: str) -> dict[str, dict[str, Any]]:
    items, _ = emu.store.list(emu.store.kinds[(group, plural)], None, lambda o: True)
    return {o["metadata"]["name"]: o for o in items}


def node_names(emu: Any) -> set[str]:
    return set(objects(emu, "", "nodes"))


def replicas(emu: Any, name: str = "md-gpu") -> int:
    return int(objects(emu, "cluster.x-k8s.io", "machinedeployments")[name]["spec"]["replicas"])


def seed_pools(emu: Any, *, md_replicas: int = 2, min_size: int = 1, budgets: Any = None,
               kubelet: Any = None) -> ClusterAPI:  # fmt: skip
    """md-gpu (Cluster API, min..4) with its Machines and Nodes; NodePool burst (limits.nodes
    3) with two nodes b1, b2."""
    emu.seed(*capi_crds(), *karpenter_crds())
    emu.seed(machine_deployment("md-gpu", md_replicas, min_size=min_size, max_size=4))
    emu.seed(nodepool("burst", limits={"cpu": "64", "nodes": "3"}, budgets=budgets))
    for n in ("b1", "b2"):
        seed_claimed_node(emu, "burst", n, kubelet=kubelet)
    capi = ClusterAPI(emu, kubelet)
    capi.sync()  # the Machines and Nodes of md-gpu
    return capi


@pytest.fixture
def cli(tmp_path: Path, kubeconfig: Path) -> Cli:
    c = Cli(tmp_path / "home")
    c.config(CONFIG.format(kubeconfig=kubeconfig))
    return c


def _json(result: Any) -> Any:
    return json.loads(result.stdout)


def _error(result: Any) -> dict[str, Any]:
    text = result.stdout.strip() or result.stderr.strip()
    return dict(json.loads(text[text.index("{") :]))


# ----- listing -------------------------------------------------------------------------------
def test_pools_lists_a_machine_deployment_and_a_nodepool(emu: Any, cli: Cli) -> None:
    seed_pools(emu)
    gpu_nodes = sorted(node_names(emu) - {"b1", "b2"})
    result = cli("pools", "--backend", "k8s", "--json")
    assert result.code == 0, result.stderr
    listed = {p["id"]: p for p in _json(result)}
    gpu, burst = listed["k8s:gpu"], listed["k8s:burst"]
    assert (gpu["size"], gpu["min_size"], gpu["max_size"]) == (2, 1, 4)
    assert gpu["nodes"] == gpu_nodes and gpu["idle"] == gpu_nodes
    assert gpu["price_per_hour"] == 2.5 and not gpu["spot"]
    # limits.nodes bounds the node count; cpu says nothing about it
    assert (burst["size"], burst["min_size"], burst["max_size"]) == (2, 0, 3)
    assert burst["nodes"] == ["b1", "b2"] and burst["spot"]


# ----- Cluster API: grow, bounds ---------------------------------------------------------------
def test_a_cluster_api_pool_grows_within_its_max(emu: Any, cli: Cli) -> None:
    with seed_pools(emu) as capi:
        before = node_names(emu)
        result = cli("pools", "scale", "k8s:gpu", "--size", "3", "--yes", "--json")
        assert result.code == 0, result.stdout + result.stderr
        assert replicas(emu) == 3
        added = node_names(emu) - before
        assert len(added) == 1
        # through the scale subresource, previewed with dryRun first
        scale = [r for r in emu.requests if r.method == "PATCH" and r.path.endswith("/scale")]
        assert [r.query.get("dryRun") for r in scale] == ["All", None]
        # conditional on the MachineDeployment as the step read it (a 409 if it changed)
        assert scale[-1].body["spec"] == {"replicas": 3}
        assert scale[-1].body["metadata"]["resourceVersion"]
        assert not capi.errors
    listed = {p["id"]: p for p in _json(cli("pools", "--backend", "k8s", "--json"))}
    assert listed["k8s:gpu"]["size"] == 3 and len(listed["k8s:gpu"]["nodes"]) == 3


def test_a_size_change_refuses_a_group_someone_else_scaled_meanwhile(
    emu: Any, kubeconfig: Path
) -> None:
    """cluster-autoscaler may scale the group between the plan and its step: the step then
    refuses (the plan's victims and sizes were computed from what it saw); a repeat of a
    step that took effect is done."""
    from core.backends.base import no_progress

    seed_pools(emu)
    backend = KubernetesBackend(k8s_config(kubeconfig, None, pools=POOLS))
    try:
        draft = backend.plan(Action.SCALE_POOL, "gpu", params_for(Action.SCALE_POOL, size=3))
        scale = next(s for s in draft.steps if s.name == "scale")
        md_kind = emu.store.kinds[("cluster.x-k8s.io", "machinedeployments")]
        md = objects(emu, "cluster.x-k8s.io", "machinedeployments")["md-gpu"]
        md["spec"]["replicas"] = 4
        emu.store.update(md_kind, "default", "md-gpu", md, api=False)
        with pytest.raises(errors.Conflict, match="has 4 replicas now, the plan saw 2"):
            backend.run_step(scale.op, scale.args, no_progress)
        assert replicas(emu) == 4
        md = objects(emu, "cluster.x-k8s.io", "machinedeployments")["md-gpu"]
        md["spec"]["replicas"] = 3
        emu.store.update(md_kind, "default", "md-gpu", md, api=False)
        assert backend.run_step(scale.op, scale.args, no_progress)["already_applied"]
    finally:
        backend.close()


def test_a_status_write_between_read_and_patch_is_retried_a_size_change_is_not(
    emu: Any, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size change is conditional on the resourceVersion it read. A controller writing
    the MachineDeployment's status in between (as the MachineSet controller does while the
    group scales) makes the API server answer 409 without the size having changed: the step
    reads again and succeeds. A size change in between is refused, never retried past."""
    from core.backends.base import no_progress
    from core.backends.kubernetes import steps

    seed_pools(emu)
    md_kind = emu.store.kinds[("cluster.x-k8s.io", "machinedeployments")]
    real = steps.mutate
    writes: list[str] = []

    def interleaved(what: str) -> Any:
        def mutate(b: Any, op: str, args: Any, *, dry_run: bool) -> Any:
            if op == "patch_object" and not dry_run and len(writes) < 2:
                md = objects(emu, "cluster.x-k8s.io", "machinedeployments")["md-gpu"]
                if what == "status":  # twice: the first retry meets another write
                    emu.store.set_status(
                        md_kind, "default", "md-gpu", {"observedGeneration": len(writes)}
                    )
                else:
                    md["spec"]["replicas"] = 4
                    emu.store.update(md_kind, "default", "md-gpu", md, api=False)
                writes.append(what)
            return real(b, op, args, dry_run=dry_run)

        return mutate

    backend = KubernetesBackend(k8s_config(kubeconfig, None, pools=POOLS))
    try:
        draft = backend.plan(Action.SCALE_POOL, "gpu", params_for(Action.SCALE_POOL, size=3))
        scale = next(s for s in draft.steps if s.name == "scale")
        monkeypatch.setattr(steps, "mutate", interleaved("status"))
        conflicts = len([r for r in emu.requests if r.method == "PATCH"])
        out = backend.run_step(scale.op, scale.args, no_progress)
        assert replicas(emu) == 3 and writes == ["status", "status"] and out["name"] == "md-gpu"
        patches = [r for r in emu.requests if r.method == "PATCH"][conflicts:]
        assert len(patches) == 3  # two answered 409, the third applied

        writes.clear()
        draft = backend.plan(Action.SCALE_POOL, "gpu", params_for(Action.SCALE_POOL, size=2))
        scale = next(s for s in draft.steps if s.name.endswith("scale"))
        monkeypatch.setattr(steps, "mutate", interleaved("size"))
        with pytest.raises(errors.Conflict, match="has 4 replicas now, the plan saw 3"):
            backend.run_step(scale.op, scale.args, no_progress)
        assert replicas(emu) == 4
    finally:
        backend.close()


@pytest.mark.parametrize("size", ["5", "0"])
def test_a_size_outside_the_autoscaler_bounds_is_refused_with_exit_2(
    emu: Any, cli: Cli, size: str
) -> None:
    seed_pools(emu)
    before = len(emu.requests)
    result = cli("pools", "scale", "k8s:gpu", "--size", size, "--yes", "--json")
    assert result.code == 2, result.stdout + result.stderr
    assert "1 to 4 nodes" in _error(result)["message"]
    assert not [r for r in emu.requests[before:] if r.method in ("PATCH", "DELETE", "POST")]
    assert replicas(emu) == 2


# ----- Karpenter -------------------------------------------------------------------------------
def test_growing_a_nodepool_is_refused_with_what_to_do(emu: Any, cli: Cli) -> None:
    seed_pools(emu)
    result = cli("pools", "scale", "k8s:burst", "--size", "3", "--yes", "--json")
    assert result.code == 4, result.stdout + result.stderr
    err = _error(result)
    assert "Karpenter adds nodes itself" in err["message"]
    assert "pending pods" in err["hint"] and "limits" in err["hint"] and "nodes=3" in err["hint"]


def test_a_budget_of_zero_refuses_a_shrink_naming_it(emu: Any, cli: Cli) -> None:
    seed_pools(emu, budgets=[{"nodes": "0", "reasons": ["Underutilized", "Empty"]},
                             {"nodes": "100%"}])  # fmt: skip
    before = len(emu.requests)
    result = cli("pools", "scale", "k8s:burst", "--size", "1", "--yes", "--json")
    assert result.code == 10, result.stdout + result.stderr
    err = _error(result)
    assert "budget nodes=0 for Underutilized,Empty" in err["message"]
    assert "lets 0 node(s) go now, not 1" in err["message"]
    assert not [r for r in emu.requests[before:] if r.method in ("PATCH", "DELETE", "POST")]
    assert set(objects(emu, "karpenter.sh", "nodeclaims")) == {"b1-claim", "b2-claim"}


def test_a_nodepool_shrinks_by_deleting_the_nodeclaim_within_its_budget(emu: Any, cli: Cli) -> None:
    """The default budget (10% of 2 nodes, rounded up: 1) lets one idle node go."""
    seed_pools(emu)
    with Termination(emu) as karpenter:
        result = cli("pools", "scale", "k8s:burst", "--size", "1", "--yes", "--json")
        assert result.code == 0, result.stdout + result.stderr
        assert not karpenter.errors
    assert len(karpenter.terminated) == 1
    gone = karpenter.terminated[0]
    assert gone not in node_names(emu) and f"{gone}-claim" not in objects(
        emu, "karpenter.sh", "nodeclaims"
    )
    deletes = [r for r in emu.requests if r.method == "DELETE" and "nodeclaims" in r.path]
    assert [r.query.get("dryRun") for r in deletes] == ["All", None]


# ----- Cluster API: a shrink that loses nothing (real CRIU) -------------------------------------
@pytest.fixture
def svc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, store_dir: Path
) -> Iterator[Service]:
    from core.config import load_settings
    from core.service.facade import bootstrap

    monkeypatch.setenv("CLAWPOINT_HOME", str(tmp_path / "home"))
    service = bootstrap(load_settings(tmp_path / "home"))
    backend = KubernetesBackend(k8s_config(kubeconfig, store_dir, pools=POOLS))
    service.backends["k8s"] = backend
    yield service
    backend.close()


def test_shrinking_under_a_wrapped_pod_saves_and_restores_it_before_its_node_goes(
    need_criu: None, emu: Any, kubelet: Any, svc: Service
) -> None:
    with seed_pools(emu, md_replicas=1, min_size=0, kubelet=kubelet) as capi:
        [victim] = sorted(node_names(emu) - {"n1", "n2", "n3", "b1", "b2"})
        work = wrapped_pod("w", "lin-w")
        work["spec"]["nodeName"] = victim
        emu.seed(work)
        wait_for("the pod to run", lambda: running(emu, "w"), 60)
        wait_for("progress", lambda: step_of(kubelet, "lin-w") > 20, 60)
        [machine] = objects(emu, "cluster.x-k8s.io", "machines")

        result = act(svc, Action.SCALE_POOL, "k8s:gpu", size=0)

        names = [s.name for s in result.execution.steps]
        # cordon, save and move, check, then the autoscaler's way: mark, scale, wait
        assert names[0] == f"{victim}-cordon" and names[-1] == "wait_pool_nodes"
        assert names.index(f"{victim}-check_drained") < names.index(f"{victim}-mark_machine")
        assert names.index(f"{victim}-mark_machine") < names.index(f"{victim}-scale")
        restored = next(
            s.output
            for s in result.execution.steps
            if s.name.endswith(("wait_restored", "takeover"))
        )
        assert restored["restored_from"].startswith("lin-w@")
        assert restored["node"] != victim
        assert victim not in node_names(emu) and replicas(emu) == 0
        assert capi.deleted == [machine]
        saved = step_of(kubelet, "lin-w")
        wait_for("progress after the move", lambda: step_of(kubelet, "lin-w") > saved + 10, 60)
        assert_intact(kubelet)
        assert not capi.errors


# ----- the emulator's models, pinned ----------------------------------------------------------
def test_capi_model_deletes_the_annotated_machine_first(emu: Any) -> None:
    emu.seed(*capi_crds(), node("n0"))
    emu.seed(machine_deployment("md", 3))
    capi = ClusterAPI(emu)
    capi.sync()
    machines = sorted(objects(emu, "cluster.x-k8s.io", "machines"))
    oldest = machines[0]
    kind = emu.store.kinds[("cluster.x-k8s.io", "machines")]
    m = objects(emu, "cluster.x-k8s.io", "machines")[oldest]
    m["metadata"].setdefault("annotations", {})[DELETE_ANNOTATION] = "now"
    emu.store.update(kind, "default", oldest, m, api=False)
    md_kind = emu.store.kinds[("cluster.x-k8s.io", "machinedeployments")]
    md = objects(emu, "cluster.x-k8s.io", "machinedeployments")["md"]
    md["spec"]["replicas"] = 2
    emu.store.update(md_kind, "default", "md", md, api=False)
    capi.sync()
    capi.sync()
    assert capi.deleted == [oldest]
    assert oldest not in node_names(emu) and len(objects(emu, "cluster.x-k8s.io", "machines")) == 2


def test_the_scale_subresource_refuses_a_negative_size(emu: Any, api: Any) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    emu.seed(*capi_crds())
    emu.seed(machine_deployment("md", 1))
    custom = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as refused:
        custom.patch_namespaced_custom_object_scale(
            "cluster.x-k8s.io", "v1beta1", "default", "machinedeployments", "md",
            {"spec": {"replicas": -1}}, _content_type="application/merge-patch+json",
        )  # fmt: skip
    assert refused.value.status == 422
    # above the autoscaler's max annotation: the API server takes it (only the plan refuses)
    custom.patch_namespaced_custom_object_scale(
        "cluster.x-k8s.io", "v1beta1", "default", "machinedeployments", "md",
        {"spec": {"replicas": 9}}, _content_type="application/merge-patch+json",
    )  # fmt: skip
    assert replicas(emu, "md") == 9


# ----- the autoscalers' rules, pinned by upstream's cases ---------------------------------------
def _np_nodes(count: int, *, not_ready: int = 0, pool: str = "p") -> list[dict[str, Any]]:
    out = []
    for i in range(count):
        n = node(f"x{i}", labels={rules.NODEPOOL_LABEL: pool, rules.INITIALIZED_LABEL: "true"},
                 ready=i >= not_ready)  # fmt: skip
        out.append(n)
    return out


def test_a_percentage_budget_rounds_up_and_the_smallest_applicable_wins() -> None:
    # nodepool.go GetAllowedDisruptions: "5% disruptions, but 10 nodes: allow 1"
    assert (
        rules.allowed_disruptions(nodepool("p", budgets=[{"nodes": "5%"}]), _np_nodes(10))[0] == 1
    )
    assert (
        rules.allowed_disruptions(nodepool("p", budgets=[{"nodes": "10%"}]), _np_nodes(19))[0] == 2
    )
    # a budget for Drifted only does not apply to a shrink; the smallest that applies wins
    pool = nodepool("p", budgets=[{"nodes": "0", "reasons": ["Drifted"]}, {"nodes": "3"},
                                  {"nodes": "50%"}])  # fmt: skip
    assert rules.allowed_disruptions(pool, _np_nodes(4)) == (2, "budget nodes=50%")
    # helpers.go: NotReady nodes count as disrupting, never below 0; invalid fails closed
    assert rules.allowed_disruptions(pool, _np_nodes(4, not_ready=1))[0] == 1
    assert rules.allowed_disruptions(pool, _np_nodes(4, not_ready=4))[0] == 0
    assert rules.allowed_disruptions(nodepool("p", budgets=[{"nodes": "x"}]), _np_nodes(4))[0] == 0
    # no budgets at all: the API server's default, 10%
    bare = nodepool("p")
    del bare["spec"]["disruption"]["budgets"]
    assert rules.allowed_disruptions(bare, _np_nodes(30))[0] == 3


def test_capi_bounds_follow_parse_scaling_bounds() -> None:
    assert rules.capi_bounds(machine_deployment("m", 1, min_size=None, max_size=None)) == (0, 0)
    assert rules.capi_bounds(machine_deployment("m", 1, min_size=1, max_size=5)) == (1, 5)
    for low, high in ((3, 2), (-1, 2)):
        with pytest.raises(errors.InvalidInput):
            rules.capi_bounds(machine_deployment("m", 1, min_size=low, max_size=high))
    bad = machine_deployment("m", 1)
    bad["metadata"]["annotations"][rules.MAX_SIZE_ANNOTATION] = "ten"
    with pytest.raises(errors.InvalidInput, match="not a whole number"):
        rules.capi_bounds(bad)


# ----- RBAC -----------------------------------------------------------------------------------
def _pool_request(r: Any) -> tuple[str, str] | None:
    """(verb, resource[/sub]) of a request to a Cluster API or Karpenter object, else None."""
    parts = [p for p in r.path.split("/") if p]
    if len(parts) < 4 or parts[0] != "apis" or parts[1] not in ("cluster.x-k8s.io", "karpenter.sh"):
        return None
    rest = parts[3:]
    if rest[0] == "namespaces":
        rest = rest[2:]
    named = len(rest) > 1
    verb = {"GET": "get" if named else "list", "PATCH": "patch", "DELETE": "delete"}[r.method]
    return verb, "/".join([rest[0], *rest[2:3]])


def test_the_deployed_rbac_grants_what_pools_use_and_nothing_more(
    emu: Any, kubeconfig: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.config import load_settings
    from core.service.facade import bootstrap
    from tests.k8s.test_deploy import NS, rules_from_manifests

    emu.namespace(NS)
    with seed_pools(emu) as capi, Termination(emu) as karpenter:
        emu.rules = rules_from_manifests()
        before = len(emu.requests)
        monkeypatch.setenv("CLAWPOINT_HOME", str(tmp_path / "home"))
        svc = bootstrap(load_settings(tmp_path / "home"))
        backend = KubernetesBackend(k8s_config(kubeconfig, None, namespaces=[NS], pools=POOLS))
        svc.backends["k8s"] = backend
        try:
            assert {p.id for p in svc.pools("k8s")} == {"k8s:gpu", "k8s:burst"}
            act(svc, Action.SCALE_POOL, "k8s:gpu", size=3)
            shrunk = act(svc, Action.SCALE_POOL, "k8s:gpu", size=1)
            removed = act(svc, Action.SCALE_POOL, "k8s:burst", size=1)
            # after a crash, whether a step took effect is read back (get): each Machine
            # marked (gone now), the last size set, each NodeClaim deleted
            assert shrunk.plan is not None and removed.plan is not None
            mutating = [s for r in (shrunk, removed) for s in r.plan.steps
                        if s.op in ("patch_object", "delete_object")]  # fmt: skip
            last_scale = [s for s in mutating if s.name.endswith("-scale")][-1]
            for s in mutating:
                if s.name.endswith("-scale") and s is not last_scale:
                    continue  # a later step set another size
                assert backend.recover_step(s.op, s.args, utcnow()) is not None, s.name
        finally:
            backend.close()
        assert not capi.errors and not karpenter.errors
    assert replicas(emu) == 1 and len(karpenter.terminated) == 1
    used = {u for r in emu.requests[before:] if (u := _pool_request(r)) is not None}
    granted = {
        (verb, res)
        for rule in rules_from_manifests()
        if set(rule.api_groups) & {"cluster.x-k8s.io", "karpenter.sh"}
        for res in rule.resources
        for verb in rule.verbs
    }
    assert used == granted
