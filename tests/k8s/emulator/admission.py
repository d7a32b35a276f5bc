"""Pod Security admission, as kube-apiserver's built-in PodSecurity plugin applies it.

A namespace's labels choose the level: ``pod-security.kubernetes.io/enforce`` (privileged,
baseline or restricted) and ``pod-security.kubernetes.io/enforce-version`` (``latest``, the
default, or ``v1.N``). A pod created in the namespace (by a client or by a controller) that
violates the enforced level is refused with 403 Forbidden and upstream's message,
``pods "x" is forbidden: violates PodSecurity "restricted:latest": reason (detail), ...``
(staging/src/k8s.io/pod-security-admission/admission/admission.go). Workload objects whose pod
template would violate it are admitted with a ``Warning`` instead (upstream:
``would violate PodSecurity "...": ...``), since the refusal comes when their pods are made.

The checks follow staging/src/k8s.io/pod-security-admission/policy/check_*.go, each cited on
its function, in upstream's order (baseline checks, then restricted ones; a restricted check
that overrides a baseline one replaces it). Versions: the user-namespace relaxations
(``hostUsers: false`` skips ``runAsNonRoot``, ``runAsUser`` and the baseline ``procMount``
check) apply from policy version 1.35, and on 1.31-1.34 API servers at any policy version
when the alpha ``UserNamespacesPodSecurityStandards`` gate is on (kubernetes PR #126163; 1.35
removed the gate and made the relaxation policy 1.35); ``procMount_restricted`` exists from
1.35. The emulator serves 1.34 (``/version``), so ``latest`` is 1.34, with that gate on
(``USERNS_GATE``), as ``scripts/kind-live.sh`` starts its 1.34 cluster; a test that wants a
stock 1.34 server turns it off.

Limits: ``enforce`` only (``audit`` and ``warn`` labels are not read); no exemptions; pod
updates are not re-checked; the host probe/lifecycle check (1.34), Windows host processes and
ephemeral-container specifics are not modelled.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from tests.k8s.emulator import status

ENFORCE = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"
LATEST = 34  # minor version "latest" stands for: the emulator's own (/version)
# The API server's UserNamespacesPodSecurityStandards gate (1.31-1.34, alpha): on here, as on
# the kind cluster of the live suite; module-wide so a test can turn it off.
USERNS_GATE = True
Result = tuple[str, str] | None  # (reason, detail), or None when allowed
Spec = dict[str, Any]


# ----- helpers (policy/helpers.go, visitor.go) ----------------------------------------------
def _containers(spec: Spec) -> Iterator[Spec]:
    """policy/visitor.go visitContainers: init, regular, then ephemeral containers."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _quote(items: list[str]) -> str:
    return ", ".join(f'"{i}"' for i in items)


def _plural(one: str, many: str, n: int) -> str:
    return one if n == 1 else many


def _userns(spec: Spec) -> bool:
    """policy/helpers.go relaxPolicyForUserNamespacePod."""
    return spec.get("hostUsers") is False


def _relaxed(spec: Spec, v: int) -> bool:
    """A user-namespaced pod skips the relaxed checks: from policy 1.35, or on a 1.31-1.34
    server with the gate on (any policy version: the gate is read in every version's check)."""
    return _userns(spec) and (v >= 35 or USERNS_GATE)


def _sc(c: Spec) -> Spec:
    return c.get("securityContext") or {}


# ----- baseline -----------------------------------------------------------------------------
def privileged(spec: Spec, _v: int) -> Result:
    """policy/check_privileged.go"""
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("privileged") is True]
    if bad:
        n = _plural("container", "containers", len(bad))
        return "privileged", f"{n} {_quote(bad)} must not set securityContext.privileged=true"
    return None


def host_namespaces(spec: Spec, _v: int) -> Result:
    """policy/check_hostNamespaces.go"""
    on = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k) is True]
    return ("host namespaces", ", ".join(on)) if on else None


