"""Seccomp filters for the fake kubelet's containers, built and loaded with libseccomp.

Three sources, as the kubelet passes a container's ``seccompProfile`` to the runtime:

- ``RuntimeDefault``: the container runtime's default profile. It is emulated by its
  *gating rules* (containerd contrib/seccomp/seccomp_default.go, the same rules as moby's
  profiles/seccomp/default.json): the syscalls the default allow-list leaves out are refused
  with EPERM, and those it allows only when the container's **bounding set** holds a
  capability are refused when it does not. Without CAP_SYS_ADMIN, ``clone`` is refused when
  it asks for any new namespace and ``clone3`` answers ENOSYS (so libc falls back to
  ``clone``, whose flags a filter can read). Everything else is allowed, where the real
  profile lists each allowed syscall: the difference only matters for syscalls nobody here
  makes.
- ``Localhost``: a profile file in the OCI runtime-spec format (``defaultAction``,
  ``defaultErrnoRet``, ``syscalls[].names/action/errnoRet/args``), read from the directory
  the fake kubelet is given (the kubelet's ``<root-dir>/seccomp``).
- ``Unconfined``: no filter.

The filter does not set no_new_privs by itself (libseccomp would by default): the caller
does that when ``allowPrivilegeEscalation`` is false, and loads the filter while it still
holds CAP_SYS_ADMIN otherwise, as runc does.

Limits: native architecture only (``architectures`` is ignored); unknown syscall names are
skipped, as runc skips them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
from pathlib import Path
from typing import Any

_ACT_ALLOW = 0x7FFF0000
_ACT_LOG = 0x7FFC0000
_ACT_KILL_PROCESS = 0x80000000
_ACT_KILL_THREAD = 0x00000000
_ACT_TRAP = 0x00030000


def _act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


_FLTATR_CTL_NNP = 3
_OPS = {
    "SCMP_CMP_NE": 1,
    "SCMP_CMP_LT": 2,
    "SCMP_CMP_LE": 3,
    "SCMP_CMP_EQ": 4,
    "SCMP_CMP_GE": 5,
    "SCMP_CMP_GT": 6,
    "SCMP_CMP_MASKED_EQ": 7,
}
_NS_FLAGS = {  # <linux/sched.h>
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}

# The runtime default profile's gating, read from containerd contrib/seccomp/seccomp_default.go
# (DefaultProfile): a syscall listed here is allowed only when the bounding set holds the
# capability (several capabilities: any of them).
GATED: dict[str, tuple[str, ...]] = {
    "open_by_handle_at": ("CAP_DAC_READ_SEARCH",),
    "bpf": ("CAP_SYS_ADMIN", "CAP_BPF"),
    "perf_event_open": ("CAP_SYS_ADMIN", "CAP_PERFMON"),
    "fanotify_init": ("CAP_SYS_ADMIN",),
    "fsconfig": ("CAP_SYS_ADMIN",),
    "fsmount": ("CAP_SYS_ADMIN",),
    "fsopen": ("CAP_SYS_ADMIN",),
    "fspick": ("CAP_SYS_ADMIN",),
    "lookup_dcookie": ("CAP_SYS_ADMIN",),
    "mount": ("CAP_SYS_ADMIN",),
    "mount_setattr": ("CAP_SYS_ADMIN",),
    "move_mount": ("CAP_SYS_ADMIN",),
    "open_tree": ("CAP_SYS_ADMIN",),
    "name_to_handle_at": ("CAP_SYS_ADMIN",),
    "quotactl": ("CAP_SYS_ADMIN",),
    "quotactl_fd": ("CAP_SYS_ADMIN",),
    "setdomainname": ("CAP_SYS_ADMIN",),
    "sethostname": ("CAP_SYS_ADMIN",),
    "setns": ("CAP_SYS_ADMIN",),
    "syslog": ("CAP_SYS_ADMIN", "CAP_SYSLOG"),
    "umount": ("CAP_SYS_ADMIN",),
    "umount2": ("CAP_SYS_ADMIN",),
    "unshare": ("CAP_SYS_ADMIN",),
    "pivot_root": ("CAP_SYS_ADMIN",),
    "reboot": ("CAP_SYS_BOOT",),
    "chroot": ("CAP_SYS_CHROOT",),
    "delete_module": ("CAP_SYS_MODULE",),
    "init_module": ("CAP_SYS_MODULE",),
    "finit_module": ("CAP_SYS_MODULE",),
    "acct": ("CAP_SYS_PACCT",),
    # ptrace itself is in the default allow-list on kernels >= 4.8 (the kernel's own ptrace
    # checks are sound there); these three stay gated on CAP_SYS_PTRACE.
    "kcmp": ("CAP_SYS_PTRACE",),
    "pidfd_getfd": ("CAP_SYS_PTRACE",),
    "process_madvise": ("CAP_SYS_PTRACE",),
    "process_vm_readv": ("CAP_SYS_PTRACE",),
    "process_vm_writev": ("CAP_SYS_PTRACE",),
    "iopl": ("CAP_SYS_RAWIO",),
    "ioperm": ("CAP_SYS_RAWIO",),
    "settimeofday": ("CAP_SYS_TIME",),
    "stime": ("CAP_SYS_TIME",),
    "clock_settime": ("CAP_SYS_TIME",),
    "clock_settime64": ("CAP_SYS_TIME",),
    "vhangup": ("CAP_SYS_TTY_CONFIG",),
    "get_mempolicy": ("CAP_SYS_NICE",),
    "mbind": ("CAP_SYS_NICE",),
    "set_mempolicy": ("CAP_SYS_NICE",),
    "set_mempolicy_home_node": ("CAP_SYS_NICE",),
}
# Never in the default allow-list, whatever the capabilities.
NEVER = (
    "add_key",
    "keyctl",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "swapon",
    "swapoff",
    "userfaultfd",
    "uselib",
    "ustat",
    "_sysctl",
    "sysfs",
    "nfsservctl",
    "create_module",
    "get_kernel_syms",
    "query_module",
    "vm86",
    "vm86old",
)


class SeccompError(Exception):
    """A profile could not be read or loaded; the message says which and why."""


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def _lib() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    lib = ctypes.CDLL(name, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    return lib


class Filter:
    """A seccomp filter under construction: ``add`` rules, then ``load`` into this thread."""

    def __init__(self, default_action: int) -> None:
        self._lib = _lib()
        self.default = default_action
        self._ctx = self._lib.seccomp_init(default_action)
        if not self._ctx:
            raise SeccompError("seccomp_init failed")
        # no_new_privs is the container's own setting, not a side effect of the filter.
        self._lib.seccomp_attr_set(self._ctx, _FLTATR_CTL_NNP, 0)

    def add(self, name: str, action: int, args: list[tuple[int, int, int, int]] = ()) -> None:  # type: ignore[assignment]
        nr = self._lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0 or action == self.default:
            return  # unknown here (as runc skips it), or the default already does it
        arr = (_ArgCmp * max(len(args), 1))(*[_ArgCmp(*a) for a in args])
        ret = self._lib.seccomp_rule_add_array(self._ctx, action, nr, len(args), arr)
        if ret < 0:
            raise SeccompError(f"seccomp rule for {name}: {errno.errorcode.get(-ret, ret)}")

    def load(self) -> None:
        ret = self._lib.seccomp_load(self._ctx)
        if ret < 0:
            raise SeccompError(f"seccomp_load: {errno.errorcode.get(-ret, ret)}")


def runtime_default(bounding: set[str]) -> Filter:
    """The runtime's default profile for a container with this bounding set."""
    f = Filter(_ACT_ALLOW)
    eperm = _act_errno(errno.EPERM)
    for name, caps in GATED.items():
        if not bounding.intersection(caps):
            f.add(name, eperm)
    for name in NEVER:
        f.add(name, eperm)
    if "CAP_SYS_ADMIN" not in bounding:
        # clone's flags are its first argument on x86_64 and arm64 (the second on s390).
        for flag in _NS_FLAGS.values():
            f.add("clone", eperm, [(0, _OPS["SCMP_CMP_MASKED_EQ"], flag, flag)])
        f.add("clone3", _act_errno(errno.ENOSYS))
    return f


