"""A local workload's own cgroup and its limits: memory and CPU, cgroup v1 and v2.

A workload started with a size (``RunSpec.cpus``, ``memory_mb``) runs in a cgroup of its
own, ``clawpoint/NAME.WRAPPER_PID`` (one per wrapper: a handoff's source and target never
share one, so the source removing its own can never pull it from under the target). Its
processes are put there before they run: a fresh payload's starter joins it between fork
and exec, and a restore's ``criu`` joins it the same way (``--manage-cgroups=ignore``: the
restored tasks are forked by CRIU and inherit its cgroup, memory charged there from the
first page). Children inherit a cgroup, so the whole tree is held. A resize in place
rewrites the limit files of the cgroup the payload is in (``of_process``), or for a
workload started without a size, makes one and moves its tree there (``adopt``).

CRIU and cgroups (CRIU 4.2, ``criu/config.c``, ``criu/include/cr_options.h``,
``criu/cgroup.c``, ``Documentation/criu.txt``): with no ``--manage-cgroups`` the mode is
``soft`` (``CG_MODE_DEFAULT``): a task dumped in another cgroup than the dumping CRIU's is
put back into that *dumped* path on restore (created if missing, with the dumped limits
then). A restore with a size passes ``--manage-cgroups=ignore`` so that the new cgroup,
with the new limits, is the one the tree lands in.

The files written, as the kernel documents them:

- v1 memory (``Documentation/admin-guide/cgroup-v1/memory.rst``): ``memory.limit_in_bytes``
  (the limit; lowering it below the usage makes the kernel reclaim, then fails with EBUSY),
  ``memory.usage_in_bytes``; ``memory.move_charge_at_immigrate`` = 1 (section 8, deprecated:
  6.18 refuses it with EINVAL; best effort) so a tree adopted while running brings its
  charges where the kernel still can.
- v1 CPU bandwidth (``Documentation/scheduler/sched-bwc.rst``): ``cpu.cfs_period_us`` and
  ``cpu.cfs_quota_us``; N CPUs is a quota of N periods ("Limit a group to 2 CPUs worth of
  runtime": quota 200000, period 100000); at least 1 ms.
- v2 (``Documentation/admin-guide/cgroup-v2.rst``): ``memory.max``, ``memory.current``,
  ``cpu.max`` ("$MAX $PERIOD"), ``cgroup.procs`` (writing a PID moves that process),
  ``cgroup.subtree_control`` ("+memory +cpu" on each parent: the "no internal process"
  rule lets controllers be enabled only where no process lives, the root excepted).
  An ordinary user needs a delegated subtree (section "Delegation"): ``[local]
  cgroup_root`` names it. In v2 the memory a process already used stays charged where it
  was when it moves ("Memory Ownership"): an adopted running tree's limit counts new pages.

Where to find the hierarchy: ``[local] cgroup_root`` (a v2 directory, e.g. a systemd
delegated ``user@UID.service/app.slice/clawpoint.scope`` the user owns), else the
unified mount at /sys/fs/cgroup (v2) or its ``memory`` and ``cpu`` v1 mounts. Limits:
Linux only; no swap limit; CPUs as a bandwidth quota (no ``cpuset`` pinning).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from core import errors
from core.config import Settings
from core.specs import RunSpec

BASE = Path("/sys/fs/cgroup")
TOP = "clawpoint"
PERIOD_US = 100_000  # the kernel's default CFS period
MIN_QUOTA_US = 1_000  # sched-bwc.rst: the quota is at least 1 ms
MIB = 2**20


@dataclass(frozen=True)
class Layout:
    """Where the workloads' cgroups go: one v2 directory, or the v1 memory and cpu ones."""

    version: int
    memory: Path  # v2: the one directory; v1: the memory hierarchy's
    cpu: Path  # v2: the same as ``memory``

    def dirs(self) -> list[Path]:
        return [self.memory] if self.version == 2 else [self.memory, self.cpu]


def configured_root(settings: Settings) -> str | None:
    """``[local] cgroup_root`` (a delegated v2 directory), if set."""
    value = settings.backend_section("local").get("cgroup_root")
    return str(value) if value else None


def layout(settings: Settings) -> Layout:
    """The hierarchy this host offers; NotSupported saying why and what to do otherwise."""
    root = configured_root(settings)
    if root is not None:
        top = Path(root)
        if not (top / "cgroup.controllers").is_file():
            raise _no_cgroup(f"[local] cgroup_root {root} is not a cgroup v2 directory")
        return Layout(2, top, top)
    if (BASE / "cgroup.controllers").is_file():
        return Layout(2, BASE, BASE)
    mem, cpu = BASE / "memory", BASE / "cpu"
    if (mem / "memory.limit_in_bytes").is_file() and (cpu / "cpu.cfs_quota_us").is_file():
        return Layout(1, mem, cpu)
    raise _no_cgroup("no cgroup memory and cpu controllers are mounted under /sys/fs/cgroup")