def host_path_volumes(spec: Spec, _v: int) -> Result:
    """policy/check_hostPathVolumes.go"""
    bad = [v["name"] for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    if bad:
        return "hostPath volumes", f"{_plural('volume', 'volumes', len(bad))} {_quote(bad)}"
    return None


def host_ports(spec: Spec, _v: int) -> Result:
    """policy/check_hostPorts.go"""
    names: list[str] = []
    ports: list[str] = []
    for c in _containers(spec):
        used = [str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")]
        if used:
            names.append(c["name"])
            ports.extend(used)
    if names:
        verb = "uses" if len(names) == 1 else "use"
        return (
            "hostPort",
            f"{_plural('container', 'containers', len(names))} {_quote(names)} {verb} "
            f"{_plural('hostPort', 'hostPorts', len(ports))} {', '.join(ports)}",
        )
    return None


# The capabilities containerd and CRI-O grant by default, minus NET_RAW
# (policy/check_capabilities_baseline.go capabilities_allowed_1_0).
BASELINE_CAPS = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}


def capabilities_baseline(spec: Spec, _v: int) -> Result:
    """policy/check_capabilities_baseline.go"""
    bad: list[str] = []
    caps: set[str] = set()
    for c in _containers(spec):
        extra = {str(x) for x in (_sc(c).get("capabilities") or {}).get("add") or []}
        extra -= BASELINE_CAPS
        if extra:
            bad.append(c["name"])
            caps |= extra
    if bad:
        return (
            "non-default capabilities",
            f"{_plural('container', 'containers', len(bad))} {_quote(bad)} must not include "
            f"{_quote(sorted(caps))} in securityContext.capabilities.add",
        )
    return None


def _proc_mount(spec: Spec) -> Result:
    bad: list[str] = []
    kinds: set[str] = set()
    for c in _containers(spec):
        pm = _sc(c).get("procMount")
        if pm is not None and pm != "Default":
            bad.append(c["name"])
            kinds.add(str(pm))
    if bad:
        return (
            "procMount",
            f"{_plural('container', 'containers', len(bad))} {_quote(bad)} must not set "
            f"securityContext.procMount to {_quote(sorted(kinds))}",
        )
    return None


def proc_mount_baseline(spec: Spec, v: int) -> Result:
    """policy/check_procMount_baseline.go: relaxed for user-namespaced pods from 1.35."""
    if _relaxed(spec, v):
        return None
    return _proc_mount(spec)


def _seccomp_type(sc: Spec) -> str | None:
    return (sc.get("seccompProfile") or {}).get("type")


def seccomp_baseline(spec: Spec, _v: int) -> Result:
    """policy/check_seccompProfile_baseline.go: never explicitly Unconfined."""
    details = []
    if _seccomp_type(spec.get("securityContext") or {}) == "Unconfined":
        details.append('pod must not set securityContext.seccompProfile.type to "Unconfined"')
    bad = [c["name"] for c in _containers(spec) if _seccomp_type(_sc(c)) == "Unconfined"]
    if bad:
        details.append(
            f"{_plural('container', 'containers', len(bad))} {_quote(bad)} must not set "
            'securityContext.seccompProfile.type to "Unconfined"'
        )
    return ("seccompProfile", "; ".join(details)) if details else None


# policy/check_sysctls.go: the safe set (with the versions that added names).
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced": 0,
    "net.ipv4.ip_local_port_range": 0,
    "net.ipv4.tcp_syncookies": 0,
    "net.ipv4.ping_group_range": 0,
    "net.ipv4.ip_unprivileged_port_start": 0,
    "net.ipv4.ip_local_reserved_ports": 27,
    "net.ipv4.tcp_keepalive_time": 29,
    "net.ipv4.tcp_fin_timeout": 29,
    "net.ipv4.tcp_keepalive_intvl": 29,
    "net.ipv4.tcp_keepalive_probes": 29,
    "net.ipv4.tcp_rmem": 32,
    "net.ipv4.tcp_wmem": 32,
}


def sysctls(spec: Spec, v: int) -> Result:
    """policy/check_sysctls.go"""
    bad = [
        str(s.get("name"))
        for s in (spec.get("securityContext") or {}).get("sysctls") or []
        if SAFE_SYSCTLS.get(str(s.get("name")), 99) > v
    ]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None


_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def app_armor(spec: Spec, _v: int, meta: Spec | None = None) -> Result:
    """policy/check_appArmorProfile.go: the ``appArmorProfile`` fields RuntimeDefault or
    Localhost; the deprecated annotations empty, ``runtime/default`` or ``localhost/...``."""
    setters: list[str] = []
    values: set[str] = set()
    pod = ((spec.get("securityContext") or {}).get("appArmorProfile") or {}).get("type")
    if pod is not None and pod not in ("RuntimeDefault", "Localhost"):
        setters.append("pod")
        values.add(str(pod))
    bad: list[str] = []
    for c in _containers(spec):
        kind = (_sc(c).get("appArmorProfile") or {}).get("type")
        if kind is not None and kind not in ("RuntimeDefault", "Localhost"):
            bad.append(c["name"])
            values.add(str(kind))
    if bad:
        setters.append(f"{_plural('container', 'containers', len(bad))} {_quote(bad)}")
    annotations = sorted(
        f'{k}="{v}"'
        for k, v in ((meta or {}).get("annotations") or {}).items()
        if k.startswith(_APPARMOR_ANNOTATION)
        and not (not v or v == "runtime/default" or str(v).startswith("localhost/"))
    )
    listed = [*sorted(values), *annotations]
    if annotations:
        setters.append(_plural("annotation", "annotations", len(annotations)))
    if setters:
        return (
            _plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(listed)),
            f"{' and '.join(setters)} must not set AppArmor profile type to {_quote(listed)}",
        )
    return None


