"""The fake kubelet's container runtime: start a container process, or exec into one, with
exactly what tests/k8s/container.py resolved from its securityContext.

``container_init.py start SPEC_JSON`` (run as root, as a runtime is):

1. with ``user_namespace``: a child unshares a user namespace and this process maps uids and
   gids 0-65535 of it to the same host ids. A real runtime maps them to a range of its own
   (KEP-127, e.g. 65536-131071); the identity range here keeps file ownership on the host what
   an idmapped volume mount shows on a real node (files written by uid 1000 in the pod belong
   to 1000), which is what the tests read. Privilege-wise it is the same: a capability held in
   that namespace reaches only what the namespace owns.
2. new mount and PID namespaces; the container's first process is PID 1 of the PID namespace.
   It mounts a fresh ``/proc`` (nosuid, nodev, noexec) and, unless unmasked, masks and
   re-mounts read-only the runtime's paths, as runc does (libcontainer/rootfs_linux.go). The
   runtime mounts them in the container's own mount namespace, so when the workload copies
   that namespace into a user namespace of its own the kernel locks them, and then refuses a
   new procfs there (fs/namespace.c mount_too_revealing / mnt_already_visible): the failure
   a real pod shows.
3. a private ``/tmp`` (the image's, in a real pod), the volumes bind-mounted under it
   (``binds``); directories the process cannot search on this host but would have in its image or as
   volume mounts (``reachable``) are shown through a tmpfs over their first hidden ancestor.
4. the bounding set is cut to the granted capabilities; seccomp is loaded now when
   no_new_privs is off (it needs CAP_SYS_ADMIN then, as in runc); groups, gid and uid are set;
   permitted/effective become the granted set (inheritable and ambient empty);
   no_new_privs, then seccomp when no_new_privs is on; exec.

``container_init.py exec PID SPEC_JSON`` joins the mount, PID (and user) namespaces of the
container's first process and does step 4 in a child (``pods/exec``).

The parent stays (as the runtime's shim does) to forward SIGTERM/SIGINT to the container's
first process and to exit as it did. Run as ``python -I -S``: no imports outside the
standard library but tests/k8s/seccomp.py.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import container  # type: ignore[import-not-found]  # noqa: E402 (beside this file; run with -I)
import seccomp  # type: ignore[import-not-found]  # noqa: E402

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_KEEPCAPS, PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG = 24, 8, 38, 1
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
ID_RANGE = 65536

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def check(ret: int, what: str) -> None:
    if ret != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def mount(
    src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    check(
        libc.mount(
            src.encode() if src else None,
            dst.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {dst}",
    )


# ----- the container's mount namespace ------------------------------------------------------
def setup_mounts(spec: dict[str, Any]) -> None:
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    reach = [(p, os.open(p, os.O_PATH)) for p in spec["reachable"]]
    binds = [(view, os.open(host, os.O_PATH)) for view, host in spec["binds"]]
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if spec["masked"]:
        for path in container.MASKED_PATHS:
            if os.path.isdir(path):
                mount("tmpfs", path, "tmpfs", MS_RDONLY)
            elif os.path.exists(path):
                mount("/dev/null", path, None, MS_BIND)
        for path in container.READONLY_PATHS:
            if os.path.exists(path):
                mount(path, path, None, MS_BIND | MS_REC)
                mount(path, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC)
    # The image's own /tmp: private to the container (a real pod does not share the node's).
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    covered: set[str] = set()
    for path, _fd in reach:
        top = _hidden_ancestor(path)
        if top and top not in covered and not any(top.startswith(c + "/") for c in covered):
            mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
            covered.add(top)
    for path, fd in [*reach, *binds]:
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        os.close(fd)


def _hidden_ancestor(path: str) -> str | None:
    parts = Path(path).parts
    for i in range(1, len(parts) + 1):
        anc = str(Path(*parts[:i]))
        try:
            st = os.stat(anc)
        except OSError:
            return None
        if not st.st_mode & 0o001:
            return anc
    return None


# ----- privileges -------------------------------------------------------------------------
def build_filter(spec: dict[str, Any]) -> seccomp.Filter | None:
    """Read the profile while the host's files are still in view."""
    if spec["seccomp"] == "RuntimeDefault":
        return seccomp.runtime_default(set(spec["caps"]))
    if spec["seccomp"] != "Unconfined":
        return seccomp.from_profile(Path(spec["seccomp"]))
    return None