def _action(name: str, errno_ret: int | None) -> int:
    table = {
        "SCMP_ACT_ALLOW": _ACT_ALLOW,
        "SCMP_ACT_LOG": _ACT_LOG,
        "SCMP_ACT_KILL": _ACT_KILL_THREAD,
        "SCMP_ACT_KILL_THREAD": _ACT_KILL_THREAD,
        "SCMP_ACT_KILL_PROCESS": _ACT_KILL_PROCESS,
        "SCMP_ACT_TRAP": _ACT_TRAP,
    }
    if name == "SCMP_ACT_ERRNO":
        return _act_errno(errno.EPERM if errno_ret is None else errno_ret)
    if name not in table:
        raise SeccompError(f"unsupported seccomp action {name!r}")
    return table[name]


def from_profile(path: Path) -> Filter:
    """A filter from an OCI-format profile file (what a ``Localhost`` profile names)."""
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SeccompError(f"cannot read seccomp profile {path}: {exc}") from exc
    f = Filter(_action(str(doc.get("defaultAction", "")), doc.get("defaultErrnoRet")))
    for rule in doc.get("syscalls") or []:
        action = _action(str(rule.get("action", "")), rule.get("errnoRet"))
        args = [
            (
                int(a["index"]),
                _OPS[str(a["op"])],
                int(a.get("value", 0)),
                int(a.get("valueTwo", 0)),
            )
            for a in rule.get("args") or []
        ]
        for name in rule.get("names") or []:
            f.add(str(name), action, args)
    return f