def se_linux(spec: Spec, v: int) -> Result:
    """policy/check_seLinuxOptions.go: type empty or a container type (container_engine_t
    from 1.31), no user, no role. (Upstream names a user or role only next to a bad type.)"""
    allowed = {"", "container_t", "container_init_t", "container_kvm_t"}
    if v >= 31:
        allowed.add("container_engine_t")
    bad_types: set[str] = set()
    flags = {"user": False, "role": False}

    def valid(opts: Spec) -> bool:
        ok = True
        if str(opts.get("type") or "") not in allowed:
            ok = False
            bad_types.add(str(opts.get("type") or ""))
        for key in ("user", "role"):
            if opts.get(key):
                ok = False
                flags[key] = True
        return ok

    setters: list[str] = []
    pod = (spec.get("securityContext") or {}).get("seLinuxOptions")
    if pod is not None and not valid(pod):
        setters.append("pod")
    bad = [
        c["name"]
        for c in _containers(spec)
        if _sc(c).get("seLinuxOptions") is not None and not valid(_sc(c)["seLinuxOptions"])
    ]
    if bad:
        setters.append(f"{_plural('container', 'containers', len(bad))} {_quote(bad)}")
    if not setters:
        return None
    data: list[str] = []
    if bad_types:
        data.append(f"{_plural('type', 'types', len(bad_types))} {_quote(sorted(bad_types))}")
        data += [f"{k} may not be set" for k in ("user", "role") if flags[k]]
    return (
        "seLinuxOptions",
        f"{' and '.join(setters)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}",
    )


# ----- restricted ---------------------------------------------------------------------------
def allow_privilege_escalation(spec: Spec, _v: int) -> Result:
    """policy/check_allowPrivilegeEscalation.go: must be explicitly false."""
    bad = [
        c["name"] for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False
    ]
    if bad:
        return (
            "allowPrivilegeEscalation != false",
            f"{_plural('container', 'containers', len(bad))} {_quote(bad)} must set "
            "securityContext.allowPrivilegeEscalation=false",
        )
    return None


def capabilities_restricted(spec: Spec, v: int) -> Result:
    """policy/check_capabilities_restricted.go: drop ALL, add nothing but NET_BIND_SERVICE
    (from policy 1.22)."""
    if v < 22:
        return None
    missing: list[str] = []
    adding: list[str] = []
    caps: set[str] = set()
    for c in _containers(spec):
        cap = _sc(c).get("capabilities")
        if cap is None:
            missing.append(c["name"])
            continue
        if "ALL" not in (cap.get("drop") or []):
            missing.append(c["name"])
        extra = {str(x) for x in cap.get("add") or [] if x != "NET_BIND_SERVICE"}
        if extra:
            adding.append(c["name"])
            caps |= extra
    details = []
    if missing:
        details.append(
            f"{_plural('container', 'containers', len(missing))} {_quote(missing)} must set "
            'securityContext.capabilities.drop=["ALL"]'
        )
    if adding:
        details.append(
            f"{_plural('container', 'containers', len(adding))} {_quote(adding)} must not "
            f"include {_quote(sorted(caps))} in securityContext.capabilities.add"
        )
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def proc_mount_restricted(spec: Spec, v: int) -> Result:
    """policy/check_procMount_restricted.go: Default only, user namespace or not (1.35+;
    before, the baseline check, unrelaxed, did the same)."""
    return _proc_mount(spec) if v >= 35 else None


_ALLOWED_VOLUMES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
)


def restricted_volumes(spec: Spec, _v: int) -> Result:
    """policy/check_restrictedVolumes.go"""
    bad: list[str] = []
    kinds: set[str] = set()
    for vol in spec.get("volumes") or []:
        sources = [k for k in vol if k != "name"]
        if not any(k in _ALLOWED_VOLUMES for k in sources):
            bad.append(vol["name"])
            kinds.update(sources or ["unknown"])
    if bad:
        many = len(bad) != 1
        return (
            "restricted volume types",
            f"{_plural('volume', 'volumes', len(bad))} {_quote(bad)} "
            f"{'use' if many else 'uses'} restricted volume "
            f"{_plural('type', 'types', len(kinds))} {_quote(sorted(kinds))}",
        )
    return None