def problem(settings: Settings) -> str | None:
    """Why this process cannot give a workload limits (None: it can), read-only."""
    try:
        lay = layout(settings)
    except errors.NotSupported as exc:
        return exc.message
    if lay.version == 2:
        have = (lay.memory / "cgroup.controllers").read_text().split()
        missing = [c for c in ("memory", "cpu") if c not in have]
        if missing:
            return f"the cgroup {lay.memory} offers no {' or '.join(missing)} controller"
    for d in lay.dirs():
        mine = d / TOP
        probe = mine if mine.is_dir() else d
        if not os.access(probe, os.W_OK):
            return f"the cgroup {probe} is not writable by uid {os.getuid()}"
    return None


def require(settings: Settings) -> Layout:
    """The layout, or NotSupported (nothing changed) naming why limits cannot be set."""
    why = problem(settings)
    if why is not None:
        raise _no_cgroup(why)
    return layout(settings)


def _no_cgroup(why: str) -> errors.NotSupported:
    return errors.NotSupported(
        f"cannot set CPU or memory limits here: {why}",
        hint="run it as root, or give this user a delegated cgroup v2 subtree (e.g. "
        "systemd-run --user --scope -p Delegate=yes) and name it as [local] cgroup_root; "
        "nothing was changed",
        code="no-writable-cgroup",
    )


class WorkloadCgroup:
    """One workload's cgroup: its directory in each hierarchy of ``lay``."""

    def __init__(self, lay: Layout, rel: str) -> None:
        self.layout = lay
        self.rel = rel  # ``clawpoint/NAME.PID``

    @property
    def dirs(self) -> list[Path]:
        return [d / self.rel for d in self.layout.dirs()]

    def create(self) -> WorkloadCgroup:
        for top in self.layout.dirs():
            if self.layout.version == 2:
                _enable_controllers(top)
            (top / TOP).mkdir(exist_ok=True)
            if self.layout.version == 2:
                _enable_controllers(top / TOP)
            (top / self.rel).mkdir(exist_ok=True)
        if self.layout.version == 1:  # best effort: deprecated, refused (EINVAL) since 6.x
            try:
                _write(self.layout.memory / self.rel / "memory.move_charge_at_immigrate", "1")
            except errors.OperationFailed:
                pass
        return self

    def apply(self, cpus: float | None, memory_mb: int | None) -> None:
        """Write the limits (None: no limit on that resource)."""
        lay, rel = self.layout, self.rel
        quota = "max" if cpus is None else str(max(MIN_QUOTA_US, round(cpus * PERIOD_US)))
        mem = "max" if memory_mb is None else str(memory_mb * MIB)
        if lay.version == 2:
            _write(lay.memory / rel / "memory.max", mem)
            _write(lay.cpu / rel / "cpu.max", f"{quota} {PERIOD_US}")
            return
        _write(lay.memory / rel / "memory.limit_in_bytes", "-1" if mem == "max" else mem)
        _write(lay.cpu / rel / "cpu.cfs_period_us", str(PERIOD_US))
        _write(lay.cpu / rel / "cpu.cfs_quota_us", "-1" if quota == "max" else quota)

    def limits(self) -> tuple[float | None, int | None]:
        """(cpus, memory MiB) as the kernel holds them now (None: no limit)."""
        lay, rel = self.layout, self.rel
        if lay.version == 2:
            quota, period = (lay.cpu / rel / "cpu.max").read_text().split()
            mem = (lay.memory / rel / "memory.max").read_text().strip()
        else:
            quota = (lay.cpu / rel / "cpu.cfs_quota_us").read_text().strip()
            period = (lay.cpu / rel / "cpu.cfs_period_us").read_text().strip()
            mem = (lay.memory / rel / "memory.limit_in_bytes").read_text().strip()
            quota = "max" if int(quota) < 0 else quota
            mem = "max" if int(mem) >= 2**62 else mem
        cpus = None if quota == "max" else int(quota) / int(period)
        return cpus, None if mem == "max" else int(mem) // MIB

    def usage_bytes(self) -> int | None:
        name = "memory.current" if self.layout.version == 2 else "memory.usage_in_bytes"
        try:
            return int((self.layout.memory / self.rel / name).read_text())
        except (OSError, ValueError):
            return None

    def procs_files(self) -> list[bytes]:
        return [os.fsencode(d / "cgroup.procs") for d in self.dirs]

    def joiner(self) -> Callable[[], None]:
        """A function for ``preexec_fn``: the calling (child) process joins the cgroup.
        Paths are encoded now: between fork and exec it only opens and writes."""
        files = self.procs_files()

        def join() -> None:
            me = str(os.getpid()).encode()
            for f in files:
                fd = os.open(f, os.O_WRONLY)
                try:
                    os.write(fd, me)
                finally:
                    os.close(fd)

        return join

    def adopt(self, pids: Iterable[int]) -> None:
        """Move running processes in (each with all its threads: ``cgroup.procs``)."""
        for d in self.dirs:
            for pid in pids:
                try:
                    _write(d / "cgroup.procs", str(pid))
                except errors.OperationFailed as exc:
                    if exc.details.get("errno") != errno.ESRCH:  # it ended meanwhile: fine
                        raise

    def remove(self) -> None:
        """Remove the cgroup once empty (a non-empty one is left: the kernel refuses)."""
        for d in self.dirs:
            try:
                d.rmdir()
            except OSError:
                continue


