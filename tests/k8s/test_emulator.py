"""The API emulator, driven by the official ``kubernetes`` client: each documented behaviour
the clawpoint backend relies on, answered the way kube-apiserver answers it."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from kubernetes import client, watch

from tests.k8s.conftest import pod
from tests.k8s.emulator import Emulator, Rule, crds


def status_of(exc: client.ApiException) -> dict[str, Any]:
    body = json.loads(exc.body)
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["code"] == exc.status
    return body


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def deployment(name: str, replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
        },
    }


# ----- discovery ---------------------------------------------------------------------------


def test_discovery_lists_versions_groups_and_resources(emu: Emulator, api: Any) -> None:
    assert client.VersionApi(api).get_code().git_version.startswith("v1.")
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]
    groups = {
        g.name: g.preferred_version.group_version
        for g in client.ApisApi(api).get_api_versions().groups
    }
    assert (
        groups["apps"] == "apps/v1"
        and groups["batch"] == "batch/v1"
        and groups["policy"] == "policy/v1"
    )
    core = {r.name: r for r in client.CoreV1Api(api).get_api_resources().resources}
    assert core["pods"].namespaced and not core["nodes"].namespaced and core["pods"].kind == "Pod"
    assert core["pods/eviction"].group == "policy" and core["pods/eviction"].verbs == ["create"]
    assert "nodes/proxy" in core
    apps = {r.name for r in client.AppsV1Api(api).get_api_resources().resources}
    assert {"deployments", "deployments/scale", "statefulsets/scale"} <= apps
    assert "kueue.x-k8s.io" not in groups


def test_a_created_crd_is_discovered_and_served(emu: Emulator, api: Any) -> None:
    ext = client.ApiextensionsV1Api(api)
    for manifest in crds.all_operators():
        created = ext.create_custom_resource_definition(manifest)
        established = {c.type: c.status for c in created.status.conditions}
        assert established["Established"] == "True"
    groups = {
        g.name: g.preferred_version.version for g in client.ApisApi(api).get_api_versions().groups
    }
    assert groups["kueue.x-k8s.io"] == "v1beta1" and groups["ray.io"] == "v1"
    assert groups["serving.kserve.io"] == "v1beta1" and groups["kubeflow.org"] == "v1"
    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "rj"},
        "spec": {"entrypoint": "python x.py"},
    }
    made = custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayjobs", body)
    assert made["metadata"]["uid"] and made["kind"] == "RayJob"
    listed = custom.list_namespaced_custom_object("ray.io", "v1", "default", "rayjobs")
    assert listed["kind"] == "RayJobList" and listed["items"][0]["apiVersion"] == "ray.io/v1"
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {},
    }
    assert (
        custom.create_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", cq)[
            "metadata"
        ]["name"]
        == "cq"
    )
    ext.delete_custom_resource_definition("rayjobs.ray.io")
    with pytest.raises(client.ApiException) as info:
        custom.list_namespaced_custom_object("ray.io", "v1", "default", "rayjobs")
    assert info.value.status == 404


def test_an_unknown_path_is_a_plain_404(api: Any) -> None:
    custom = client.CustomObjectsApi(api)
    with pytest.raises(client.ApiException) as info:
        custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta1", "default", "workloads")
    assert status_of(info.value)["message"] == "the server could not find the requested resource"


# ----- objects, metadata, errors -----------------------------------------------------------


def test_create_sets_uid_resource_version_timestamp_and_generated_names(api: Any) -> None:
    core = client.CoreV1Api(api)
    a = core.create_namespaced_pod("default", pod("a"))
    b = core.create_namespaced_pod("default", {**pod("x"), "metadata": {"generateName": "train-"}})
    assert a.metadata.uid and b.metadata.uid and a.metadata.uid != b.metadata.uid
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)
    assert a.metadata.creation_timestamp.tzinfo is not None
    assert b.metadata.name.startswith("train-") and len(b.metadata.name) == len("train-") + 5
    assert a.status.phase == "Pending"  # status is the server's on create, not the client's
    assert a.spec.restart_policy == "Always" and a.spec.termination_grace_period_seconds == 30


def test_error_reasons_and_codes(emu: Emulator, api: Any) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", pod("a"))
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod("default", pod("a"))
    body = status_of(info.value)
    assert (info.value.status, body["reason"], body["message"]) == (
        409,
        "AlreadyExists",
        'pods "a" already exists',
    )
    with pytest.raises(client.ApiException) as info:
        core.read_namespaced_pod("missing", "default")
    assert status_of(info.value)["reason"] == "NotFound" and info.value.status == 404
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod("default", pod("Bad_Name"))
    body = status_of(info.value)
    assert info.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"].startswith(
        'Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain'
    )
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod("nowhere", pod("a", "nowhere"))
    assert status_of(info.value)["message"] == 'namespaces "nowhere" not found'


def test_stale_resource_version_is_a_conflict_on_replace_and_patch(api: Any) -> None:
    core = client.CoreV1Api(api)
    first = core.create_namespaced_pod("default", pod("a"))
    stale = first.metadata.resource_version
    first.metadata.labels = {"x": "1"}
    fresh = core.replace_namespaced_pod("a", "default", first)
    assert int(fresh.metadata.resource_version) > int(stale)
    first.metadata.labels = {"x": "2"}
    with pytest.raises(client.ApiException) as info:
        core.replace_namespaced_pod("a", "default", first)  # still carries the old version
    body = status_of(info.value)
    assert info.value.status == 409 and body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on pods "a": the object has been modified; please apply '
        "your changes to the latest version and try again"
    )
    with pytest.raises(client.ApiException) as info:
        core.patch_namespaced_pod(
            "a", "default", {"metadata": {"resourceVersion": stale, "labels": {"y": "1"}}}
        )
    assert status_of(info.value)["reason"] == "Conflict"
    assert core.read_namespaced_pod("a", "default").metadata.labels == {"x": "1"}


def test_custom_resources_need_a_resource_version_on_replace(emu: Emulator, api: Any) -> None:
    emu.seed(*crds.ray())
    custom = client.CustomObjectsApi(api)
    body = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"}, "spec": {}}
    custom.create_namespaced_custom_object("ray.io", "v1", "default", "rayclusters", body)
    with pytest.raises(client.ApiException) as info:
        custom.replace_namespaced_custom_object(
            "ray.io", "v1", "default", "rayclusters", "rc", body
        )
    assert (
        info.value.status == 422
        and "must be specified for an update" in status_of(info.value)["message"]
    )


def test_no_op_update_keeps_the_resource_version(api: Any) -> None:
    core = client.CoreV1Api(api)
    made = core.create_namespaced_pod("default", pod("a", labels={"k": "v"}))
    again = core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"k": "v"}}})
    assert again.metadata.resource_version == made.metadata.resource_version


def test_status_is_ignored_on_main_writes_and_set_through_the_status_subresource(api: Any) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", pod("a"))
    core.patch_namespaced_pod("a", "default", {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod("a", "default").status.phase == "Pending"
    core.patch_namespaced_pod_status("a", "default", {"status": {"phase": "Running"}})
    assert core.read_namespaced_pod_status("a", "default").status.phase == "Running"


def test_finalizers_hold_deletion_until_removed(api: Any) -> None:
    core = client.CoreV1Api(api)
    body = pod("a")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    core.create_namespaced_pod("default", body)
    core.delete_namespaced_pod("a", "default")
    held = core.read_namespaced_pod("a", "default")
    assert held.metadata.deletion_timestamp is not None
    core.patch_namespaced_pod("a", "default", [{"op": "remove", "path": "/metadata/finalizers"}])
    with pytest.raises(client.ApiException) as info:
        core.read_namespaced_pod("a", "default")
    assert info.value.status == 404


def test_namespaces_list_create_delete(api: Any) -> None:
    core = client.CoreV1Api(api)
    made = core.create_namespace({"metadata": {"name": "ml"}})
    assert (
        made.status.phase == "Active"
        and made.metadata.labels["kubernetes.io/metadata.name"] == "ml"
    )
    core.create_namespaced_pod("ml", pod("a", "ml"))
    assert {n.metadata.name for n in core.list_namespace().items} == {"default", "team-a", "ml"}
    core.delete_namespace("ml")
    assert core.list_namespaced_pod("ml").items == []
    with pytest.raises(client.ApiException) as info:
        core.create_namespace({"metadata": {"name": "Not.A.Label"}})
    assert info.value.status == 422


# ----- patches -----------------------------------------------------------------------------


def test_patch_formats(emu: Emulator, api: Any) -> None:
    core = client.CoreV1Api(api)
    emu.seed(
        {
            **node("n1"),
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "MemoryPressure", "status": "False"},
                ]
            },
        }
    )
    # Strategic merge (the client's default for a dict): conditions merge by type ...
    core.patch_node_status("n1", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    conds = {c.type: c.status for c in core.read_node("n1").status.conditions}
    assert conds == {"Ready": "False", "MemoryPressure": "False"}
    # ... and taints, which have no merge strategy, are replaced whole.
    core.patch_node("n1", {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}})
    assert [t.key for t in core.read_node("n1").spec.taints] == ["b"]
    # JSON patch (a list body).
    core.patch_node("n1", [{"op": "add", "path": "/spec/unschedulable", "value": True}])
    assert core.read_node("n1").spec.unschedulable is True
    # Merge patch, asked for explicitly: lists replace, null deletes.
    core.patch_node(
        "n1", {"spec": {"unschedulable": None}}, _content_type="application/merge-patch+json"
    )
    assert core.read_node("n1").spec.unschedulable is None
    sent = [r.content_type for r in emu.requests if r.method == "PATCH"]
    assert sent == [
        "application/strategic-merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/json-patch+json",
        "application/merge-patch+json",
    ]
    with pytest.raises(client.ApiException) as info:
        core.patch_node("n1", [{"op": "test", "path": "/spec/unschedulable", "value": True}])
    assert info.value.status == 422


def test_custom_resources_refuse_strategic_merge(emu: Emulator, api: Any) -> None:
    emu.seed(*crds.ray())
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        "ray.io",
        "v1",
        "default",
        "rayjobs",
        {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"}},
    )
    patched = custom.patch_namespaced_custom_object(
        "ray.io",
        "v1",
        "default",
        "rayjobs",
        "r",
        {"spec": {"suspend": True}},
        _content_type="application/merge-patch+json",
    )
    assert patched["spec"]["suspend"] is True
    with pytest.raises(client.ApiException) as info:
        custom.patch_namespaced_custom_object(
            "ray.io",
            "v1",
            "default",
            "rayjobs",
            "r",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert info.value.status == 415 and status_of(info.value)["reason"] == "UnsupportedMediaType"


# ----- selectors ---------------------------------------------------------------------------


def test_label_selectors(emu: Emulator, api: Any) -> None:
    emu.seed(
        pod("a", labels={"app": "web", "tier": "gpu"}),
        pod("b", labels={"app": "db"}),
        pod("c", labels={"app": "batch", "tier": "cpu"}),
    )
    core = client.CoreV1Api(api)

    def names(selector: str) -> list[str]:
        return [
            p.metadata.name
            for p in core.list_namespaced_pod("default", label_selector=selector).items
        ]

    assert names("app=web") == ["a"] and names("app==web") == ["a"]
    assert names("app!=web") == ["b", "c"]
    assert names("app in (web, db)") == ["a", "b"]
    assert names("app notin (web)") == ["b", "c"]
    assert names("tier") == ["a", "c"] and names("!tier") == ["b"]
    assert names("tier,app!=batch") == ["a"]
    with pytest.raises(client.ApiException) as info:
        names("app in web")
    assert info.value.status == 400


def test_field_selectors(emu: Emulator, api: Any) -> None:
    emu.namespace("other")
    emu.seed(
        pod("a", node="n1", phase="Running"),
        pod("b", phase="Pending"),
        pod("c", "other", node="n1", phase="Running"),
    )
    core = client.CoreV1Api(api)

    def names(selector: str) -> list[str]:
        return sorted(
            p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector=selector).items
        )

    assert names("spec.nodeName=n1") == ["a", "c"]
    assert names("status.phase=Pending") == ["b"]
    assert names("status.phase!=Pending,metadata.namespace=default") == ["a"]
    assert names("metadata.name=c") == ["c"]
    assert names("spec.nodeName=") == ["b"]  # unscheduled pods, as the scheduler watches them
    with pytest.raises(client.ApiException) as info:
        names("spec.containers=x")
    assert status_of(info.value)["message"] == "field label not supported: spec.containers"


def test_list_pagination(emu: Emulator, api: Any) -> None:
    emu.seed(*(pod(f"p{i}") for i in range(5)))
    core = client.CoreV1Api(api)
    page = core.list_namespaced_pod("default", limit=2)
    seen = [p.metadata.name for p in page.items]
    assert page.metadata.remaining_item_count == 3
    while page.metadata._continue:
        page = core.list_namespaced_pod("default", limit=2, _continue=page.metadata._continue)
        seen += [p.metadata.name for p in page.items]
    assert seen == ["p0", "p1", "p2", "p3", "p4"]


# ----- dry run -----------------------------------------------------------------------------


def test_dry_run_validates_but_stores_nothing(emu: Emulator, api: Any) -> None:
    core = client.CoreV1Api(api)
    before = emu.store.rv
    made = core.create_namespaced_pod("default", pod("a"), dry_run="All")
    assert made.metadata.name == "a" and made.metadata.uid and emu.store.rv == before
    assert core.list_namespaced_pod("default").items == []
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod("default", pod("BAD"), dry_run="All")
    assert info.value.status == 422
    core.create_namespaced_pod("default", pod("a"))
    patched = core.patch_namespaced_pod(
        "a", "default", {"metadata": {"labels": {"x": "y"}}}, dry_run="All"
    )
    assert patched.metadata.labels == {"x": "y"}
    assert not core.read_namespaced_pod("a", "default").metadata.labels
    core.delete_namespaced_pod("a", "default", dry_run="All")
    assert core.read_namespaced_pod("a", "default").metadata.name == "a"
    assert [r.query.get("dryRun") for r in emu.requests][-2:] == ["All", None]


# ----- workloads: scale, jobs, eviction ----------------------------------------------------


def test_deployment_and_statefulset_scale_subresource(emu: Emulator, api: Any) -> None:
    apps = client.AppsV1Api(api)
    made = apps.create_namespaced_deployment("default", deployment("web", 3))
    assert made.metadata.generation == 1
    scale = apps.read_namespaced_deployment_scale("web", "default")
    assert scale.spec.replicas == 3 and scale.status.selector == "app=web"
    apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 1}})
    after = apps.read_namespaced_deployment("web", "default")
    assert after.spec.replicas == 1 and after.metadata.generation == 2
    sts = {**deployment("db", 2), "kind": "StatefulSet"}
    apps.create_namespaced_stateful_set("default", sts)
    scale = apps.read_namespaced_stateful_set_scale("db", "default")
    scale.spec.replicas = 0
    assert apps.replace_namespaced_stateful_set_scale("db", "default", scale).spec.replicas == 0
    with pytest.raises(client.ApiException) as info:
        apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": -1}})
    assert info.value.status == 422
    bad = deployment("x")
    bad["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(client.ApiException) as info:
        apps.create_namespaced_deployment("default", bad)
    assert "`selector` does not match template `labels`" in status_of(info.value)["message"]


def test_job_defaults_and_suspend(api: Any) -> None:
    batch = client.BatchV1Api(api)
    job = {
        "metadata": {"name": "train"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "m", "image": "busybox"}],
                }
            }
        },
    }
    made = batch.create_namespaced_job("default", job)
    assert (
        made.spec.parallelism,
        made.spec.completions,
        made.spec.backoff_limit,
        made.spec.suspend,
    ) == (1, 1, 6, False)
    assert (
        batch.patch_namespaced_job("train", "default", {"spec": {"suspend": True}}).spec.suspend
        is True
    )
    job["metadata"]["name"] = "bad"
    job["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(client.ApiException) as info:
        batch.create_namespaced_job("default", job)
    assert (
        'spec.template.spec.restartPolicy: Unsupported value: "Always"'
        in status_of(info.value)["message"]
    )


def _pdb(min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web-pdb", "namespace": "default"},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "web"}}},
    }


def _evict(core: client.CoreV1Api, name: str, **kw: Any) -> Any:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace="default"))
    return core.create_namespaced_pod_eviction(name, "default", body, **kw)


def test_eviction_honours_the_disruption_budget(emu: Emulator, api: Any) -> None:
    emu.seed(
        *(
            pod(f"web-{i}", labels={"app": "web"}, node="n1", phase="Running", ready=True)
            for i in range(3)
        )
    )
    core, policy = client.CoreV1Api(api), client.PolicyV1Api(api)
    policy.create_namespaced_pod_disruption_budget("default", _pdb(2))
    got = policy.read_namespaced_pod_disruption_budget("web-pdb", "default").status
    assert (
        got.current_healthy,
        got.desired_healthy,
        got.disruptions_allowed,
        got.expected_pods,
    ) == (3, 2, 1, 3)
    _evict(core, "web-0")
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == [
        "web-1",
        "web-2",
    ]
    with pytest.raises(client.ApiException) as info:
        _evict(core, "web-1")
    body = status_of(info.value)
    assert info.value.status == 429 and body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget web-pdb needs 2 healthy pods and has 2 currently",
        }
    ]
    assert len(core.list_namespaced_pod("default").items) == 2  # nothing was forced
    # A pending pod is not protected by the budget.
    emu.seed(pod("web-new", labels={"app": "web"}, phase="Pending"))
    _evict(core, "web-new")
    # Dry run: validated against the budget, nothing removed.
    policy.patch_namespaced_pod_disruption_budget(
        "web-pdb", "default", {"spec": {"minAvailable": 1}}
    )
    _evict(core, "web-1", dry_run="All")
    assert len(core.list_namespaced_pod("default").items) == 2


def test_two_budgets_on_one_pod_is_a_server_error(emu: Emulator, api: Any) -> None:
    emu.seed(pod("web-0", labels={"app": "web"}, phase="Running", ready=True), _pdb(0))
    second = _pdb(0)
    second["metadata"]["name"] = "other"
    emu.seed(second)
    with pytest.raises(client.ApiException) as info:
        _evict(client.CoreV1Api(api), "web-0")
    assert (
        info.value.status == 500
        and "more than one PodDisruptionBudget" in status_of(info.value)["message"]
    )


# ----- watch -------------------------------------------------------------------------------


def test_watch_from_a_resource_version_with_selectors_and_timeout(emu: Emulator, api: Any) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", pod("old", labels={"app": "web"}))
    start = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("a", labels={"app": "web"}))
    core.create_namespaced_pod("default", pod("other", labels={"app": "db"}))
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"app": "web", "v": "2"}}})
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"app": "gone"}}})
    events = [
        (e["type"], e["object"].metadata.name)
        for e in watch.Watch().stream(
            core.list_namespaced_pod,
            "default",
            label_selector="app=web",
            resource_version=start,
            timeout_seconds=1,
        )
    ]
    # The label change out of the selection is a DELETED event for this watcher.
    assert events == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


def test_watch_without_a_version_replays_state_then_streams(emu: Emulator, api: Any) -> None:
    core = client.CoreV1Api(api)
    emu.seed(pod("a"))
    w = watch.Watch()
    seen: list[tuple[str, str]] = []
    for e in w.stream(core.list_namespaced_pod, "default", timeout_seconds=30):
        seen.append((e["type"], e["object"].metadata.name))
        if len(seen) == 1:
            threading.Thread(target=emu.seed, args=(pod("b"),)).start()
        if len(seen) == 2:
            w.stop()
    assert seen == [("ADDED", "a"), ("ADDED", "b")]


def test_watch_from_a_compacted_version_is_410_expired(emu: Emulator, api: Any) -> None:
    core = client.CoreV1Api(api)
    old = core.create_namespaced_pod("default", pod("a")).metadata.resource_version
    core.create_namespaced_pod("default", pod("b"))
    emu.store.compact()
    with pytest.raises(client.ApiException) as info:
        list(
            watch.Watch().stream(
                core.list_namespaced_pod, "default", resource_version=old, timeout_seconds=1
            )
        )
    assert info.value.status == 410 and "too old resource version" in str(info.value.reason)


# ----- kubelet checkpoint behind the node proxy --------------------------------------------


def test_kubelet_checkpoint_answers_404_500_and_200(emu: Emulator, api: Any) -> None:
    emu.seed(node("n1"), node("n2"), pod("a", node="n1", phase="Running"))
    core = client.CoreV1Api(api)
    path = "checkpoint/default/a/main"
    with pytest.raises(client.ApiException) as info:
        core.connect_post_node_proxy_with_path("n1", path)
    assert info.value.status == 404  # the default: the feature gate is off
    emu.checkpoint_by_node["n1"] = 500
    with pytest.raises(client.ApiException) as info:
        core.connect_post_node_proxy_with_path("n1", path)
    assert info.value.status == 500 and "checkpointing of default/a/main failed" in info.value.body
    emu.checkpoint_by_node["n1"] = 200
    # The client turns a JSON answer of a ``str`` endpoint into Python's repr of a dict: read
    # the raw body instead (a real kubelet answers JSON too).
    raw = core.connect_post_node_proxy_with_path("n1", path, _preload_content=False)
    items = json.loads(raw.data)["items"]
    assert items[0].startswith("/var/lib/kubelet/checkpoints/checkpoint-a_default-main-")
    emu.checkpoint_by_node["n2"] = 200
    with pytest.raises(client.ApiException) as info:
        core.connect_post_node_proxy_with_path("n2", path)  # the pod is not on n2
    assert info.value.status == 404
    with pytest.raises(client.ApiException) as info:
        core.connect_post_node_proxy_with_path("n9", path)
    assert status_of(info.value)["message"] == 'nodes "n9" not found'
    assert emu.checkpoint_calls == [("n1", "default/a/main")] * 3 + [("n2", "default/a/main")]


# ----- RBAC, authentication, faults, recorder ----------------------------------------------


def test_rbac_denials_have_the_servers_message(emu: Emulator, api: Any) -> None:
    emu.rules = [Rule(verbs=("get", "list"), resources=("pods",), namespaces=("team-a",))]
    core = client.CoreV1Api(api)
    assert core.list_namespaced_pod("team-a").items == []
    with pytest.raises(client.ApiException) as info:
        core.list_namespaced_pod("default")
    body = status_of(info.value)
    assert info.value.status == 403 and body["reason"] == "Forbidden"
    assert body["message"] == (
        'pods is forbidden: User "system:serviceaccount:clawpoint:clawpoint" cannot list '
        'resource "pods" in API group "" in the namespace "default"'
    )
    with pytest.raises(client.ApiException) as info:
        core.read_node("n1")
    assert status_of(info.value)["message"].endswith(
        'cannot get resource "nodes" in API group "" at the cluster scope'
    )
    with pytest.raises(client.ApiException) as info:
        _evict_in(core, "team-a", "p")
    assert (
        'cannot create resource "pods/eviction" in API group "" in the namespace "team-a"'
        in status_of(info.value)["message"]
    )
    with pytest.raises(client.ApiException) as info:
        client.AppsV1Api(api).list_namespaced_deployment("team-a")
    assert (
        'cannot list resource "deployments" in API group "apps"' in status_of(info.value)["message"]
    )
    with pytest.raises(client.ApiException) as info:
        core.connect_post_node_proxy_with_path("n1", "checkpoint/team-a/p/main")
    assert status_of(info.value)["message"] == (
        'nodes "n1" is forbidden: User "system:serviceaccount:clawpoint:clawpoint" cannot '
        'create resource "nodes/proxy" in API group "" at the cluster scope'
    )
    assert client.VersionApi(api).get_code().major == "1"  # discovery stays open


def _evict_in(core: client.CoreV1Api, ns: str, name: str) -> Any:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))
    return core.create_namespaced_pod_eviction(name, ns, body)


def test_bearer_token_is_checked_when_set(emu: Emulator) -> None:
    emu.token = "good"
    with emu.api_client(token="expired") as bad, pytest.raises(client.ApiException) as info:
        client.CoreV1Api(bad).list_node()
    assert info.value.status == 401 and status_of(info.value)["reason"] == "Unauthorized"
    with emu.api_client(token="good") as ok:
        assert client.CoreV1Api(ok).list_node().items == []


def test_injected_faults_answer_like_an_overloaded_server(emu: Emulator, api: Any) -> None:
    core = client.CoreV1Api(api)
    emu.fail_next(503, path_prefix="/api/v1/nodes")
    with pytest.raises(client.ApiException) as info:
        core.list_node()
    assert info.value.status == 503 and status_of(info.value)["reason"] == "ServiceUnavailable"
    emu.fail_next(500, method="POST")
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod("default", pod("a"))
    assert status_of(info.value)["reason"] == "InternalError"
    # A 429 carries Retry-After; urllib3 (under the client) retries a GET on it by itself.
    emu.fail_next(429, path_prefix="/api/v1/nodes")
    before = len(emu.requests)
    assert core.list_node().items == []
    assert [r.path for r in emu.requests[before:]] == ["/api/v1/nodes", "/api/v1/nodes"]
    emu.fail_next(429, method="POST")
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod("default", pod("a"))
    assert info.value.status == 429 and info.value.headers["Retry-After"] == "1"


def test_recorder_sees_every_request_and_refuses_on_demand(emu: Emulator, api: Any) -> None:
    core = client.CoreV1Api(api)
    core.list_namespaced_pod("default", label_selector="a=b")
    last = emu.requests[-1]
    assert (last.method, last.path, last.query) == (
        "GET",
        "/api/v1/namespaces/default/pods",
        {"labelSelector": "a=b"},
    )
    with pytest.raises(AssertionError, match="requests were sent"), emu.refuse_requests():
        with pytest.raises(client.ApiException):
            core.list_node()
    with emu.refuse_requests():
        pass  # nothing sent: passes


def test_delete_collection_with_a_label_selector(emu: Emulator, api: Any) -> None:
    emu.seed(
        pod("a", labels={"app": "web"}),
        pod("b", labels={"app": "web"}),
        pod("c", labels={"app": "db"}),
    )
    core = client.CoreV1Api(api)
    core.delete_collection_namespaced_pod("default", label_selector="app=web")
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["c"]


def test_a_bad_continue_token_is_a_400_not_a_crash(emu: Emulator, api: Any) -> None:
    core = client.CoreV1Api(api)
    with pytest.raises(client.ApiException) as info:
        core.list_namespaced_pod("default", limit=1, _continue="not-a-token")
    assert info.value.status == 400  # a bad continue token is the server's 400, not a crash
    assert emu.crashes == []


def test_the_dynamic_client_works_through_discovery(emu: Emulator, api: Any) -> None:
    from kubernetes import dynamic

    emu.seed(*crds.ray())
    dc = dynamic.DynamicClient(api)
    pods = dc.resources.get(api_version="v1", kind="Pod")
    pods.create(body=pod("a"), namespace="default")
    assert [p.metadata.name for p in pods.get(namespace="default").items] == ["a"]
    rayjobs = dc.resources.get(api_version="ray.io/v1", kind="RayJob")
    rayjobs.create(
        body={"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "r"}},
        namespace="default",
    )
    assert [r.metadata.name for r in rayjobs.get(namespace="default").items] == ["r"]