def run_as_non_root(spec: Spec, v: int) -> Result:
    """policy/check_runAsNonRoot.go (skipped for user-namespaced pods from 1.35)."""
    if _relaxed(spec, v):
        return None
    setters: list[str] = []
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    if pod is False:
        setters.append("pod")
    explicit: list[str] = []
    implicit: list[str] = []
    for c in _containers(spec):
        mine = _sc(c).get("runAsNonRoot")
        if mine is False:
            explicit.append(c["name"])
        elif mine is None and pod is not True:
            implicit.append(c["name"])
    if explicit:
        setters.append(f"{_plural('container', 'containers', len(explicit))} {_quote(explicit)}")
    if setters:
        return (
            "runAsNonRoot != true",
            f"{' and '.join(setters)} must not set securityContext.runAsNonRoot=false",
        )
    if implicit:
        return (
            "runAsNonRoot != true",
            f"pod or {_plural('container', 'containers', len(implicit))} {_quote(implicit)} "
            "must set securityContext.runAsNonRoot=true",
        )
    return None


def run_as_user(spec: Spec, v: int) -> Result:
    """policy/check_runAsUser.go: never uid 0 (skipped for user-namespaced pods from 1.35)."""
    if _relaxed(spec, v):
        return None
    setters = []
    if (spec.get("securityContext") or {}).get("runAsUser") == 0:
        setters.append("pod")
    bad = [c["name"] for c in _containers(spec) if _sc(c).get("runAsUser") == 0]
    if bad:
        setters.append(f"{_plural('container', 'containers', len(bad))} {_quote(bad)}")
    if setters:
        return "runAsUser=0", f"{' and '.join(setters)} must not set runAsUser=0"
    return None


def seccomp_restricted(spec: Spec, _v: int) -> Result:
    """policy/check_seccompProfile_restricted.go: RuntimeDefault or Localhost, set on the pod
    or on every container."""
    ok = ("RuntimeDefault", "Localhost")
    pod = _seccomp_type(spec.get("securityContext") or {})
    details = []
    if pod is not None and pod not in ok:
        details.append(f'pod must not set securityContext.seccompProfile.type to "{pod}"')
    explicit: list[str] = []
    implicit: list[str] = []
    values: set[str] = set()
    for c in _containers(spec):
        mine = _seccomp_type(_sc(c))
        if mine is not None and mine not in ok:
            explicit.append(c["name"])
            values.add(mine)
        elif mine is None and pod not in ok:
            implicit.append(c["name"])
    if explicit:
        details.append(
            f"{_plural('container', 'containers', len(explicit))} {_quote(explicit)} must not "
            f"set securityContext.seccompProfile.type to {_quote(sorted(values))}"
        )
    if implicit:
        details.append(
            f"pod or {_plural('container', 'containers', len(implicit))} {_quote(implicit)} "
            'must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
        )
    return ("seccompProfile", "; ".join(details)) if details else None


Check = Callable[[Spec, int], Result]
# Upstream's order (policy files in name order, baseline before restricted); the restricted
# level runs the overriding check in place of seccompProfile_baseline and procMount.
BASELINE: list[tuple[str, Check]] = [
    ("appArmorProfile", app_armor),
    ("capabilities_baseline", capabilities_baseline),
    ("hostNamespaces", host_namespaces),
    ("hostPathVolumes", host_path_volumes),
    ("hostPorts", host_ports),
    ("privileged", privileged),
    ("procMount", proc_mount_baseline),
    ("seLinuxOptions", se_linux),
    ("seccompProfile_baseline", seccomp_baseline),
    ("sysctls", sysctls),
]
RESTRICTED: list[tuple[str, Check]] = [
    ("allowPrivilegeEscalation", allow_privilege_escalation),
    ("capabilities_restricted", capabilities_restricted),
    ("procMount_restricted", proc_mount_restricted),
    ("restrictedVolumes", restricted_volumes),
    ("runAsNonRoot", run_as_non_root),
    ("runAsUser", run_as_user),
    ("seccompProfile_restricted", seccomp_restricted),
]
# Baseline checks a restricted one overrides, from the policy version that restricted check
# has (registry.go populate; OverrideCheckIDs in check_capabilities_restricted.go (1.22),
# check_seccompProfile_restricted.go (1.19), check_restrictedVolumes.go (1.0),
# check_procMount_restricted.go (1.35)).
_OVERRIDDEN = {
    "capabilities_baseline": 22,
    "seccompProfile_baseline": 19,
    "hostPathVolumes": 0,
    "procMount": 35,
}


