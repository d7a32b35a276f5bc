"""scripts/kind-live.sh and deploy/kind: what can be checked without kind or a container
engine. The kind config it writes (one control-plane, two labelled workers, the shared
directory mounted into every node), the manifests it applies (valid for the Kubernetes
version the docs name, the ReadWriteMany claims bound to the shared hostPath volumes, the
loaded image instead of the placeholder digest), the objects the live suite creates, and its
refusal, naming what to install, when kind, docker or kubectl is missing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.k8s.conftest import CHECKPOINT_CLAIM, KEY_CLAIM, wrapped_job, wrapped_pod
from tests.k8s.emulator.schema import KUBERNETES_VERSION

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "kind-live.sh"
SHARED_IN_NODE = "/var/lib/clawpoint-shared"
WORKER_LABEL = "clawpoint.io/live-worker"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=env if env is not None else dict(os.environ),
        check=False,
    )


def only_path(tmp_path: Path, **stubs: str) -> dict[str, str]:
    """An environment whose PATH has the basic tools the script needs before it checks, and
    the given stub commands (name -> shell body), and nothing else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "cat", "sed", "grep"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    for name, body in stubs.items():
        stub = bin_dir / name
        stub.write_text(f"#!/bin/bash\n{body}\n")
        stub.chmod(0o755)
    return {
        "PATH": str(bin_dir),
        "HOME": str(tmp_path),
        "CLAWPOINT_KIND_STATE": str(tmp_path / "s"),
    }


@pytest.mark.parametrize("command", ["up", "test", "down"])
def test_it_refuses_without_kind_naming_what_to_install(tmp_path: Path, command: str) -> None:
    got = run(command, env=only_path(tmp_path))
    assert got.returncode == 3, got.stderr
    assert "kind" in got.stderr and "install" in got.stderr
    assert "kind.sigs.k8s.io" in got.stderr
    if command != "down":  # down needs no kubectl
        assert "kubectl" in got.stderr
    assert not (tmp_path / "s").exists(), "refused before creating anything"


def test_it_refuses_when_the_docker_daemon_does_not_answer(tmp_path: Path) -> None:
    env = only_path(tmp_path, kind="exit 0", kubectl="exit 0", docker="exit 1")
    got = run("up", env=env)
    assert got.returncode == 3 and "daemon" in got.stderr, got.stderr


def test_unknown_commands_print_the_usage(tmp_path: Path) -> None:
    got = run("sideways", env=only_path(tmp_path))
    assert got.returncode == 2 and "up" in got.stderr and "down" in got.stderr


def kind_config(tmp_path: Path, seccomp: Path | None) -> dict[str, Any]:
    env = {
        **os.environ,
        "CLAWPOINT_KIND_STATE": str(tmp_path / "s"),
        "CLAWPOINT_KIND_SECCOMP_DIR": str(seccomp or tmp_path / "no"),
    }
    got = run("config", env=env)
    assert got.returncode == 0, got.stderr
    doc: dict[str, Any] = yaml.safe_load(got.stdout)
    return doc


