"""Finding and calling ``criu``: is it here, new enough for this kernel, and usable by this
process (``criu_status``, cached per process); how a criu command must run for this process
(``in_namespaces``: as it is when privileged, else inside user namespaces the user owns, see
``core.checkpoint.nsinit``); the tail of a CRIU log, without the lines that are never the cause.

Used by the dump side (``core.checkpoint.criu``) and the restore side
(``core.checkpoint.criu_restore``). Limits: ``criu_status`` is cached for the process's life,
so a CRIU installed meanwhile is seen by the next process.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from core import errors
from core.checkpoint import engine, nsinit

# CRIU < 4.1 fails on kernels >= 6.13 (split vvar mapping); CRIU < 4.2.1 cannot dump any TCP
# socket on kernels >= 6.16, which answer SO_PASSCRED/SO_PASSSEC only for AF_UNIX/NETLINK.
MIN_VERSION = (4, 1)
MIN_VERSION_SOCKETS = (4, 2, 1)
SOCKETS_KERNEL = (6, 16)
INSTALL_HINT = "run scripts/install-criu.sh as root"
_USERNS_HINT = (
    "allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0; on Ubuntu "
    "kernel.apparmor_restrict_unprivileged_userns = 0 or an AppArmor profile allowing userns): "
    "see docs/checkpointing.md, 'Ordinary users'"
)
_NSINIT = str(Path(nsinit.__file__).resolve())
_COOP_HINT = (
    "or run the workload with the cooperative engine (engine='cooperative'), "
    "which needs neither root nor CRIU"
)


def _version_tuple(text: str) -> tuple[int, ...]:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    return tuple(int(g) for g in m.groups() if g is not None) if m else ()


def required_version(kernel_release: str | None = None) -> tuple[int, ...]:
    """The oldest CRIU that works on this kernel (``uname -r`` when not given)."""
    kernel = _version_tuple(kernel_release or os.uname().release)
    return MIN_VERSION_SOCKETS if kernel >= SOCKETS_KERNEL else MIN_VERSION


# One check at a time: a caller that comes while a check runs (a wrapper's warm-up thread,
# core.wrapper.warm_up) waits for it and gets its cached answer instead of running another.
_status_lock = threading.Lock()


def criu_status(criu_path: str = "criu") -> engine.EngineStatus:
    """Is CRIU usable here? Cached per process: ``criu check`` takes a moment."""
    with _status_lock:
        return _criu_status(criu_path)


@functools.lru_cache(maxsize=4)
def _criu_status(criu_path: str) -> engine.EngineStatus:
    name = "criu"
    exe = shutil.which(criu_path)
    if exe is None:
        return engine.EngineStatus(
            name=name, available=False, reason=f"criu not installed: {INSTALL_HINT}"
        )
    try:
        out = subprocess.run(  # noqa: S603 (argv list, resolved criu binary)
            [exe, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return engine.EngineStatus(name=name, available=False, reason=f"cannot run {exe}: {exc}")
    m = re.search(r"Version:\s*([0-9]+\.[0-9]+(?:\.[0-9]+)?)", out.stdout)
    version = m.group(1) if m else None
    needed = required_version()
    if version is None or _version_tuple(version) < needed:
        return engine.EngineStatus(
            name=name,
            available=False,
            version=version,
            reason=f"criu {version or '(unknown version)'} is older than "
            f"{'.'.join(map(str, needed))}, which this kernel ({os.uname().release}) needs: "
            f"{INSTALL_HINT}",
        )
    # Under a seccomp filter (a container's RuntimeDefault or Localhost profile) CRIU cannot
    # checkpoint anything: it must suspend the filter the payload inherits, which the kernel
    # allows only to a tracer outside any filter with CAP_SYS_ADMIN in the host's user
    # namespace (kernel/ptrace.c ptrace_setoptions, PTRACE_O_SUSPEND_SECCOMP). Say so now,
    # not at the first dump.
    mode = nsinit.seccomp_mode()
    if mode:
        return engine.EngineStatus(
            name=name,
            available=False,
            version=version,
            reason=f"this process runs under a seccomp filter (Seccomp: {mode}), and CRIU "
            "cannot suspend a filter from inside one: in Kubernetes leave the pod's "
            "seccompProfile unset and the kubelet's seccompDefault off (docs/kubernetes.md, "
            "'securityContext for CRIU')",
        )
    # Without privilege CRIU runs inside user namespaces the user owns (core.checkpoint.nsinit).
    # ``criu check`` is no gate there: it also tests TCP repair, which needs CAP_NET_ADMIN
    # over the host's network namespace and which a dump without established connections
    # never uses. What must work is making those namespaces.
    checker = [exe, "check"] if nsinit.privileged() else in_namespaces([exe, "--version"], None)
    try:
        check = subprocess.run(checker, capture_output=True, text=True, timeout=60)  # noqa: S603 (argv list)
    except (OSError, subprocess.SubprocessError) as exc:
        return engine.EngineStatus(
            name=name, available=False, version=version, reason=f"criu check failed: {exc}"
        )
    if check.returncode != 0:
        tail = (check.stderr or check.stdout).strip().splitlines()[-3:]
        if not nsinit.privileged():
            return engine.EngineStatus(
                name=name,
                available=False,
                version=version,
                reason=f"this user cannot create user namespaces ({' | '.join(tail)}): "
                f"{_USERNS_HINT}",
            )
        return engine.EngineStatus(
            name=name,
            available=False,
            version=version,
            reason=f"criu check failed: {' | '.join(tail)}",
        )
    return engine.EngineStatus(name=name, available=True, version=version)


# In an image directory: the tree was dumped from inside its own user namespace by root
# (``run --user-namespace``), so it is restored inside a new one mapping every id.
USERNS_MARK = "clawpoint-userns"


def in_namespaces(argv: list[str], pid: int | None, *, everyone: bool = False) -> list[str]:
    """``argv`` (a criu command) as it must run for this process: inside the user and mount
    namespaces of the payload ``pid`` (a dump) or new ones (``pid`` None: a restore), with
    ``--unprivileged`` (see core.checkpoint.nsinit); unchanged when privileged, except for a
    payload in a user namespace of its own (a dump joins it) or a restore of one
    (``everyone``: new namespaces mapping every id)."""
    if nsinit.privileged():
        if pid is not None and nsinit.own_user_namespace(pid):
            where = ["--join", str(pid)]
        elif pid is None and everyone:
            where = ["--new-all"]
        else:
            return argv
    else:
        where = ["--join", str(pid)] if pid is not None else ["--new"]
    return [sys.executable, "-I", "-S", _NSINIT, *where, *argv, "--unprivileged"]


def require(criu_path: str = "criu") -> str:
    """The criu executable, or EngineUnavailable saying why and that cooperative still works."""
    status = criu_status(criu_path)
    if not status.available:
        raise errors.EngineUnavailable(
            f"the criu engine cannot run here: {status.reason}",
            hint=f"{INSTALL_HINT} if CRIU is missing or old, {_COOP_HINT}",
            details={"engine": "criu", "reason": status.reason},
        )
    return shutil.which(criu_path) or criu_path


# Error lines CRIU logs on every run where it lacks a capability it can do without (root in a
# container without CAP_SYS_RESOURCE: criu/util.c rlimit_unlimit_nofile): never the cause.
_HARMLESS_ERRORS = ("rlimit: Can't setup RLIMIT_NOFILE for self",)


def log_tail(path: Path, lines: int = 12) -> str:
    """The CRIU log's error lines (else its last lines), for an error message."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no CRIU log)"
    text = [ln for ln in text if not any(h in ln for h in _HARMLESS_ERRORS)]
    errs = [ln for ln in text if "Error" in ln or "error" in ln]
    return " | ".join((errs or text)[-lines:])
