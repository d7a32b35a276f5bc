"""Pod Security admission in the emulator: each check of
staging/src/k8s.io/pod-security-admission/policy pinned with upstream's message, the namespace
labels that choose the level, the 403 a pod gets and the warning a workload gets, and where
clawpoint's documented pod spec stands (baseline: yes; restricted: no, and why)."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.k8s.conftest import OLD_CONTAINER_SECURITY_CONTEXT, wrapped_job, wrapped_pod
from tests.k8s.emulator import admission


def labelled(emu: Any, name: str, level: str, version: str | None = None) -> None:
    labels = {admission.ENFORCE: level}
    if version:
        labels[admission.ENFORCE_VERSION] = version
    emu.seed(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": labels},
            "status": {"phase": "Active"},
        }
    )


def bare(name: str = "p", **container_sc: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "main", "image": "busybox", "command": ["true"]}
    if container_sc:
        c["securityContext"] = container_sc
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [c]},
    }


def old_pod(name: str, namespace: str) -> dict[str, Any]:
    pod = wrapped_pod(name, name, namespace)
    pod["spec"].pop("hostUsers")
    pod["spec"].pop("securityContext")
    pod["spec"]["containers"][0]["securityContext"] = copy.deepcopy(OLD_CONTAINER_SECURITY_CONTEXT)
    return pod


def refused(api: Any, namespace: str, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as info:
        client.CoreV1Api(api).create_namespaced_pod(namespace, body)
    assert info.value.status == 403, info.value.body
    return str(__import__("json").loads(info.value.body)["message"])


# ----- clawpoint's pod specs ----------------------------------------------------------------
def test_baseline_refuses_the_old_spec_for_checkpoint_restore(emu: Any, api: Any) -> None:
    labelled(emu, "base", "baseline")
    message = refused(api, "base", old_pod("old", "base"))
    assert message == (
        'pods "old" is forbidden: violates PodSecurity "baseline:latest": non-default '
        'capabilities (container "main" must not include "CHECKPOINT_RESTORE", "SYS_PTRACE" '
        "in securityContext.capabilities.add)"
    )


def test_restricted_refuses_the_old_spec(emu: Any, api: Any) -> None:
    labelled(emu, "strict", "restricted")
    message = refused(api, "strict", old_pod("old", "strict"))
    assert message.startswith('pods "old" is forbidden: violates PodSecurity "restricted:latest": ')
    # capabilities_restricted overrides capabilities_baseline (OverrideCheckIDs in
    # check_capabilities_restricted.go): the baseline reason is not repeated.
    assert "non-default capabilities" not in message, message
    for reason in (
        "allowPrivilegeEscalation != false",
        'unrestricted capabilities (container "main" must set securityContext.capabilities.'
        'drop=["ALL"]; container "main" must not include "CHECKPOINT_RESTORE", "SYS_PTRACE" '
        "in securityContext.capabilities.add)",
        'runAsNonRoot != true (pod or container "main" must set securityContext.runAsNonRoot=true)',
    ):
        assert reason in message, message


def test_baseline_admits_the_documented_spec(emu: Any, api: Any) -> None:
    labelled(emu, "base", "baseline")
    created = client.CoreV1Api(api).create_namespaced_pod("base", wrapped_pod("new", "new", "base"))
    assert created.spec.host_users is False


def test_restricted_refuses_the_documented_spec_for_seccomp(emu: Any, api: Any) -> None:
    """Why the documented model is baseline: restricted needs a seccomp profile, under which
    CRIU cannot dump (tests/k8s/test_privileges.py); from policy 1.35 it also allows only the
    Default procMount, user namespace or not (check_procMount_restricted.go)."""
    labelled(emu, "strict", "restricted")
    message = refused(api, "strict", wrapped_pod("new", "new", "strict"))
    assert message == (
        'pods "new" is forbidden: violates PodSecurity "restricted:latest": seccompProfile '
        '(pod or container "main" must set securityContext.seccompProfile.type '
        'to "RuntimeDefault" or "Localhost")'
    )
    spec = wrapped_pod("new", "new", "strict")["spec"]
    assert any("procMount" in v for v in admission.violations(spec, "restricted", 35))


def test_the_user_namespace_relaxation_needs_the_gate_on_a_1_34_server(
    emu: Any, api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The emulator serves 1.34 with UserNamespacesPodSecurityStandards on (as the kind
    # cluster): baseline admits the documented pod at any policy version.
    labelled(emu, "gated", "baseline", "v1.34")
    client.CoreV1Api(api).create_namespaced_pod("gated", wrapped_pod("new", "new", "gated"))
    # A stock 1.34 server (gate off) refuses its Unmasked procMount; policy 1.35 (a 1.35+
    # server) relaxes it without any gate.
    monkeypatch.setattr(admission, "USERNS_GATE", False)
    labelled(emu, "stock", "baseline", "v1.34")
    message = refused(api, "stock", wrapped_pod("new", "new", "stock"))
    assert '"baseline:v1.34": procMount (container "main" must not set' in message
    assert admission.violations(wrapped_pod("x", "x")["spec"], "baseline", 35) == []


def test_an_unlabelled_namespace_is_privileged(emu: Any, api: Any) -> None:
    client.CoreV1Api(api).create_namespaced_pod("default", bare(privileged=True))


def test_a_workload_template_gets_a_warning_and_its_pods_are_refused(
    emu: Any, api: Any, kubelet: Any
) -> None:
    labelled(emu, "base", "baseline")
    job = wrapped_job("train", "train", "base")
    tmpl = job["spec"]["template"]["spec"]
    tmpl["containers"][0]["securityContext"] = copy.deepcopy(OLD_CONTAINER_SECURITY_CONTEXT)
    batch = client.BatchV1Api(api)
    _, code, headers = batch.create_namespaced_job_with_http_info("base", job)
    assert code == 201
    assert headers["Warning"].startswith(
        '299 - "would violate PodSecurity \\"baseline:latest\\": non-default capabilities'
    )
    deadline = time.monotonic() + 10
    while not kubelet.refused_pods and time.monotonic() < deadline:
        time.sleep(0.05)
    assert kubelet.refused_pods and "violates PodSecurity" in kubelet.refused_pods[0]
    assert not client.CoreV1Api(api).list_namespaced_pod("base").items


def test_a_dry_run_is_refused_too(emu: Any, api: Any) -> None:
    labelled(emu, "base", "baseline")
    with pytest.raises(ApiException) as info:
        client.CoreV1Api(api).create_namespaced_pod("base", bare(privileged=True), dry_run="All")
    assert info.value.status == 403


# ----- one test per check, with upstream's reason and detail ----------------------------------
def spec_of(**kw: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    container_sc = kw.pop("container_sc", None)
    if container_sc is not None:
        spec["containers"][0]["securityContext"] = container_sc
    spec.update(kw)
    return spec


RESTRICTED_OK_SC = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.mark.parametrize(
    ("level", "spec", "expected"),
    [
        (
            "baseline",
            spec_of(container_sc={"privileged": True}),
            'privileged (container "main" must not set securityContext.privileged=true)',
        ),
        (
            "baseline",
            spec_of(hostNetwork=True, hostPID=True),
            "host namespaces (hostNetwork=true, hostPID=true)",
        ),
        (
            "baseline",
            spec_of(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
            'hostPath volumes (volume "root")',
        ),
        (
            "baseline",
            {"containers": [{"name": "web", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
            'hostPort (container "web" uses hostPort 80)',
        ),
        (
            "baseline",
            spec_of(container_sc={"capabilities": {"add": ["NET_ADMIN", "CHOWN"]}}),
            'non-default capabilities (container "main" must not include "NET_ADMIN" in '
            "securityContext.capabilities.add)",
        ),
        (
            "baseline",
            spec_of(container_sc={"procMount": "Unmasked"}),
            'procMount (container "main" must not set securityContext.procMount to "Unmasked")',
        ),
        (
            "baseline",
            spec_of(securityContext={"seccompProfile": {"type": "Unconfined"}}),
            'seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")',
        ),
        (
            "baseline",
            spec_of(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}),
            "forbidden sysctls (kernel.msgmax)",
        ),
        (
            "restricted",
            spec_of(container_sc={**RESTRICTED_OK_SC, "allowPrivilegeEscalation": True}),
            'allowPrivilegeEscalation != false (container "main" must set '
            "securityContext.allowPrivilegeEscalation=false)",
        ),
        (
            "restricted",
            spec_of(
                container_sc={**RESTRICTED_OK_SC, "capabilities": {"add": ["NET_BIND_SERVICE"]}}
            ),
            'unrestricted capabilities (container "main" must set '
            'securityContext.capabilities.drop=["ALL"])',
        ),
        (
            "restricted",
            spec_of(
                container_sc=RESTRICTED_OK_SC,
                volumes=[{"name": "share", "nfs": {"server": "s", "path": "/"}}],
            ),
            'restricted volume types (volume "share" uses restricted volume type "nfs")',
        ),
        (
            "restricted",
            spec_of(container_sc={**RESTRICTED_OK_SC, "runAsNonRoot": False}),
            'runAsNonRoot != true (container "main" must not set securityContext.runAsNonRoot=false)',
        ),
        (
            "restricted",
            spec_of(container_sc={**RESTRICTED_OK_SC, "runAsUser": 0}),
            'runAsUser=0 (container "main" must not set runAsUser=0)',
        ),
        (
            "restricted",
            spec_of(container_sc={**RESTRICTED_OK_SC, "seccompProfile": None}),
            'seccompProfile (pod or container "main" must set securityContext.seccompProfile.type '
            'to "RuntimeDefault" or "Localhost")',
        ),
    ],
    ids=[
        "privileged",
        "hostNamespaces",
        "hostPathVolumes",
        "hostPorts",
        "capabilities_baseline",
        "procMount",
        "seccompProfile_baseline",
        "sysctls",
        "allowPrivilegeEscalation",
        "capabilities_restricted",
        "restrictedVolumes",
        "runAsNonRoot",
        "runAsUser",
        "seccompProfile_restricted",
    ],
)
def test_each_check_refuses_with_upstreams_message(
    level: str, spec: dict[str, Any], expected: str
) -> None:
    assert admission.violations(spec, level, admission.LATEST) == [expected]


def test_app_armor_fields_and_annotations() -> None:
    """policy/check_appArmorProfile.go: both the field and the deprecated annotation."""
    spec = spec_of(container_sc={"appArmorProfile": {"type": "Unconfined"}})
    meta = {"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}}
    assert admission.violations(spec, "baseline", admission.LATEST, meta) == [
        'forbidden AppArmor profiles (container "main" and annotation must not set AppArmor '
        'profile type to "Unconfined", '
        '"container.apparmor.security.beta.kubernetes.io/main="unconfined"")'
    ]
    ok = spec_of(container_sc={"appArmorProfile": {"type": "RuntimeDefault"}})
    assert admission.violations(ok, "baseline", admission.LATEST) == []


def test_se_linux_options() -> None:
    """policy/check_seLinuxOptions.go"""
    spec = spec_of(container_sc={"seLinuxOptions": {"type": "spc_t", "user": "root"}})
    assert admission.violations(spec, "baseline", admission.LATEST) == [
        'seLinuxOptions (container "main" set forbidden securityContext.seLinuxOptions: '
        'type "spc_t"; user may not be set)'
    ]
    engine = spec_of(securityContext={"seLinuxOptions": {"type": "container_engine_t"}})
    assert admission.violations(engine, "baseline", 31) == []
    assert len(admission.violations(engine, "baseline", 30)) == 1


def test_a_restricted_pod_passes_and_safe_sysctls_are_allowed() -> None:
    spec = spec_of(
        container_sc=RESTRICTED_OK_SC,
        securityContext={"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"}]},
    )
    assert admission.violations(spec, "restricted", admission.LATEST) == []
    # net.ipv4.tcp_rmem became safe at policy 1.32
    assert admission.violations(spec, "restricted", 31) == ["forbidden sysctls (net.ipv4.tcp_rmem)"]


def test_user_namespaced_pods_skip_run_as_non_root_and_run_as_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sc = {**RESTRICTED_OK_SC, "runAsNonRoot": None, "runAsUser": 0}
    spec = spec_of(container_sc=sc, hostUsers=False)
    assert admission.violations(spec, "restricted", 35) == []
    assert admission.violations(spec, "restricted", 34) == []  # the gate, on here
    monkeypatch.setattr(admission, "USERNS_GATE", False)
    assert len(admission.violations(spec, "restricted", 34)) == 2