def test_the_kind_config_has_a_control_plane_two_labelled_workers_and_one_shared_mount(
    tmp_path: Path,
) -> None:
    cfg = kind_config(tmp_path, None)
    assert cfg["kind"] == "Cluster" and cfg["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    roles = [n["role"] for n in cfg["nodes"]]
    assert roles == ["control-plane", "worker", "worker"]
    for n in cfg["nodes"]:
        # the node image of the Kubernetes version the docs name, pinned by digest
        assert re.match(rf"kindest/node:v{re.escape(KUBERNETES_VERSION)}\.\d+@sha256:", n["image"])
        (mount,) = n["extraMounts"]  # no seccomp directory here: only the shared one
        assert mount == {
            "hostPath": str(tmp_path / "s" / "shared"),
            "containerPath": SHARED_IN_NODE,
        }
    for n in cfg["nodes"][1:]:
        assert n["labels"] == {WORKER_LABEL: "true"}
    assert "labels" not in cfg["nodes"][0]  # the tests never select the control-plane
    # the label the tests select by is the one the workers get
    assert "CLAWPOINT_LIVE_NODE_LABEL=$WORKER_LABEL=true" in SCRIPT.read_text()
    assert f"WORKER_LABEL={WORKER_LABEL}\n" in SCRIPT.read_text()


def test_a_1_34_cluster_lets_pod_security_baseline_admit_the_workload_pods(tmp_path: Path) -> None:
    """Baseline admits procMount: Unmasked with hostUsers: false from policy 1.35; a 1.34 API
    server needs the UserNamespacesPodSecurityStandards gate, which 1.35 removed."""
    cfg = kind_config(tmp_path, None)
    if KUBERNETES_VERSION in ("1.29", "1.30", "1.31", "1.32", "1.33", "1.34"):
        assert cfg["featureGates"] == {"UserNamespacesPodSecurityStandards": True}
    else:
        assert "featureGates" not in cfg


def test_the_seccomp_profiles_are_mounted_where_the_kubelet_reads_them(tmp_path: Path) -> None:
    profiles = tmp_path / "seccomp"
    profiles.mkdir()
    cfg = kind_config(tmp_path, profiles)
    for n in cfg["nodes"]:
        assert {
            "hostPath": str(profiles),
            "containerPath": "/var/lib/kubelet/seccomp/profiles",  # the kubelet's seccomp root
            "readOnly": True,
        } in n["extraMounts"]


def applied(tmp_path: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "CLAWPOINT_LIVE_IMAGE": "clawpoint:live"}
    got = run("manifests", env=env)
    assert got.returncode == 0, got.stderr
    return [d for d in yaml.safe_load_all(got.stdout) if d]


def test_the_applied_manifests_are_valid_for_the_documented_version(tmp_path: Path) -> None:
    docs = applied(tmp_path)
    assert {d["kind"] for d in docs} >= {
        "StorageClass", "PersistentVolume", "PersistentVolumeClaim", "Deployment", "ClusterRole"
    }  # fmt: skip
    for d in docs:
        kubernetes_validate.validate(d, KUBERNETES_VERSION, strict=True)


def test_the_loaded_image_replaces_the_placeholder_and_is_never_pulled(tmp_path: Path) -> None:
    for d in applied(tmp_path):
        if d["kind"] != "Deployment":
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            assert c["image"] == "clawpoint:live" and c["imagePullPolicy"] == "IfNotPresent"


def quantity_gi(q: str) -> float:
    units = {"Mi": 1 / 1024, "Gi": 1.0, "Ti": 1024.0}
    return float(q[:-2]) * units[q[-2:]]


def test_every_shared_claim_is_bound_to_a_shared_host_directory(tmp_path: Path) -> None:
    """Each ReadWriteMany claim (of the deploy manifests and of the live suite) has a
    pre-bound hostPath PV of the shared class, big enough, under the mounted directory;
    the single-node claim (clawpoint's state) keeps the cluster's default class."""
    docs = applied(tmp_path)
    pvs = {
        (p["spec"]["claimRef"]["namespace"], p["spec"]["claimRef"]["name"]): p
        for p in docs
        if p["kind"] == "PersistentVolume"
    }
    live_ns = "clawpoint-live"
    live_claims = {
        (live_ns, name): {
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "clawpoint-shared",
                "resources": {"requests": {"storage": "5Gi"}},
            }
        }
        for name in (CHECKPOINT_CLAIM, KEY_CLAIM)
    }  # fmt: skip  (as tests/k8s/live/test_live.py creates them)
    claims = {
        (c["metadata"]["namespace"], c["metadata"]["name"]): c
        for c in docs
        if c["kind"] == "PersistentVolumeClaim"
    }
    for key, claim in {**claims, **live_claims}.items():
        spec = claim["spec"]
        if spec["accessModes"] != ["ReadWriteMany"]:
            assert "storageClassName" not in spec and key not in pvs
            continue
        pv = pvs[key]["spec"]
        assert spec["storageClassName"] == pv["storageClassName"] == "clawpoint-shared"
        assert pv["accessModes"] == ["ReadWriteMany"]
        want = quantity_gi(spec["resources"]["requests"]["storage"])
        assert quantity_gi(pv["capacity"]["storage"]) >= want
        assert pv["hostPath"]["path"].startswith(SHARED_IN_NODE + f"/{key[0]}/")
    assert set(pvs) == {k for k, c in {**claims, **live_claims}.items()
                        if c["spec"]["accessModes"] == ["ReadWriteMany"]}  # fmt: skip
    # the live suite's namespace is the one the PVs are bound in
    assert f"LIVE_NS={live_ns}" in SCRIPT.read_text()


def test_the_objects_the_live_suite_creates_are_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.k8s.live import test_live

    monkeypatch.setattr(test_live, "IMAGE", "clawpoint:live")
    monkeypatch.setattr(test_live, "NODE_LABEL", f"{WORKER_LABEL}=true")
    objs = [
        test_live.live_spec(wrapped_job("live-train", "live-train")),
        test_live.live_spec(wrapped_pod("live-mover", "live-mover")),
        {"apiVersion": "v1", "kind": "Pod", **test_live.sleeper({"app": "guarded"}),
         "metadata": {"name": "guarded", "labels": {"app": "guarded"}}},
    ]  # fmt: skip
    for obj in objs:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
        assert spec["nodeSelector"] == {WORKER_LABEL: "true"}  # workers only
        assert spec["containers"][0]["imagePullPolicy"] == "IfNotPresent"


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck is not installed")
def test_the_script_passes_shellcheck() -> None:
    got = subprocess.run(
        ["shellcheck", str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert got.returncode == 0, got.stdout


def test_make_live_k8s_brings_the_cluster_up_and_runs_the_suite() -> None:
    make = (ROOT / "Makefile").read_text()
    target = make.split("\nlive-k8s:", 1)[1].split("\n\n", 1)[0]
    assert "scripts/kind-live.sh up" in target and "scripts/kind-live.sh test" in target
