"""A read-only probe of a payload tree's resources: what CRIU (or clawpoint) cannot carry.

Planning a checkpoint, migration or preemption of a CRIU workload calls ``refusals`` so that a
plan or dry-run says why it cannot work before anything is paused. It reads /proc only
(``fd``, ``fdinfo``, ``maps``, ``net/tcp*``) and finds:

- devices CRIU does not dump (all but the memory devices such as ``/dev/null``, terminals
  and tun): a GPU (``/dev/nvidia*``, ``/dev/dri``) needs a device plugin this engine does
  not have; ``/dev/fuse``, ``/dev/kvm``, block devices and the like cannot be carried;
- ``io_uring``, ``perf_event`` and ``userfaultfd`` descriptors, which CRIU does not dump;
- established TCP connections when ``checkpoint.criu_tcp = "refuse"``;
- deleted-but-open files larger than ``checkpoint.criu_ghost_limit_mib``;
- writable shared file mappings (shared memory) that do not fit in
  ``checkpoint.file_budget_mib`` (they would be restored with newer contents);
- a tree whose root task (the PID namespace's init) has no CAP_SYS_ADMIN (a program that
  dropped to another uid as that task: a database server started through ``setpriv``) and
  sees no /proc of its own PID namespace (the root mode shares the host's mount namespace,
  so its payload sees the host's): CRIU's parasite opens a /proc of the namespace in the root
  task only (criu/cr-dump.c, ``parasite_get_proc_fd_seized`` for ``root_item``) and,
  unprivileged, cannot mount one (criu/pie/parasite.c ``get_proc_fd``: "can't dump
  unprivileged task whose /proc doesn't belong to it"); its other processes may drop
  whatever they like (measured: a child without CAP_SYS_ADMIN dumps). ``clawpoint run
  --init`` puts a root init of ours there. Whether the /proc is its own is checked on the
  task itself (``_has_own_proc``), not inferred from its namespaces;
- in the root mode on a host whose root lacks CAP_SYS_RESOURCE (a container's default
  bounding set), a process whose real, effective or saved uid or gid is not root's (even one
  that only changed its group and kept CAP_SYS_ADMIN): CRIU reads every task's resource
  limits with prlimit(2) (criu/cr-dump.c ``dump_task_rlimits``), which the kernel allows for
  another task only with CAP_SYS_RESOURCE or when all its uids and gids are the caller's
  (kernel/sys.c ``check_prlimit_permission``), so the dump would fail ("Can't get rlimit");
- System V shared memory (``shmat``: PostgreSQL keeps its interlock segment attached, even
  with ``shared_memory_type = mmap``), once per tree: CRIU dumps such a mapping only when the
  workload has an IPC namespace of its own ("doesn't live in IPC ns"), and an ordinary user's
  CRIU cannot dump one at all (criu/ipc_ns.c stats ``/proc/self/map_files``, which the kernel
  opens only for CAP_CHECKPOINT_RESTORE in the initial user namespace).

Limits: a tree it cannot read (not root, process gone) yields no refusal: CRIU's own error
at dump still names the problem. The capabilities CRIU will hold are taken to be the probing
process's own (the CLI, service and wrapper of one host run as the same root). Unix-domain sockets to outside processes are left to CRIU's
refusal at dump (finding the peer needs sock_diag).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from core import processes
from core.checkpoint import files, nsinit
from core.checkpoint.criu import CriuOptions

# Character devices CRIU dumps (criu/files.c dump_chrdev): the memory devices (major 1:
# null, zero, full, random, urandom, kmsg), terminals and ptys, and tun (misc 10:200).
_MEM_MAJOR = 1
_TTY_MAJORS = frozenset({4, 5, *range(128, 144)})
_MISC_OK = frozenset({(10, 200)})
_ANON_UNSUPPORTED = {
    "anon_inode:[io_uring]": "an io_uring instance",
    "anon_inode:[perf_event]": "a perf_event descriptor",
    "anon_inode:[userfaultfd]": "a userfaultfd",
}


@dataclass(frozen=True)
class Refusal:
    pid: int
    resource: str
    reason: str
    hint: str = "release that resource in the program before checkpointing it"

    def __str__(self) -> str:
        return f"pid {self.pid}: {self.resource}: {self.reason} ({self.hint})"


def _device_reason(path: str, st: os.stat_result) -> str | None:
    if stat.S_ISBLK(st.st_mode):
        return "a block device CRIU cannot carry"
    if not stat.S_ISCHR(st.st_mode):
        return None
    major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    if major == _MEM_MAJOR or major in _TTY_MAJORS or (major, minor) in _MISC_OK:
        return None
    if path.startswith(("/dev/nvidia", "/dev/dri")):
        return "a GPU device: the criu engine has no GPU plugin (the cuda engine has one)"
    return f"a character device ({major}:{minor}) CRIU cannot carry"


_CAP_SYS_ADMIN = 21


def _status(pid: int) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def _starttime(stat_path: str) -> str | None:
    try:
        return Path(stat_path).read_text().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return None


def _has_own_proc(pid: int) -> bool:
    """The /proc that ``pid`` sees (under its root) is a procfs of its own PID namespace, the
    one CRIU's parasite opens without mounting anything (criu/pie/parasite.c ``get_proc_fd``:
    "/proc/self" names the task). Checked on the tree itself rather than inferred from its
    namespaces: the entry of the task's own pid number under its /proc is that task (same
    PID namespace, same start time). A root-mode payload sees the host's /proc (false), as
    does one that made a mount namespace of its own without mounting a /proc in it."""
    nspid = _status(pid).get("NSpid", "").split()[-1:]
    if not nspid:
        return False
    seen = f"/proc/{pid}/root/proc/{nspid[0]}"
    try:
        same_ns = os.stat(f"{seen}/ns/pid").st_ino == os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return False
    mine = _starttime(f"/proc/{pid}/stat")
    return same_ns and mine is not None and _starttime(f"{seen}/stat") == mine


def _ids(status: dict[str, str], key: str) -> list[int]:
    """The real, effective and saved ids of a ``Uid:``/``Gid:`` line ([] when unreadable)."""
    try:
        return [int(x) for x in status.get(key, "").split()[:3]]
    except ValueError:
        return []


def _uid_refusal(pid: int, *, root: bool, rlimits_need_ids: bool) -> Refusal | None:
    """A process CRIU cannot dump because of who it runs as: the tree's ``root`` task without
    CAP_SYS_ADMIN and without a /proc of its own, or, when this root lacks CAP_SYS_RESOURCE
    (``rlimits_need_ids``), any with a uid or gid that is not ours (see the module docstring)."""
    status = _status(pid)
    uids, gids = _ids(status, "Uid"), _ids(status, "Gid")
    try:
        caps = int(status.get("CapEff", "0"), 16)
    except ValueError:
        return None
    if len(uids) != 3 or len(gids) != 3:
        return None
    reasons: list[str] = []
    hints: list[str] = []
    if root and not caps >> _CAP_SYS_ADMIN & 1 and not _has_own_proc(pid):
        reasons.append(
            "it is the first process of a workload whose PID namespace has no /proc of its "
            "own and it dropped its privileges, and CRIU cannot dump such a tree (its first "
            "process must mount a /proc of that namespace)"
        )
        hints.append(
            "start the workload again with 'clawpoint run --init' (a root init of clawpoint's "
            "runs the command as its child, which may then drop its privileges), or as the "
            "user its processes run as"
        )
    if rlimits_need_ids and (set(uids) != {os.getuid()} or set(gids) != {os.getgid()}):
        reasons.append(
            "this host's root lacks CAP_SYS_RESOURCE, without which CRIU cannot read the "
            "resource limits of a process whose uids or gids are not root's (prlimit)"
        )
        hints.append(
            "start the workload again with 'clawpoint run --init --user-namespace' (a user "
            "namespace of its own, whose processes CRIU may read), or give root "
            "CAP_SYS_RESOURCE (a container: --cap-add SYS_RESOURCE)"
        )
    if not reasons:
        return None
    name = status.get("Name", "?").strip()
    ids = f"uid {uids[1]}" + ("" if gids[1] == os.getgid() else f", gid {gids[1]}")
    resource = f"process {pid} ({name}) running as {ids}"
    return Refusal(pid, resource, "; and ".join(reasons), "; ".join(hints))


def _sysv_shm(pid: int) -> str | None:
    """The first System V shared memory segment ``pid`` has attached (``/SYSVKEY``), or None."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/SYSV"):
            return parts[5].removesuffix(" (deleted)")
    return None