def _enable_controllers(d: Path) -> None:
    """v2: let ``d``'s children have memory and cpu limits (a no-op when they may)."""
    control = d / "cgroup.subtree_control"
    have = control.read_text().split()
    wanted = [f"+{c}" for c in ("memory", "cpu") if c not in have]
    if wanted:
        _write(control, " ".join(wanted))


def _write(path: Path, value: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        raise _failed(path, value, exc.errno or 0) from exc
    try:
        os.write(fd, value.encode())
    except OSError as exc:
        raise _failed(path, value, exc.errno or 0) from exc
    finally:
        os.close(fd)


def _failed(path: Path, value: str, err: int) -> errors.OperationFailed:
    why = os.strerror(err) if err else "error"
    return errors.OperationFailed(
        f"could not write {value!r} to {path}: {why}",
        hint="check that this user may write that cgroup ([local] cgroup_root); a memory "
        "limit below what the workload uses is refused by the kernel (EBUSY)",
        details={"errno": err, "path": str(path)},
    )


def for_wrapper(settings: Settings, name: str, pid: int | None = None) -> WorkloadCgroup:
    """The cgroup of the wrapper ``pid`` (default: this process) running ``name``."""
    return WorkloadCgroup(require(settings), f"{TOP}/{name}.{pid or os.getpid()}")


def of_process(settings: Settings, pid: int) -> WorkloadCgroup | None:
    """The clawpoint cgroup ``pid`` is in (None: it is in none of ours)."""
    try:
        lay = layout(settings)
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except (errors.NotSupported, OSError):
        return None
    prefix = _prefix(lay)
    for line in lines:
        _, controllers, path = line.split(":", 2)
        wanted = "" if lay.version == 2 else "memory"
        if controllers.split(",") != [wanted] and not (lay.version == 2 and controllers == ""):
            continue
        rel = path.lstrip("/")
        if prefix and rel.startswith(prefix + "/"):
            rel = rel[len(prefix) + 1 :]
        if rel.startswith(TOP + "/") and rel.count("/") == 1:
            return WorkloadCgroup(lay, rel)
    return None


def _prefix(lay: Layout) -> str:
    """The path of the layout's directory as /proc/PID/cgroup writes it (v2: relative to
    the mount, e.g. a delegated subtree; v1: the mount's root)."""
    if lay.version == 1:
        return ""
    return str(lay.memory.relative_to(BASE)) if lay.memory != BASE else ""


def tree_rss_bytes(pids: Iterable[int]) -> int:
    """The resident memory of ``pids`` together (what a new cgroup would be charged)."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError):
            continue
    return total


def joiner_for(settings: Settings, name: str, spec: RunSpec) -> Callable[[], None] | None:
    """A starting wrapper's cgroup, made and limited as ``spec`` says; what a process it
    starts runs to enter it (None: the start has no size)."""
    if spec.cpus is None and spec.memory_mb is None:
        return None
    group = for_wrapper(settings, name).create()
    group.apply(spec.cpus, spec.memory_mb)
    return group.joiner()


def discard(settings: Settings, name: str) -> None:
    """Remove this wrapper's cgroup of ``name`` if there is one and it is empty."""
    try:
        lay = layout(settings)
    except errors.NotSupported:
        return
    WorkloadCgroup(lay, f"{TOP}/{name}.{os.getpid()}").remove()
