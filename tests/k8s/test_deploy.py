"""deploy/kubernetes: every manifest is valid against the Kubernetes schemas (offline, with
``kubernetes-validate``), and the RBAC it grants is enough for what the backend does: the
emulator enforces exactly the rules of rbac.yaml while the backend reads the cluster and
previews its actions (every mutating request with ``dryRun=All``, authorized like the real
one), and nothing is refused."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from core.backends.kubernetes.backend import KubernetesBackend
from core.backends.kubernetes.connection import KubernetesConfig
from core.model import Action
from tests.k8s.conftest import node, pod
from tests.k8s.emulator import crds
from tests.k8s.emulator.rbac import Rule

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
NS = "ml-training"


def documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(DEPLOY.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path.name, doc))
    return out


def test_manifests_exist_for_server_watch_rbac_and_an_example_job() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in documents()}
    for wanted in [
        ("Deployment", "clawpoint-server"),
        ("CronJob", "clawpoint-watch"),
        ("ServiceAccount", "clawpoint"),
        ("Role", "clawpoint-workloads"),
        ("ClusterRole", "clawpoint-nodes"),
        ("Job", "train-llm"),
        ("PersistentVolumeClaim", "clawpoint-checkpoints"),
    ]:
        assert wanted in kinds


@pytest.mark.parametrize(
    ("name", "doc"), documents(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_manifest_is_valid_against_the_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_example_job_runs_the_wrapper_with_the_checkpoint_volume_and_criu_capabilities() -> None:
    (job,) = [d for _, d in documents() if d["kind"] == "Job"]
    spec = job["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["command"][:2] == ["clawpoint", "run"]
    assert set(c["securityContext"]["capabilities"]["add"]) == {"CHECKPOINT_RESTORE", "SYS_PTRACE"}
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in spec["volumes"]
        if "persistentVolumeClaim" in v
    }
    assert claims == {"clawpoint-checkpoints", "clawpoint-keys"}
    assert job["spec"]["template"]["metadata"]["annotations"]["clawpoint.io/lineage"]
    # The key that signs the manifests is where the wrapper's config says, on the key volume
    # (it outlives the pods), never on the checkpoint volume.
    (cm,) = [d for _, d in documents() if d["metadata"]["name"] == "clawpoint-wrapper"]
    key = tomllib.loads(cm["data"]["config.toml"])["store"]["key"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    (key_mount,) = [
        n for n, v in vols.items()
        if v.get("persistentVolumeClaim", {}).get("claimName") == "clawpoint-keys"
    ]  # fmt: skip
    assert key.startswith(mounts[key_mount] + "/")


def rules_from_manifests() -> list[Rule]:
    """The deployed identity's rules, as the emulator's authorizer enforces them."""
    rules = []
    for _, doc in documents():
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        namespaces = (doc["metadata"]["namespace"],) if doc["kind"] == "Role" else None
        for r in doc["rules"]:
            rules.append(
                Rule(
                    verbs=tuple(r["verbs"]),
                    resources=tuple(r["resources"]),
                    api_groups=tuple(r["apiGroups"]),
                    namespaces=namespaces,
                )
            )
    for r in rules:
        assert "*" not in r.verbs and "*" not in r.resources, "least privilege: no wildcards"
    return rules


def test_the_deployed_rbac_allows_what_the_backend_does_and_no_more(emu: Any, api: Any) -> None:
    emu.namespace(NS)
    emu.seed(*crds.kueue())
    emu.seed(
        node("n1"),
        node("n2"),
        pod("plain", NS, node="n1", phase="Running", ready=True),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "api", "namespace": NS},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "api"}},
                "template": {
                    "metadata": {"labels": {"app": "api"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]},
                },
            },
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": NS},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox"}],
                    }
                }
            },
        },
    )
    emu.rules = rules_from_manifests()
    backend = KubernetesBackend(KubernetesConfig(namespaces=[NS], retry_total_s=1), api_client=api)
    assert {n.name for n in backend.nodes()} == {"n1", "n2"}
    assert {w.id for w in backend.workloads()} >= {
        f"k8s:Pod/{NS}/plain",
        f"k8s:Job/{NS}/j",
        f"k8s:Deployment/{NS}/api",
    }
    backend.queue_depth()
    plans = [
        backend.plan(Action.SCALE, f"Deployment/{NS}/api", {"replicas": 2}),
        backend.plan(Action.PREEMPT, f"Job/{NS}/j", {}),
        backend.plan(Action.PREEMPT, f"Deployment/{NS}/api", {}),
        backend.plan(Action.DRAIN_NODE, "n1", {"force": True}),  # "plain" has no controller
        backend.plan(Action.CORDON_NODE, "n1", {}),
    ]
    for p in plans:
        assert p.scope["dry_run"], p.summary  # each previewed through the API, allowed
    # failover reads a node's heartbeat lease (fencing); the other namespaces' pods on a
    # drained node are not listable with these rules, which the drain plan says
    from core.backends.kubernetes import nodes

    emu.namespace("kube-node-lease")
    emu.seed(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "n1", "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40},
        }
    )
    assert nodes.read_lease(backend, "n1")["spec"]["holderIdentity"] == "n1"
    assert plans[3].scope["other_namespaces_visible"] is False
    # and the rules are no wider than that: other namespaces and kinds are refused
    from core import errors

    with pytest.raises(errors.OperationFailed, match="RBAC refused"):
        KubernetesBackend(
            KubernetesConfig(namespaces=["default"], retry_total_s=1), api_client=api
        ).workloads()
