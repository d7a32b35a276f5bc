"""What a container's ``securityContext`` grants, as the kubelet and runtime turn it into a
process: the fake kubelet's side of starting a container and of ``pods/exec``.

``ContainerSpec.from_pod(pod, ...)`` resolves the pod's and the container's securityContext
(the container's fields win, pkg/securitycontext/util.go DetermineEffectiveSecurityContext)
into the process attributes a CRI runtime gives it; ``launch_argv(spec)`` and
``exec_argv(spec, pid)`` are the argv of ``tests/k8s/container_init.py``, which applies them
with the kernel's own mechanisms (namespaces, bounding set, setuid, no_new_privs, seccomp).

The rules, and where they come from:

- Capabilities: the runtime's default set (containerd pkg/oci/spec.go
  ``defaultUnixCaps``... in CRI, pkg/cri/opts/spec_linux.go; the same 14 as moby), plus
  ``add``, minus ``drop``, as the CRI plugin's ``WithCapabilities`` applies them: ``ALL``
  first (add, then drop), then each named one (add, then drop). They fill the bounding, permitted and
  effective sets; the inheritable set stays empty (containerd >= 1.6.18 / runc after
  CVE-2022-24769). No ambient set: a non-root process therefore holds none of them after
  exec, only its bounding set keeps them (what a file capability could reach).
  ``privileged: true`` grants every capability and no seccomp filter.
- Identity: ``runAsUser`` / ``runAsGroup`` (the image's user is root here), supplementary
  groups ``supplementalGroups`` + ``fsGroup``.
- no_new_privs: set when ``allowPrivilegeEscalation`` is false (pkg/kubelet/kuberuntime
  security_context.go: ``NoNewPrivs = !*AllowPrivilegeEscalation``; unset means false).
- seccomp: tests/k8s/seccomp.py. An unset profile means ``Unconfined`` for the kubelet
  (``seccompDefault`` off, the kubelet's default).
- Namespaces: a PID and a mount namespace per container with a fresh ``/proc``; the runtime's
  masked and read-only ``/proc`` paths (pkg/securitycontext/util.go defaultMaskedPaths /
  defaultReadonlyPaths) unless ``procMount: Unmasked``. ``hostUsers: false`` adds a user
  namespace (see container_init.py for its mapping).

Limits: one container per pod; no AppArmor, SELinux, cgroups or image user metadata.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

INIT = Path(__file__).with_name("container_init.py")

# containerd (pkg/cri/... defaultUnixCaps / oci.WithDefaultUnixCaps): the capabilities every
# container gets unless dropped.
DEFAULT_CAPS = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)
# <linux/capability.h> numbers, for the bounding set.
CAP_NUMBERS = {
    "CAP_CHOWN": 0,
    "CAP_DAC_OVERRIDE": 1,
    "CAP_DAC_READ_SEARCH": 2,
    "CAP_FOWNER": 3,
    "CAP_FSETID": 4,
    "CAP_KILL": 5,
    "CAP_SETGID": 6,
    "CAP_SETUID": 7,
    "CAP_SETPCAP": 8,
    "CAP_LINUX_IMMUTABLE": 9,
    "CAP_NET_BIND_SERVICE": 10,
    "CAP_NET_BROADCAST": 11,
    "CAP_NET_ADMIN": 12,
    "CAP_NET_RAW": 13,
    "CAP_IPC_LOCK": 14,
    "CAP_IPC_OWNER": 15,
    "CAP_SYS_MODULE": 16,
    "CAP_SYS_RAWIO": 17,
    "CAP_SYS_CHROOT": 18,
    "CAP_SYS_PTRACE": 19,
    "CAP_SYS_PACCT": 20,
    "CAP_SYS_ADMIN": 21,
    "CAP_SYS_BOOT": 22,
    "CAP_SYS_NICE": 23,
    "CAP_SYS_RESOURCE": 24,
    "CAP_SYS_TIME": 25,
    "CAP_SYS_TTY_CONFIG": 26,
    "CAP_MKNOD": 27,
    "CAP_LEASE": 28,
    "CAP_AUDIT_WRITE": 29,
    "CAP_AUDIT_CONTROL": 30,
    "CAP_SETFCAP": 31,
    "CAP_MAC_OVERRIDE": 32,
    "CAP_MAC_ADMIN": 33,
    "CAP_SYSLOG": 34,
    "CAP_WAKE_ALARM": 35,
    "CAP_BLOCK_SUSPEND": 36,
    "CAP_AUDIT_READ": 37,
    "CAP_PERFMON": 38,
    "CAP_BPF": 39,
    "CAP_CHECKPOINT_RESTORE": 40,
}
# pkg/securitycontext/util.go: what the runtime hides or makes read-only in /proc and /sys
# unless procMount is Unmasked.
MASKED_PATHS = (
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
)
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")


class SecurityContextError(Exception):
    """The container cannot be created as specified (the kubelet's CreateContainerError)."""


@dataclass
class ContainerSpec:
    """Everything container_init.py needs; JSON on its command line."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    uid: int = 0
    gid: int = 0
    groups: list[int] = field(default_factory=list)
    caps: list[str] = field(default_factory=lambda: list(DEFAULT_CAPS))
    no_new_privs: bool = False
    seccomp: str = "Unconfined"  # Unconfined | RuntimeDefault | a profile file path
    user_namespace: bool = False
    masked: bool = True
    # Host directories the process must reach through directories it may not search
    # (the interpreter under /root): the container's mount namespace shows them at the same
    # paths, as an image would.
    reachable: list[str] = field(default_factory=list)
    # (path in the container, host directory): the volumes, bind-mounted.
    binds: list[tuple[str, str]] = field(default_factory=list)
    pidfile: str = ""

    @classmethod
    def from_pod(
        cls,
        pod: dict[str, Any],
        *,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        binds: list[tuple[str, str]],
        seccomp_root: Path | None,
        pidfile: Path,
    ) -> ContainerSpec:
        spec = pod.get("spec") or {}
        psc: dict[str, Any] = spec.get("securityContext") or {}
        container = (spec.get("containers") or [{}])[0]
        csc: dict[str, Any] = container.get("securityContext") or {}

        def pick(key: str) -> Any:
            return csc[key] if csc.get(key) is not None else psc.get(key)

        uid = int(pick("runAsUser") or 0)
        gid = int(pick("runAsGroup") or 0)
        if pick("runAsNonRoot") and uid == 0:
            # pkg/kubelet/kuberuntime/security_context_others.go verifyRunAsNonRoot
            raise SecurityContextError(
                "container has runAsNonRoot and image will run as root "
                f'(pod: "{pod["metadata"]["name"]}", container: {container.get("name")})'
            )
        groups = sorted({int(g) for g in psc.get("supplementalGroups") or []})
        if psc.get("fsGroup") is not None:
            groups = sorted({*groups, int(psc["fsGroup"])})
        privileged = bool(csc.get("privileged"))
        caps = _capabilities(csc.get("capabilities") or {}, privileged)
        ape = csc.get("allowPrivilegeEscalation")
        seccomp = "Unconfined" if privileged else _seccomp(pick("seccompProfile"), seccomp_root)
        # The interpreter, the venv and this checkout (the editable install), wherever they
        # are: a checkout under /tmp (a CI clone) would otherwise vanish under the
        # container's private /tmp.
        reachable = [p for p in (sys.base_prefix, cwd) if _hidden(p)]
        reachable += [p for p in (sys.prefix, str(_CHECKOUT)) if _hidden(p) or _in_tmp(p)]
        return cls(
            argv=argv,
            env=env,
            cwd=cwd,
            uid=uid,
            gid=gid,
            groups=groups,
            caps=caps,
            no_new_privs=ape is False,
            seccomp=seccomp,
            user_namespace=spec.get("hostUsers") is False,
            masked=privileged is False and csc.get("procMount") != "Unmasked",
            reachable=list(dict.fromkeys(reachable)),
            binds=binds,
            pidfile=str(pidfile),
        )

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def _capabilities(caps: dict[str, Any], privileged: bool) -> list[str]:
    if privileged:
        return sorted(CAP_NUMBERS)
    add = [_cap_name(c) for c in caps.get("add") or []]
    drop = [_cap_name(c) for c in caps.get("drop") or []]
    # containerd's CRI WithCapabilities: ALL first (add, then drop), then each named one
    # (add, then drop); so drop ALL + add KILL leaves KILL.
    out = set(DEFAULT_CAPS)
    if "CAP_ALL" in add:
        out = set(CAP_NUMBERS)
    if "CAP_ALL" in drop:
        out = set()
    out |= {c for c in add if c != "CAP_ALL"}
    out -= set(drop)
    unknown = out - set(CAP_NUMBERS)
    if unknown:
        raise SecurityContextError(f"unknown capability {sorted(unknown)[0]}")
    return sorted(out, key=CAP_NUMBERS.__getitem__)


def _cap_name(name: object) -> str:
    text = str(name).upper()
    return text if text.startswith("CAP_") else f"CAP_{text}"


def _seccomp(profile: dict[str, Any] | None, root: Path | None) -> str:
    kind = (profile or {}).get("type") or "Unconfined"
    if kind in ("Unconfined", "RuntimeDefault"):
        return str(kind)
    if kind == "Localhost":
        rel = str((profile or {}).get("localhostProfile") or "")
        if root is None:
            raise SecurityContextError("this node has no seccomp profile directory")
        path = (root / rel).resolve()
        if not path.is_relative_to(root.resolve()) or not path.is_file():
            # pkg/kubelet/kuberuntime/helpers.go: the file must exist under <root-dir>/seccomp
            raise SecurityContextError(
                f"failed to generate seccomp spec opts: cannot load seccomp profile "
                f'"{root / rel}": open {root / rel}: no such file or directory'
            )
        return str(path)
    raise SecurityContextError(f"unknown seccomp profile type {kind!r}")


_CHECKOUT = Path(__file__).resolve().parents[2]


def _in_tmp(path: str) -> bool:
    """Under the host's /tmp, which the container's private /tmp hides (not /tmp itself)."""
    return Path(path).is_relative_to("/tmp") and Path(path) != Path("/tmp")


def _hidden(path: str) -> bool:
    """Does some ancestor of ``path`` refuse search to others (so a non-root uid cannot reach
    it on this host, where a real node would have it in the image or mounted)?"""
    p = Path(path)
    for anc in [*reversed(p.parents), p]:
        try:
            mode = anc.stat().st_mode
        except OSError:
            return False
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return True
    return False


def launch_argv(spec: ContainerSpec) -> list[str]:
    return [sys.executable, "-I", "-S", str(INIT), "start", spec.to_json()]


def exec_argv(spec: ContainerSpec, pid: int, argv: list[str]) -> list[str]:
    """``pods/exec``: the same restrictions, in the namespaces of the container's init."""
    joined = ContainerSpec(**{**asdict(spec), "argv": argv})
    return [sys.executable, "-I", "-S", str(INIT), "exec", str(pid), joined.to_json()]


def init_pid(spec: ContainerSpec) -> int | None:
    """The host PID of the container's first process (container_init.py writes it)."""
    try:
        return int(Path(spec.pidfile).read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def prepare_volume(
    path: Path, *, fs_group: int | None, empty_dir: bool, policy: str | None = None
) -> None:
    """Volume ownership as the kubelet leaves it: an emptyDir is mode 0777
    (pkg/volume/emptydir: ``perm os.FileMode = 0777``); with ``fsGroup`` a volume's files
    belong to that group, group-writable, directories setgid (pkg/volume/volume_linux.go
    SetVolumeOwnership), on every start (``fsGroupChangePolicy: Always``, the default) or
    only while the volume's root does not match (``OnRootMismatch``)."""
    if empty_dir:
        os.chmod(path, 0o777)
    if fs_group is None:
        return
    st = os.stat(path)
    if policy == "OnRootMismatch" and st.st_gid == fs_group and st.st_mode & 0o2070 == 0o2070:
        return
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, d) for d in dirs)]:
            os.chown(name, -1, fs_group)
            os.chmod(name, os.stat(name).st_mode & 0o7777 | 0o2070)
        for fname in files:
            full = os.path.join(root, fname)
            if os.path.islink(full):
                continue
            os.chown(full, -1, fs_group)
            os.chmod(full, os.stat(full).st_mode & 0o7777 | 0o060)
