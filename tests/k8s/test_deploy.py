"""deploy/kubernetes: every manifest is valid against the Kubernetes schemas of the version
the docs name (offline, with ``kubernetes-validate``), the objects the emulator serves are
applied through its API, and the RBAC it grants is enough for what the backend does: the
emulator enforces exactly the rules of rbac.yaml while the backend reads the cluster and
previews its actions (every mutating request with ``dryRun=All``, authorized like the real
one), and nothing is refused. The kubelet checkpoint probe needs the opt-in role of
deploy/kubernetes/optional/ and says "not permitted" without it. The pods of clawpoint itself
run pinned images, long-running, off spot capacity, with resources and probes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from core.backends.kubernetes.backend import KubernetesBackend
from core.backends.kubernetes.config import KubernetesConfig
from core.backends.kubernetes.node_info import CAPACITY_LABELS
from core.cli.watch import parse_every
from core.model import Action
from tests.k8s.conftest import CONTAINER_SECURITY_CONTEXT, POD_SECURITY_CONTEXT, node, pod
from tests.k8s.emulator import admission, crds
from tests.k8s.emulator.rbac import Rule
from tests.k8s.emulator.schema import KUBERNETES_VERSION

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
OPTIONAL = DEPLOY / "optional"  # opt-in extras, not applied with deploy/kubernetes/*.yaml
NS = "ml-training"


def documents(*, optional: bool = False) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((OPTIONAL if optional else DEPLOY).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path.name, doc))
    return out


def pod_templates() -> list[tuple[str, dict[str, Any]]]:
    """(name, pod spec) of every workload in the manifests."""
    out = []
    for _, d in documents():
        if d["kind"] in ("Deployment", "Job"):
            out.append((d["metadata"]["name"], d["spec"]["template"]["spec"]))
    return out


def clawpoints_own() -> list[tuple[str, dict[str, Any]]]:
    """The pods of clawpoint itself (the MCP server and the watch loop)."""
    return [(n, s) for n, s in pod_templates() if n.startswith("clawpoint-")]


def test_manifests_exist_for_server_watch_rbac_and_an_example_job() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in documents()}
    for wanted in [
        ("Deployment", "clawpoint-server"),
        ("Deployment", "clawpoint-watch"),
        ("ServiceAccount", "clawpoint"),
        ("Role", "clawpoint-workloads"),
        ("ClusterRole", "clawpoint-nodes"),
        ("Job", "train-llm"),
        ("PersistentVolumeClaim", "clawpoint-checkpoints"),
    ]:
        assert wanted in kinds


@pytest.mark.parametrize(
    ("name", "doc"),
    documents() + documents(optional=True),
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_manifest_is_valid_against_the_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    # The version docs/kubernetes.md names; the emulator checks what clients send against it.
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_docs_name_the_version_the_manifests_are_validated_for() -> None:
    docs = (DEPLOY.parents[1] / "docs" / "kubernetes.md").read_text()
    assert f"Kubernetes {KUBERNETES_VERSION}" in docs


def test_the_watch_loop_is_long_running_not_a_cron_job() -> None:
    assert not [d for _, d in documents() if d["kind"] == "CronJob"]
    (watch,) = [d for _, d in documents() if d["metadata"]["name"] == "clawpoint-watch"]
    assert watch["kind"] == "Deployment" and watch["spec"]["replicas"] == 1
    assert watch["spec"]["strategy"]["type"] == "Recreate"  # never two loops at once
    (c,) = watch["spec"]["template"]["spec"]["containers"]
    argv = c["command"]
    assert argv[:2] == ["clawpoint", "watch"] and "--once" not in argv
    every = argv[argv.index("--every") + 1]
    assert 1 <= parse_every(every) <= 300  # the CLI accepts it, and it is a heartbeat
    # a pass in progress is finished before SIGTERM is obeyed: the grace period allows one
    assert watch["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 60


@pytest.mark.parametrize(
    ("name", "spec"), pod_templates(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_images_are_pinned_by_digest_and_pulled_if_not_present(
    name: str, spec: dict[str, Any]
) -> None:
    for c in spec["containers"]:
        assert re.search(r"@sha256:[0-9a-f]{64}$", c["image"]), (name, c["image"])
        assert c["imagePullPolicy"] == "IfNotPresent", name


def spot_exclusions() -> list[dict[str, Any]]:
    """One NotIn per capacity label the backend reads, with each value it takes for spot, in
    the lower and upper case it matches case-insensitively (node_info.capacity_type)."""
    out = []
    for label, values in CAPACITY_LABELS:
        spot = sorted({v for k, kind in values.items() if kind == "spot" for v in (k, k.upper())})
        if spot:
            out.append({"key": label, "operator": "NotIn", "values": spot})
    return out


@pytest.mark.parametrize(
    ("name", "spec"), clawpoints_own(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_clawpoint_stays_off_spot_nodes_by_the_labels_the_backend_reads(
    name: str, spec: dict[str, Any]
) -> None:
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    # one term (terms are ORed; the expressions of a term are ANDed)
    assert len(terms) == 1
    assert sorted(terms[0]["matchExpressions"], key=lambda e: e["key"]) == sorted(
        spot_exclusions(), key=lambda e: e["key"]
    )


def not_in_matches(expressions: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    """A node selector term of NotIn expressions, as the scheduler reads it: NotIn holds when
    the label is absent or its value is not listed (k8s.io/apimachinery pkg/labels
    selector.go, Requirement.Matches); the expressions of a term are ANDed."""
    assert all(e["operator"] == "NotIn" for e in expressions)
    return all(labels.get(e["key"]) not in e["values"] for e in expressions)


def test_the_spot_exclusion_keeps_exactly_the_nodes_the_backend_calls_spot() -> None:
    from core.backends.kubernetes.node_info import capacity_type

    exprs = spot_exclusions()
    for label, values in CAPACITY_LABELS:
        for value in values:
            for v in (value, value.upper()):
                labels = {label: v}
                assert not_in_matches(exprs, labels) == (capacity_type(labels) != "spot")
    assert not_in_matches(exprs, {})  # capacity without labels is fine


@pytest.mark.parametrize(
    ("name", "spec"), clawpoints_own(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_clawpoint_pods_have_requests_limits_and_run_unprivileged(
    name: str, spec: dict[str, Any]
) -> None:
    assert spec["securityContext"]["runAsNonRoot"]
    for c in spec["containers"]:
        res = c["resources"]
        assert {"cpu", "memory"} <= set(res["requests"]) and {"cpu", "memory"} <= set(res["limits"])
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert c["securityContext"]["allowPrivilegeEscalation"] is False


def test_the_server_is_probed() -> None:
    ((_, spec),) = [(n, s) for n, s in clawpoints_own() if n == "clawpoint-server"]
    (c,) = spec["containers"]
    port_names = {p["name"] for p in c["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["tcpSocket"]["port"] in port_names


def test_example_job_runs_the_wrapper_with_the_checkpoint_volume_and_criu_capabilities() -> None:
    (job,) = [d for _, d in documents() if d["kind"] == "Job"]
    spec = job["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["command"][:2] == ["clawpoint", "run"]
    # The documented privilege model, as the tests' wrapped pods use it (tests/k8s/conftest.py).
    assert spec["hostUsers"] is False
    assert c["securityContext"] == CONTAINER_SECURITY_CONTEXT
    assert spec["securityContext"] == POD_SECURITY_CONTEXT
    # ... and Pod Security admits it where the namespace says baseline.
    (ns,) = [d for _, d in documents() if d["kind"] == "Namespace"]
    level = ns["metadata"]["labels"][admission.ENFORCE]
    assert level == "baseline"
    assert admission.violations(spec, level, admission.LATEST) == []
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


def rules_from_manifests(*, optional: bool = False) -> list[Rule]:
    """The deployed identity's rules, as the emulator's authorizer enforces them (with the
    opt-in roles of deploy/kubernetes/optional/ too when ``optional``)."""
    rules = []
    for _, doc in documents() + (documents(optional=True) if optional else []):
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
        assert p.scope.dry_run, p.summary  # each previewed through the API, allowed
    # failover reads a node's heartbeat lease (fencing); a drain sees the other namespaces'
    # pods on the node (list only, cluster-wide), so it can confirm the node empty
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
    assert plans[3].scope.other_namespaces_visible is True
    # and the rules are no wider than that: other namespaces and kinds are refused
    from core import errors

    with pytest.raises(errors.OperationFailed, match="RBAC refused"):
        KubernetesBackend(
            KubernetesConfig(namespaces=["default"], retry_total_s=1), api_client=api
        ).workloads()


SERVED = {"Namespace", "ConfigMap", "PersistentVolumeClaim", "Deployment", "Job"}


def test_the_manifests_apply_through_the_api(emu: Any, api: Any) -> None:
    """What the emulator serves is created through its API as ``kubectl apply`` would (the
    schema check of the emu fixture included); the rest is checked offline above."""
    from kubernetes import utils

    docs = [d for _, d in documents() if d["kind"] in SERVED]
    docs.sort(key=lambda d: d["kind"] != "Namespace")  # the namespace first
    for doc in docs:
        utils.create_from_dict(api, doc)
    created = {(r.method, r.path.rsplit("/", 1)[-1]) for r in emu.requests}
    assert ("POST", "deployments") in created and ("POST", "jobs") in created


def test_the_checkpoint_probe_needs_the_opt_in_role_and_says_so(emu: Any, api: Any) -> None:
    emu.namespace(NS)
    emu.seed(node("n1"), pod("p", NS, node="n1", phase="Running"))
    emu.checkpoint_by_node = {"n1": 200}
    emu.rules = rules_from_manifests()
    assert not [r for r in emu.rules if "nodes/proxy" in r.resources], "opt-in only"
    backend = KubernetesBackend(KubernetesConfig(namespaces=[NS], retry_total_s=1), api_client=api)
    refused = backend.probe_checkpoint_api("n1", "p", NS, "main")
    assert refused.state == "not_permitted"
    assert "optional/checkpoint-probe-rbac.yaml" in refused.message
    assert not emu.checkpoint_calls  # nothing reached the kubelet
    emu.rules = rules_from_manifests(optional=True)
    allowed = backend.probe_checkpoint_api("n1", "p", NS, "main")
    assert allowed.state == "available", allowed.message
