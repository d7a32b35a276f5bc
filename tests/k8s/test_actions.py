"""Kubernetes actions through the service and its guardrails, against the API emulator and
the fake kubelet: pods are real processes under the clawpoint wrapper, so every checkpoint,
migration and restore here is a real one (CRIU), with the self-checking counter workload.

Each test reads the counter's own progress (its progress file in the pod's home) and its
output: a restored counter that lost or corrupted its state prints ``STATE CHECK FAILED``
and exits 3, which the fake kubelet reports as a Failed pod.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.backends.kubernetes.backend import KubernetesBackend
from core.backends.kubernetes.config import KubernetesConfig
from core.config import load_settings
from core.model import Action, Principal, PrincipalKind
from core.service.facade import Service, bootstrap
from tests.k8s.conftest import node, pod, wait_for, wrapped_job, wrapped_pod

PERSON = Principal(id="tester", kind=PrincipalKind.PERSON)


def k8s_config(kubeconfig: Path, store_dir: Path | None, **kw: Any) -> KubernetesConfig:
    return KubernetesConfig(
        enabled=True,
        kubeconfig=str(kubeconfig),
        context="emulator",
        retry_total_s=2,
        checkpoint_dir=str(store_dir) if store_dir else None,
        poll_interval_s=0.1,
        checkpoint_timeout_s=60,
        start_timeout_s=60,
        **kw,
    )


@pytest.fixture
def svc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, store_dir: Path
) -> Iterator[Service]:
    home = tmp_path / "home"
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    service = bootstrap(load_settings(home))
    backend = KubernetesBackend(k8s_config(kubeconfig, store_dir, eviction_wait_s=1))
    service.backends["k8s"] = backend  # type: ignore[assignment]
    yield service
    backend.close()


def pods(emu: Any, namespace: str = "default") -> dict[str, dict[str, Any]]:
    kind = emu.store.kinds[("", "pods")]
    items, _ = emu.store.list(kind, namespace, lambda o: True)
    return {p["metadata"]["name"]: p for p in items}


def running(emu: Any, name: str) -> dict[str, Any] | None:
    p = pods(emu).get(name)
    return p if p and (p.get("status") or {}).get("phase") == "Running" else None


def step_of(kubelet: Any, lineage: str) -> int:
    """The counter's newest reported step, across all pods that ran the lineage."""
    best = -1
    for path in Path(kubelet.root).glob(f"*/volumes/home/home/run/{lineage}.progress.json"):
        try:
            best = max(best, int(json.loads(path.read_text())["step"]))
        except (OSError, ValueError, KeyError):
            continue
    return best


def outputs(kubelet: Any) -> str:
    texts = [p.read_text(errors="replace") for p in Path(kubelet.root).glob("*/container.log")]
    texts += [
        p.read_text(errors="replace") for p in Path(kubelet.root).glob("*/volumes/home/home/logs/*")
    ]
    return "\n".join(texts)


def assert_intact(kubelet: Any) -> None:
    text = outputs(kubelet)
    assert "STATE CHECK FAILED" not in text, text[-2000:]