def _version(text: str | None) -> int:
    if not text or text == "latest":
        return LATEST
    try:
        major, minor = text.removeprefix("v").split(".")
        return min(int(minor), LATEST) if major == "1" else LATEST
    except ValueError:
        return LATEST  # upstream falls back to latest on an unparseable label (and warns)


def violations(spec: Spec, level: str, version: int, meta: Spec | None = None) -> list[str]:
    """``reason (detail)`` for each check the pod (spec, metadata) fails at this level and
    version."""
    if level not in ("baseline", "restricted"):
        return []
    checks = list(BASELINE)
    if level == "restricted":
        checks = [c for c in checks if version < _OVERRIDDEN.get(c[0], 10**6)] + RESTRICTED
    out = []
    for _id, check in checks:
        got = app_armor(spec, version, meta) if check is app_armor else check(spec, version)
        if got is not None:
            out.append(f"{got[0]} ({got[1]})" if got[1] else got[0])
    return out


_LEVELS = ("privileged", "baseline", "restricted")
_VERSION_LABEL = re.compile(r"^v1\.([0-9]|[1-9][0-9]*)$")
_LABEL_PREFIX = "pod-security.kubernetes.io/"


def namespace_policy(namespace: Spec | None) -> tuple[str, int, str]:
    """(level, version, version text) enforced in a namespace (privileged when unlabelled).

    api/helpers.go ``PolicyToEvaluate``: a level that is not one of the three is evaluated as
    ``restricted``, a version that is not ``latest`` or ``v1.N`` as ``latest`` (such labels
    can only predate the admission, which refuses them on namespaces: ``label_causes``)."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(ENFORCE)
    if level is None:
        level = "privileged"
    elif level not in _LEVELS:
        level = "restricted"
    version_text = labels.get(ENFORCE_VERSION, "latest")
    if version_text != "latest" and not _VERSION_LABEL.fullmatch(str(version_text)):
        version_text = "latest"
    return str(level), _version(str(version_text)), str(version_text)


def label_causes(labels: Spec) -> list[tuple[str, str, str]]:
    """admission.go ``ValidateNamespace``: a namespace created or updated with an invalid
    Pod Security label is refused (422, ``metadata.labels[KEY]: Invalid value``)."""
    causes: list[tuple[str, str, str]] = []
    for mode in ("enforce", "audit", "warn"):
        key = f"{_LABEL_PREFIX}{mode}"
        if key in labels and labels[key] not in _LEVELS:
            causes.append(
                (
                    f"metadata.labels[{key}]",
                    "Invalid value",
                    f'"{labels[key]}": must be one of {", ".join(_LEVELS)}',
                )
            )
        key = f"{key}-version"
        value = labels.get(key)
        if value is not None and value != "latest" and not _VERSION_LABEL.fullmatch(str(value)):
            causes.append(
                (
                    f"metadata.labels[{key}]",
                    "Invalid value",
                    f'"{value}": must be "latest" or "v1.x"',
                )
            )
    return causes


def check_pod(namespace: Spec | None, pod: Spec) -> None:
    """Refuse a pod that violates its namespace's enforced level (403, upstream's text)."""
    level, version, text = namespace_policy(namespace)
    found = violations(pod.get("spec") or {}, level, version, pod.get("metadata"))
    if found:
        name = (pod.get("metadata") or {}).get("name") or ""
        raise status.ApiError(
            403,
            "Forbidden",
            f'pods "{name}" is forbidden: violates PodSecurity "{level}:{text}": '
            + ", ".join(found),
            {"name": name, "kind": "pods"},
        )


_TEMPLATES = {
    "Deployment": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


def template_warnings(namespace: Spec | None, obj: Spec) -> list[str]:
    """A workload whose pod template would violate the enforced level is admitted with a
    warning (admission.go: ``would violate PodSecurity "...": ...``)."""
    path = _TEMPLATES.get(str(obj.get("kind")))
    if path is None:
        return []
    node: Any = obj
    for key in path:
        node = (node or {}).get(key) if isinstance(node, dict) else None
    level, version, text = namespace_policy(namespace)
    found = violations((node or {}).get("spec") or {}, level, version, (node or {}).get("metadata"))
    if not found:
        return []
    return [f'would violate PodSecurity "{level}:{text}": ' + ", ".join(found)]