def drop_privileges(spec: dict[str, Any], filt: seccomp.Filter | None) -> None:
    caps = set(spec["caps"])
    numbers = [_cap_number(c) for c in caps]
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):
        if cap not in numbers:
            check(libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    if filt is not None and not spec["no_new_privs"]:
        filt.load()
    check(libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "keepcaps")
    os.setgroups(spec["groups"])
    os.setresgid(spec["gid"], spec["gid"], spec["gid"])
    os.setresuid(spec["uid"], spec["uid"], spec["uid"])
    mask = 0
    for n in numbers:
        if n <= last:
            mask |= 1 << n
    mask &= _bounding()  # a privileged container gets what the node has, no more
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    for i in range(2):
        word = (mask >> (32 * i)) & 0xFFFFFFFF
        data[i].effective = data[i].permitted = word
        data[i].inheritable = 0
    check(libc.capset(ctypes.byref(header), data), "capset")
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    if spec["no_new_privs"]:
        check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        if filt is not None:
            filt.load()


def _bounding() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapBnd:"):
                return int(line.split()[1], 16)
    return 0


def _cap_number(name: str) -> int:
    return int(container.CAP_NUMBERS[name])


def become(spec: dict[str, Any], filt: seccomp.Filter | None) -> None:
    """In the container's process: drop to what the spec grants and exec its command."""
    try:
        os.chdir(spec["cwd"])
        drop_privileges(spec, filt)
        os.execve(spec["argv"][0], spec["argv"], spec["env"])
    except (OSError, seccomp.SeccompError) as exc:
        print(f"container_init: cannot start {spec['argv'][:1]}: {exc}", file=sys.stderr)
    os._exit(128)


# ----- start and exec ------------------------------------------------------------------------
def _wait_as_child(pid: int) -> int:
    """Wait for ``pid`` and end the way it ended (forwarding SIGTERM/SIGINT meanwhile)."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: _forward(pid, s))
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        code = os.WTERMSIG(status)
        if code not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be handled (EINVAL)
            signal.signal(code, signal.SIG_DFL)
        os.kill(os.getpid(), code)
        return 128 + code
    return os.waitstatus_to_exitcode(status)


def _forward(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def start(spec: dict[str, Any]) -> int:
    ready_r, ready_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    pid_r, pid_w = os.pipe()
    # Closed (close-on-exec) when the container's process execs its command: only then is
    # the container started, with every mount in place, for pods/exec to join.
    started_r, started_w = os.pipe2(os.O_CLOEXEC)
    child = os.fork()
    if child == 0:
        try:
            os.close(ready_r)
            os.close(mapped_w)
            os.close(pid_r)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if spec["user_namespace"]:
                check(libc.unshare(CLONE_NEWUSER), "unshare(user)")
                os.write(ready_w, b"u")
                if os.read(mapped_r, 1) != b"m":
                    os._exit(126)
            check(libc.unshare(CLONE_NEWNS | CLONE_NEWPID), "unshare(mount, pid)")
            first = os.fork()
            if first == 0:
                libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                os.close(pid_w)
                filt = build_filter(spec)
                setup_mounts(spec)
                become(spec, filt)
            os.close(started_w)
            os.write(pid_w, str(first).encode())
            os.close(pid_w)
            os._exit(_wait_as_child(first))
        except (OSError, seccomp.SeccompError) as exc:
            print(f"container_init: cannot create the container: {exc}", file=sys.stderr)
            os._exit(128)
    os.close(ready_w)
    os.close(mapped_r)
    os.close(pid_w)
    os.close(started_w)
    if spec["user_namespace"]:
        if os.read(ready_r, 1) == b"u":
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{child}/{name}", "w") as f:
                    f.write(f"0 0 {ID_RANGE}\n")
            os.write(mapped_w, b"m")
    first_text = os.read(pid_r, 32).decode()
    while os.read(started_r, 64):
        pass
    if first_text and spec["pidfile"]:
        # The host PID of the container's first process: pods/exec joins its namespaces.
        Path(spec["pidfile"]).write_text(first_text)
    return _wait_as_child(child)


def exec_in(pid: int, spec: dict[str, Any]) -> int:
    filt = build_filter(spec)
    fds = {ns: os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY) for ns in ("user", "mnt", "pid")}
    own_user = os.readlink("/proc/self/ns/user")
    try:
        if os.readlink(f"/proc/{pid}/ns/user") != own_user:
            check(libc.setns(fds["user"], CLONE_NEWUSER), "setns(user)")
        check(libc.setns(fds["mnt"], CLONE_NEWNS), "setns(mnt)")
        check(libc.setns(fds["pid"], CLONE_NEWPID), "setns(pid)")
    except OSError as exc:
        print(f"container_init: cannot join the container: {exc}", file=sys.stderr)
        return 126
    for fd in fds.values():
        os.close(fd)
    child = os.fork()
    if child == 0:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        become(spec, filt)
    return _wait_as_child(child)


def main(argv: list[str]) -> int:
    if argv[:1] == ["start"] and len(argv) == 2:
        return start(json.loads(argv[1]))
    if argv[:1] == ["exec"] and len(argv) == 3:
        return exec_in(int(argv[1]), json.loads(argv[2]))
    print("usage: container_init.py start SPEC | exec PID SPEC", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
