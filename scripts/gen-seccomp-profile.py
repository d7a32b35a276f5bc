#!/usr/bin/env python3
"""Write deploy/kubernetes/seccomp/clawpoint-criu.json: the seccomp profile clawpoint's
workload pods name as ``Localhost`` (``profiles/clawpoint-criu.json``).

It is the container runtime's default profile for a container with no capabilities
(containerd contrib/seccomp/seccomp_default.go; the gating table is tests/k8s/seccomp.py,
which the fake kubelet enforces for ``RuntimeDefault``), written as an allow-list of every
syscall libseccomp knows for x86_64, x86, aarch64 and arm, plus ``EXTRA``: what the
in-pod user-namespace mechanism (core/checkpoint/nsinit.py) and CRIU ``--unprivileged``
need, found by running a checkpoint and a restore under the profile in the fake kubelet
(tests/k8s/test_privileges.py). A syscall the kernel adds later is refused (default
action ERRNO) until it is listed. The kernel's own checks still apply to every allowed
call: ``mount`` or ``setns`` succeed only in namespaces the workload's own user namespace
owns, since the pod holds no capability.

Run: ``python scripts/gen-seccomp-profile.py`` (``--check`` exits 1 when the file differs).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.k8s.seccomp import GATED, NEVER  # noqa: E402

OUT = ROOT / "deploy" / "kubernetes" / "seccomp" / "clawpoint-criu.json"
# What the mechanism needs beyond the runtime default (with no capabilities), and why.
EXTRA = {
    "unshare": "nsinit: the payload's user, mount and PID namespaces",
    "setns": "nsinit --join: CRIU enters the payload's user and mount namespaces",
    "mount": "CRIU's parasite mounts a /proc of the payload's PID namespace",
    "umount2": "CRIU unmounts its temporary /proc",
    "clone": "CRIU restore recreates the PID namespace (CLONE_NEWPID)",
    "clone3": "CRIU restore chooses PIDs (clone3 with set_tid)",
    "kcmp": "CRIU compares the payload's files, mm and fs",
    "process_vm_readv": "CRIU reads the payload's memory",
    "process_vm_writev": "CRIU writes the payload's memory on restore",
    "pidfd_getfd": "CRIU's file dumping through a pidfd",
}
ARCHES = {
    "SCMP_ARCH_X86_64": 0xC000003E,
    "SCMP_ARCH_X86": 0x40000003,
    "SCMP_ARCH_AARCH64": 0xC00000B7,
    "SCMP_ARCH_ARM": 0x40000028,
}


def known_syscalls() -> set[str]:
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2")
    lib.seccomp_syscall_resolve_num_arch.restype = ctypes.c_void_p
    lib.seccomp_syscall_resolve_num_arch.argtypes = [ctypes.c_uint32, ctypes.c_int]
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    names: set[str] = set()
    for token in ARCHES.values():
        for nr in range(0, 1024):
            ptr = lib.seccomp_syscall_resolve_num_arch(token, nr)
            if ptr:
                names.add(ctypes.string_at(ptr).decode())
                libc.free(ptr)
    return names


def profile() -> dict[str, object]:
    denied = (set(NEVER) | set(GATED)) - set(EXTRA)
    allowed = sorted(known_syscalls() - denied)
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        "syscalls": [{"names": allowed, "action": "SCMP_ACT_ALLOW"}],
    }


def main(argv: list[str]) -> int:
    text = json.dumps(profile(), indent=2) + "\n"
    if argv[:1] == ["--check"]:
        return 0 if OUT.exists() and OUT.read_text() == text else 1
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