def _sysv_refusal(pid: int, segment: str, unprivileged: bool) -> Refusal | None:
    name = _status(pid).get("Name", "?").strip()
    resource = f"process {pid} ({name}) attached System V shared memory {segment}"
    if unprivileged:
        return Refusal(
            pid,
            resource,
            "CRIU run by an ordinary user cannot dump System V shared memory (it reads it "
            "through /proc/PID/map_files, which the kernel opens only for "
            "CAP_CHECKPOINT_RESTORE in the initial user namespace)",
            "run the workload as root, in an IPC namespace of its own, or use "
            "the cooperative engine",
        )
    try:
        same_ipc = os.readlink(f"/proc/{pid}/ns/ipc") == os.readlink("/proc/self/ns/ipc")
    except OSError:
        return None
    if not same_ipc:
        return None
    return Refusal(
        pid,
        resource,
        "CRIU dumps System V shared memory only in an IPC namespace of the workload's own",
        "start the program in one (`unshare --ipc -- PROGRAM ...`), or use the cooperative engine",
    )


def refusals(root: int, options: CriuOptions) -> list[Refusal]:
    """What in the tree rooted at ``root`` makes a checkpoint impossible (empty: none found)."""
    out: list[Refusal] = []
    tcp: set[str] | None = None
    # Root's payload in a user namespace of its own: CRIU runs inside it, unprivileged, and
    # holds CAP_SYS_RESOURCE over it (the owner of a namespace has every capability in it).
    own_userns = nsinit.privileged() and nsinit.own_user_namespace(root)
    rlimits_need_ids = nsinit.lacks_sys_resource() and not own_userns
    unprivileged_criu = not nsinit.privileged() or own_userns
    sysv_done = False
    for pid in files.tree_pids(root):
        if not sysv_done and (segment := _sysv_shm(pid)) is not None:
            sysv_done = True
            if (sysv := _sysv_refusal(pid, segment, unprivileged_criu)) is not None:
                out.append(sysv)
        uid = _uid_refusal(pid, root=pid == root, rlimits_need_ids=rlimits_need_ids)
        if uid is not None:
            out.append(uid)
        for _fd, source, target in files.open_fds(pid):
            if target in _ANON_UNSUPPORTED:
                out.append(Refusal(pid, target, f"{_ANON_UNSUPPORTED[target]} CRIU cannot dump"))
            elif target.startswith("socket:[") and options.tcp == "refuse":
                if tcp is None:
                    tcp = set(processes.tcp_sockets(pid, processes.TCP_ESTABLISHED))
                if target[len("socket:[") : -1] in tcp:
                    out.append(
                        Refusal(
                            pid,
                            "established TCP connection",
                            "checkpoint.criu_tcp is 'refuse', which refuses to checkpoint it",
                            "set checkpoint.criu_tcp = 'close' in the config file (connections "
                            "are restored closed and the peers reconnect), or close them first",
                        )
                    )
            elif target.startswith("/dev/") and not target.startswith("/dev/shm/"):
                try:
                    reason = _device_reason(target, os.stat(source))
                except OSError:
                    continue
                if reason:
                    out.append(Refusal(pid, target, reason))
            elif target.endswith(files.DELETED) and target.startswith("/"):
                try:
                    st = os.stat(source)
                except OSError:
                    continue
                limit = options.ghost_limit_mib * 2**20
                if stat.S_ISREG(st.st_mode) and st.st_size > limit:
                    out.append(
                        Refusal(
                            pid,
                            target,
                            f"a deleted file held open ({st.st_size / 2**20:.1f} MiB), over "
                            f"the ghost limit of {options.ghost_limit_mib} MiB "
                            "(checkpoint.criu_ghost_limit_mib)",
                            "a deleted-but-open file is copied into every checkpoint: raise "
                            "checkpoint.criu_ghost_limit_mib in the config file above its size, "
                            "or have the program close it",
                        )
                    )
        for path, _ in files.shared_mappings(pid):
            if path.startswith(("/dev/nvidia", "/dev/dri")):
                out.append(
                    Refusal(
                        pid,
                        path,
                        "a GPU device mapping: the criu engine has no GPU plugin "
                        "(the cuda engine has one)",
                    )
                )
    _, left = files.split_budget(files.writable_files(root), options.file_budget_mib * 2**20)
    for f in left:
        if f.shared_map:
            out.append(
                Refusal(
                    root,
                    f.path,
                    f"shared memory of {f.size / 2**20:.1f} MiB beyond the file budget of "
                    f"{options.file_budget_mib} MiB (checkpoint.file_budget_mib): it would "
                    "be restored with newer contents than the processes' memory",
                    "raise checkpoint.file_budget_mib in the config file above the size of "
                    "the shared memory",
                )
            )
    return out