def owned(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` owned by a ReplicaSet: a controller recreates it, so a drain may evict it."""
    name = body["metadata"]["name"]
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{name}-rs", "uid": f"rs-{name}",
         "controller": True}
    ]  # fmt: skip
    return body


def act(svc: Service, action: Action, target: str, **params: Any) -> Any:
    result = svc.act(action, target, params, principal=PERSON, confirmed=True)
    assert result.status == "executed", (result.status, result.message)
    return result


def test_preempt_then_resume_job_keeps_progress(
    need_criu: None, emu: Any, kubelet: Any, svc: Service
) -> None:
    emu.seed(wrapped_job("train", "train-job"))
    wait_for("the job's pod to run", lambda: [p for p in pods(emu) if running(emu, p)])
    wait_for("progress", lambda: step_of(kubelet, "train-job") > 20)

    act(svc, Action.PREEMPT, "k8s:Job/default/train")
    job = svc.get_workload("k8s:Job/default/train")
    assert job.state.value == "stopped"
    assert not [p for p in pods(emu).values() if (p.get("status") or {}).get("phase") == "Running"]
    saved = step_of(kubelet, "train-job")
    assert svc.checkpoints("k8s:Job/default/train"), "no checkpoint on the volume"

    resumed = act(svc, Action.RESUME, "k8s:Job/default/train")
    new = wait_for("a running pod", lambda: [n for n in pods(emu) if running(emu, n)])
    assert len(new) == 1
    restored = resumed.execution.steps[-1].output["restored_from"]
    assert restored.startswith("train-job@")
    wait_for("progress after resume", lambda: step_of(kubelet, "train-job") > saved + 10)

    # the new pod's counter went on from the saved step, not from zero (it prints a step
    # line every 20 steps, so wait for its first one)
    def first_step() -> int | None:
        logs = Path(kubelet.root).glob(f"default_{new[0]}_*/container.log")
        found = [re.search(r"^step (\d+) verified", p.read_text(), re.M) for p in logs]
        return next((int(m.group(1)) for m in found if m), None)

    first = wait_for("a step line from the new pod", first_step)
    assert first > saved - 40, (first, saved)
    assert_intact(kubelet)


def test_migrate_wrapped_pod_resumes_from_its_checkpoint_on_the_target(
    need_criu: None, emu: Any, kubelet: Any, svc: Service
) -> None:
    manifest = wrapped_pod("mover", "mover")
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    emu.seed(manifest)
    wait_for("mover on n1", lambda: running(emu, "mover"))
    before = wait_for("progress", lambda: (s := step_of(kubelet, "mover")) > 20 and s)

    result = act(svc, Action.MIGRATE, "k8s:Pod/default/mover", to="k8s:n3")

    # The old pod was deleted after the new one restored; the kubelet removes its object
    # once it has terminated it (asynchronously, as on a real cluster).
    wait_for("the old pod removed once the new one runs", lambda: "mover" not in pods(emu))
    now = pods(emu)
    (new_name,) = now
    assert now[new_name]["spec"].get("nodeName") == "n3"
    steps = {s.name: s for s in result.execution.steps} if result.execution else {}
    # A bare pod with restartPolicy Never moves live (tests/k8s/test_live_moves.py): its
    # copy started first, as a standby, and took the workload over.
    restored = steps["takeover"].output if steps else {}
    assert restored.get("how") == "handoff", restored
    assert restored.get("node") == "n3"
    taken = steps["checkpoint"].output["seq"]
    assert restored["restored_from"].endswith(f"{taken}") or str(taken) in restored["restored_from"]
    wait_for("progress on n3", lambda: step_of(kubelet, "mover") > before + 10)
    assert_intact(kubelet)


def test_drain_moves_wrapped_workloads_honours_a_pdb_and_cordons(
    need_criu: None, emu: Any, kubelet: Any, svc: Service
) -> None:
    bare = wrapped_pod("solo", "solo")
    bare["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    job = wrapped_job("batch", "batch-job")
    nodes_kind = emu.store.kinds[("", "nodes")]

    def set_unschedulable(name: str, value: bool) -> None:
        obj = emu.store.get(nodes_kind, "", name)
        obj["spec"]["unschedulable"] = value
        emu.store.update(nodes_kind, "", name, obj, api=False)

    set_unschedulable("n2", True)
    set_unschedulable("n3", True)
    emu.seed(bare, job)
    # plain pods (not wrapped, a controller's): one protected by a budget that allows no
    # disruption
    guarded = owned(pod("web", labels={"app": "web"}, node="n1"))
    guarded["spec"]["containers"][0]["command"] = ["sleep", "600"]
    loose = owned(pod("scratch", node="n1"))
    # The container's command is PID 1 of its PID namespace, which the kernel shields from
    # a SIGTERM it has no handler for: it ends on the eviction's SIGTERM only with a trap.
    loose["spec"]["containers"][0]["command"] = ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"]
    emu.seed(
        guarded,
        loose,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web-pdb", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    wait_for("all on n1 run", lambda: all(running(emu, n) for n in ("solo", "web", "scratch")))
    wait_for(
        "the job's pod runs",
        lambda: [n for n in pods(emu) if n.startswith("batch-") and running(emu, n)],
    )
    set_unschedulable("n2", False)
    set_unschedulable("n3", False)
    before = wait_for("progress", lambda: (s := step_of(kubelet, "solo")) > 10 and s)

    preview = svc.act(
        Action.DRAIN_NODE, "k8s:n1", {}, principal=PERSON, confirmed=True, dry_run=True
    )
    assert preview.status == "planned"
    shown = {e["request"].split(" ")[0] + " " + e["step"]: e for e in preview.plan.scope.dry_run}
    assert any(k.startswith("PATCH cordon") for k in shown)
    refused = [e for e in preview.plan.scope.dry_run if e.get("refused")]
    assert [e["step"] for e in refused] == ["default-web-evict"]
    assert "web-pdb" in refused[0]["refused"]
    assert not emu.store.get(emu.store.kinds[("", "nodes")], "", "n1")["spec"].get("unschedulable")

    result = svc.act(Action.DRAIN_NODE, "k8s:n1", {}, principal=PERSON, confirmed=True)
    assert result.status == "failed", result.message
    assert "web-pdb" in result.message or "disruption budget" in result.message.lower()

    n1 = emu.store.get(emu.store.kinds[("", "nodes")], "", "n1")
    assert n1["spec"]["unschedulable"] is True
    now = pods(emu)
    assert "solo" not in now and "scratch" not in now
    moved = [n for n, p in now.items() if n.startswith("solo-cp")]
    assert moved and now[moved[0]]["spec"]["nodeName"] != "n1"
    # moved live (restartPolicy Never): its copy took over and is the workload now, unmarked
    assert "clawpoint.io/standby-for" not in now[moved[0]]["metadata"]["annotations"]
    assert [s.output["how"] for s in result.execution.steps if s.name.endswith("takeover")] == [
        "handoff"
    ]
    batch = [p for n, p in now.items() if n.startswith("batch-") and running(emu, n)]
    assert len(batch) == 1 and batch[0]["spec"]["nodeName"] != "n1"
    assert "web" in now and not now["web"]["metadata"].get("deletionTimestamp"), "never forced"
    wait_for("solo progresses elsewhere", lambda: step_of(kubelet, "solo") > before + 10)
    assert_intact(kubelet)

    act(svc, Action.UNDRAIN_NODE, "k8s:n1")
    assert not emu.store.get(emu.store.kinds[("", "nodes")], "", "n1")["spec"].get("unschedulable")


def test_failover_restores_from_the_newest_good_checkpoint_elsewhere(
    need_criu: None, emu: Any, kubelet: Any, svc: Service
) -> None:
    manifest = wrapped_pod("fragile", "fragile")
    manifest["spec"]["nodeName"] = "n2"  # bound there, as the scheduler would have
    emu.seed(manifest)
    wait_for("fragile runs", lambda: running(emu, "fragile"))
    wait_for("progress", lambda: step_of(kubelet, "fragile") > 10)
    saved = act(svc, Action.CHECKPOINT, "k8s:Pod/default/fragile")
    seq = saved.execution.steps[0].output["seq"]
    at_checkpoint = step_of(kubelet, "fragile")
    with pytest.raises(errors.Conflict, match="Ready"):
        svc.plan(Action.FAILOVER, "k8s:n2", {})  # nothing wrong with n2 yet
    kubelet.crash_node("n2")

    before = len(emu.requests)
    result = act(svc, Action.FAILOVER, "k8s:n2")
    assert result.plan.scope.fencing["by"] == "lease"
    # Fenced (cordoned, tainted out-of-service) before any pod is deleted or created.
    sent = [r for r in emu.requests[before:] if r.method != "GET" and not r.query.get("dryRun")]
    fence = next(i for i, r in enumerate(sent) if r.path.endswith("/nodes/n2"))
    assert all("/pods" not in r.path for r in sent[:fence]), [(r.method, r.path) for r in sent]
    assert any("/pods" in r.path for r in sent[fence:])
    n2 = emu.store.get(emu.store.kinds[("", "nodes")], "", "n2")
    assert n2["spec"]["unschedulable"] is True
    assert any(
        t["key"] == "node.kubernetes.io/out-of-service" and t["effect"] == "NoExecute"
        for t in n2["spec"]["taints"]
    )
    now = pods(emu)
    assert "fragile" not in now
    (name,) = now
    assert now[name]["spec"]["nodeName"] in ("n1", "n3")
    out = next(s.output for s in result.execution.steps if s.name.endswith("wait_restored"))
    assert out["restored_from"].endswith(str(seq))
    wait_for("progress after failover", lambda: step_of(kubelet, "fragile") > at_checkpoint + 10)
    assert_intact(kubelet)


def test_scale_deployment_respects_the_floor_and_previews_with_server_dry_run(
    emu: Any, svc: Service
) -> None:
    emu.seed(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "api",
                "namespace": "default",
                "annotations": {"clawpoint.io/min-replicas": "2"},
            },
            "spec": {
                "replicas": 4,
                "selector": {"matchLabels": {"app": "api"}},
                "template": {
                    "metadata": {"labels": {"app": "api"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                },
            },
        }
    )
    deploy = emu.store.kinds[("apps", "deployments")]
    with pytest.raises(errors.PolicyDenied, match="floor of 2"):
        svc.plan(Action.SCALE, "k8s:Deployment/default/api", {"replicas": 1})

    before = len(emu.requests)
    preview = svc.act(
        Action.SCALE,
        "k8s:Deployment/default/api",
        {"replicas": 2},
        principal=PERSON,
        confirmed=True,
        dry_run=True,
    )
    assert preview.status == "planned"
    (entry,) = preview.plan.scope.dry_run
    assert entry["object"]["kind"] == "Scale" and entry["object"]["spec"]["replicas"] == 2
    writes = [r for r in emu.requests[before:] if r.method in ("POST", "PATCH", "PUT", "DELETE")]
    assert writes and all(r.query.get("dryRun") == "All" for r in writes)
    assert emu.store.get(deploy, "default", "api")["spec"]["replicas"] == 4

    act(svc, Action.SCALE, "k8s:Deployment/default/api", replicas=2)
    assert emu.store.get(deploy, "default", "api")["spec"]["replicas"] == 2


def test_preempt_and_resume_of_a_deployment_scale_to_zero_and_back(emu: Any, svc: Service) -> None:
    emu.seed(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "svc", "namespace": "default"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "svc"}},
                "template": {
                    "metadata": {"labels": {"app": "svc"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                },
            },
        }
    )
    deploy = emu.store.kinds[("apps", "deployments")]
    preview = svc.act(
        Action.PREEMPT, "k8s:Deployment/default/svc", {}, principal=PERSON, dry_run=True
    )
    (entry,) = preview.plan.scope.dry_run
    assert entry["object"]["spec"]["replicas"] == 0
    assert emu.store.get(deploy, "default", "svc")["spec"]["replicas"] == 3
    act(svc, Action.PREEMPT, "k8s:Deployment/default/svc")
    assert emu.store.get(deploy, "default", "svc")["spec"]["replicas"] == 0
    act(svc, Action.RESUME, "k8s:Deployment/default/svc")
    got = emu.store.get(deploy, "default", "svc")
    assert got["spec"]["replicas"] == 3
    assert "clawpoint.io/preempted-replicas" not in (got["metadata"].get("annotations") or {})


def test_rbac_denial_names_the_permission_and_changes_nothing(emu: Any, svc: Service) -> None:
    from tests.k8s.emulator.rbac import Rule

    emu.seed(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": "team-a"},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox"}],
                    }
                }
            },
        }
    )
    emu.rules = [Rule(verbs=("get", "list", "watch"), resources=("*",), api_groups=("*",))]
    with pytest.raises(errors.OperationFailed) as info:
        svc.plan(Action.PREEMPT, "k8s:Job/team-a/j", {})
    err = info.value
    assert err.code == "kubernetes-forbidden"
    assert "patch jobs.batch 'j' in namespace 'team-a'" in err.message
    assert 'verbs: ["patch"]' in err.hint and 'resources: ["jobs"]' in err.hint
    jobs = emu.store.kinds[("batch", "jobs")]
    assert not emu.store.get(jobs, "team-a", "j")["spec"].get("suspend")


@pytest.mark.parametrize(
    "target",
    [
        "k8s:Job/default",
        "k8s:Frobnicator/default/x",
        "k8s:Job/default/a;rm -rf",
        "k8s:Job/../x",
        "k8s:Job/default/$(id)",
        "k8s:Pod/Default/X",
        "k8s:Job/default/a b",
        "k8s:n1;reboot",
    ],
)
def test_bad_ids_are_refused_before_any_request(emu: Any, svc: Service, target: str) -> None:
    action = Action.DRAIN_NODE if "/" not in target else Action.MIGRATE
    with emu.refuse_requests(), pytest.raises(errors.InvalidInput):
        svc.plan(action, target, {})


def test_kubelet_checkpoint_api_is_detected_per_node(emu: Any, api: Any) -> None:
    from core.backends.kubernetes.connection import Connection
    from core.backends.kubernetes.kubelet_api import probe_checkpoint_api

    emu.seed(node("off"), node("broken"), node("on"))
    for n in ("off", "broken", "on"):
        emu.seed(pod(f"p-{n}", node=n, phase="Running"))
    emu.checkpoint_by_node = {"broken": 500, "on": 200}
    conn = Connection(KubernetesConfig(retry_total_s=1), api_client=api)
    off = probe_checkpoint_api(conn, "off", "default", "p-off", "main")
    assert off.state == "off" and "feature gate" in off.message
    broken = probe_checkpoint_api(conn, "broken", "default", "p-broken", "main")
    assert broken.state == "refused" and "runtime" in broken.message
    on = probe_checkpoint_api(conn, "on", "default", "p-on", "main")
    assert on.state == "available" and on.archive and on.archive.endswith(".tar")
    assert not (off.restore_supported or broken.restore_supported or on.restore_supported)
    with emu.refuse_requests(), pytest.raises(errors.InvalidInput):
        probe_checkpoint_api(conn, "on", "default", "../etc", "main")


@pytest.mark.parametrize(
    ("target", "path", "suspended", "resumed"),
    [
        ("k8s:Workload/team-a/job-train-1a2b3", ("spec", "active"), False, True),
        ("k8s:PyTorchJob/team-a/bert", ("spec", "runPolicy", "suspend"), True, False),
        ("k8s:RayJob/team-a/tune", ("spec", "suspend"), True, False),
        ("k8s:InferenceService/team-a/llama", ("metadata", "annotations", "serving.kserve.io/stop"), "true", None),
    ],
)  # fmt: skip
def test_operator_workloads_are_suspended_and_resumed_through_their_own_fields(
    emu: Any, svc: Service, target: str, path: tuple[str, ...], suspended: Any, resumed: Any
) -> None:
    from tests.k8s.test_inventory import seed_every_kind

    seed_every_kind(emu)
    kind_name, ns, name = target.removeprefix("k8s:").split("/")
    (kind,) = [k for k in emu.store.kinds.values() if k.kind == kind_name and k.group]

    def field() -> Any:
        obj: Any = emu.store.get(kind, ns, name)
        for key in path:
            obj = (obj or {}).get(key)
        return obj

    preview = svc.act(Action.PREEMPT, target, {}, principal=PERSON, dry_run=True)
    (entry,) = preview.plan.scope.dry_run
    shown: Any = entry["object"]
    for key in path:
        shown = shown.get(key)
    assert shown == suspended
    assert field() != suspended, "the preview changed nothing"
    act(svc, Action.PREEMPT, target)
    assert field() == suspended
    act(svc, Action.RESUME, target)
    assert field() == resumed


def test_drain_waits_on_a_budget_until_it_allows_the_eviction(
    emu: Any, svc: Service, kubeconfig: Path
) -> None:
    import threading

    svc.backends["k8s"] = KubernetesBackend(k8s_config(kubeconfig, None, eviction_wait_s=60))  # type: ignore[assignment]
    emu.seed(
        node("n1"),
        node("n2"),
        owned(pod("web", labels={"app": "web"}, node="n1", phase="Running", ready=True)),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web-pdb", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        },
    )
    results: list[Any] = []
    worker = threading.Thread(
        target=lambda: results.append(
            svc.act(Action.DRAIN_NODE, "k8s:n1", {}, principal=PERSON, confirmed=True)
        )
    )
    worker.start()

    def refused_once() -> bool:
        return any(
            r.path.endswith("/pods/web/eviction") and not r.query.get("dryRun")
            for r in emu.requests
        )

    wait_for("a refused eviction", refused_once)
    assert "web" in pods(emu), "waiting, not forcing"
    pdbs = emu.store.kinds[("policy", "poddisruptionbudgets")]
    budget = emu.store.get(pdbs, "default", "web-pdb")
    budget["spec"]["minAvailable"] = 0  # the budget allows it now (say, a replica got ready)
    emu.store.update(pdbs, "default", "web-pdb", budget, api=False)
    worker.join(timeout=60)
    (result,) = results
    assert result.status == "executed", result.message
    assert "web" not in pods(emu)
