"""The CRIU engine: transparent dump and restore of a process tree by calling ``criu``.

The wrapper runs each payload as the init of its own PID namespace, so ``criu dump -t PID``
takes the whole namespace and ``criu restore`` can recreate it on any host, whatever PIDs are
in use there. The payload's stdout/stderr are pipes owned by the wrapper: they are declared
external at dump (``--external pipe[INODE]``) and replaced by the new wrapper's pipes at
restore (``--inherit-fd fd[N]:pipe:[INODE]``), since a regular file that grew after the dump
would make the restore fail.

Speed: while CRIU writes, a follower thread hands each complete 16 MiB chunk of the page
images to the digest pool (``core.store.digest``: sha256 tree, hashed from the page cache on
every core), so publishing does not re-read them and only waits for the last chunks. Restores
(``core.checkpoint.criu_restore``) run with ``--leave-stopped`` so the caller can verify
digests concurrently and resume the tree only when they match (``resume``), or kill it
(``kill_tree``). Whether CRIU is here and how it is called: ``core.checkpoint.criu_setup``.

Options (``CriuOptions``, from the ``[checkpoint]`` section): deleted-but-open files up to
``criu_ghost_limit_mib`` are carried in the image (``--ghost-limit``); established TCP
connections are not carried: with ``criu_tcp = "close"`` they are dumped as closed and
restored shut down (``--tcp-close``; connections not yet accepted are dropped,
``--skip-in-flight``), so the restored program sees its peers hang up and clients reconnect;
with ``"refuse"`` a checkpoint of a program holding one fails, naming the option. Listening
sockets are carried either way. File locks are carried (``--file-locks``) unless disabled.
A dump CRIU refuses for one of these reasons raises CheckpointError naming the setting.

A dump may take ``dump_timeout_s``: ``[checkpoint] dump_timeout_base_s`` plus
``dump_timeout_per_gib_s`` per GiB of the tree's resident memory when it starts
(``[checkpoint] dump_timeout_s`` replaces the sum); past it CRIU is killed, the tree resumed
and the checkpoint given up, so a hung dump never holds a workload frozen for long.

Limits: needs root (or CAP_CHECKPOINT_RESTORE + CAP_SYS_PTRACE) and CRIU >= 4.1 on kernels
>= 6.13, >= 4.2.1 on kernels >= 6.16 (older CRIU cannot dump any TCP socket there). No
established TCP connection survives (see above), no mount namespace, no GPU (a CUDA plugin
would be another engine). ``criu`` is called with argv lists; library errors become
CheckpointError or EngineUnavailable with the tail of CRIU's log.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from core import config, errors, logs
from core.checkpoint import cwd_lock, engine, files, lazy_pages, nsinit, stats
from core.checkpoint.criu_restore import restore, resume

# criu_status, require and required_version are the engine's public face too (callers and
# tests ask ``criu.criu_status()``); they live with the rest of "is CRIU here".
from core.checkpoint.criu_setup import (
    INSTALL_HINT,
    USERNS_MARK,
    in_namespaces,
    log_tail,
    require,
)
from core.checkpoint.criu_setup import (
    criu_status as criu_status,
)
from core.checkpoint.criu_setup import (
    required_version as required_version,
)
from core.store import digest
from core.store.disk import PendingCheckpoint

if TYPE_CHECKING:
    from core.config import CheckpointConfig

log = logs.get_logger(__name__)


@dataclass(frozen=True)
class CriuOptions:
    """CRIU behaviour the configuration chooses (see the module docstring)."""

    ghost_limit_mib: int = 64
    tcp: Literal["close", "refuse"] = "close"
    file_locks: bool = True
    # Not a CRIU flag: how much of the files the workload writes each checkpoint carries
    # (``core.checkpoint.files``).
    file_budget_mib: int = 256

    @classmethod
    def from_config(cls, cfg: config.CheckpointConfig) -> CriuOptions:
        return cls(
            ghost_limit_mib=cfg.criu_ghost_limit_mib,
            tcp=cfg.criu_tcp,
            file_locks=cfg.criu_file_locks,
            file_budget_mib=cfg.file_budget_mib,
        )

    def dump_args(self) -> list[str]:
        argv = ["--ghost-limit", f"{self.ghost_limit_mib}M"]
        if self.tcp == "close":
            argv += ["--tcp-close", "--skip-in-flight"]
        if self.file_locks:
            argv.append("--file-locks")
        return argv


_last_good = CriuOptions()


def current_options() -> CriuOptions:
    """The options of this process's configuration, read afresh on each call.

    Read at every dump, so a setting changed after a refusal (the hint says which) applies to
    the next checkpoint of a running workload. A config file that no longer loads does not
    stop a checkpoint (it may be the last one before a preemption): the last good options
    are used and a warning logged.
    """
    global _last_good
    try:
        _last_good = CriuOptions.from_config(config.load_settings().checkpoint)
    except errors.ClawpointError as exc:
        log.warning("criu.options_unreadable", error=exc.message, using=str(_last_good))
    return _last_good


_GHOST_RE = re.compile(r"Can't dump ghost file (.+) of (\d+) size")
# criu/cr-dump.c dump_task_rlimits: prlimit(2) on a task whose ids are not CRIU's needs
# CAP_SYS_RESOURCE (kernel/sys.c check_prlimit_permission); the failing task's pid follows.
_RLIMIT_RE = re.compile(r"Can't get rlimit \d+:")
_DUMP_CORE_RE = re.compile(r"Dump core \(pid: (\d+)\)")


def _refusal(logfile: Path, options: CriuOptions) -> tuple[str, str] | None:
    """What a setting made CRIU refuse, as (message, hint); None for other failures."""
    try:
        text = logfile.read_text(errors="replace")
    except OSError:
        return None
    keep = "the workload was left as it was and the previous checkpoints are untouched"
    if m := _GHOST_RE.search(text):
        size_mib = int(m.group(2)) / 2**20
        return (
            f"the workload holds a deleted file open ({m.group(1)}, {size_mib:.1f} MiB), over "
            f"the ghost limit of {options.ghost_limit_mib} MiB (checkpoint.criu_ghost_limit_mib)",
            "a deleted-but-open file is copied into every checkpoint: raise "
            "checkpoint.criu_ghost_limit_mib in the config file above its size, or have the "
            f"program close it; {keep}",
        )
    if "Connected TCP socket" in text:
        return (
            "the workload has an established TCP connection and checkpoint.criu_tcp is "
            f"'{options.tcp}', which refuses to checkpoint it",
            "set checkpoint.criu_tcp = 'close' in the config file (connections are restored "
            f"closed and the peers reconnect), or close the connections first; {keep}",
        )
    if "Some file locks are hold by dumping tasks" in text:
        return (
            "the workload holds file locks and checkpoint.criu_file_locks is off",
            f"set checkpoint.criu_file_locks = true in the config file; {keep}",
        )
    if "External socket is used" in text:
        return (
            "the workload has a Unix-domain socket connected to a process outside it, which "
            "CRIU cannot carry",
            "close that connection before checkpointing, or run its peer inside the workload; "
            + keep,
        )
    if _RLIMIT_RE.search(text):
        m = _DUMP_CORE_RE.search(text)
        who = f"pid {m.group(1)}" if m else "one of them"
        return (
            f"a process of the workload ({who}) runs with a uid or gid that is not "
            "root's, and this host's root lacks CAP_SYS_RESOURCE, without which CRIU cannot "
            "read that process's resource limits",
            "give root CAP_SYS_RESOURCE (a container: --cap-add SYS_RESOURCE), or start the "
            f"workload as the user its processes run as; {keep}",
        )
    if "fsnotify:" in text and "Can't dump that handle" in text:
        # criu/fsnotify.c: a watched inode is named by its file handle, which only
        # open_by_handle_at with CAP_DAC_READ_SEARCH in the host's namespace reopens, else
        # by a path found scanning a few system folders (irmap); an ordinary user has neither.
        return (
            "the workload holds an inotify (or fanotify) watch that CRIU could not name: "
            "without CAP_DAC_READ_SEARCH (a checkpoint by an ordinary user) it cannot reopen "
            "the watched file from its handle, and found no path to it",
            "have the program close its watch before a checkpoint (or not use one), or run "
            f"the workload as root; {keep}",
        )
    if "Can't get 1:16 opt" in text:
        return (
            "this CRIU cannot dump the workload's TCP sockets on this kernel "
            f"({os.uname().release}): it needs CRIU >= 4.2.1",
            f"{INSTALL_HINT}; {keep}",
        )
    return None


def pipe_inode(fd: int) -> int:
    return os.fstat(fd).st_ino


def dump_timeout_s(cfg: CheckpointConfig, pid: int) -> float:
    """How long a dump of the tree at ``pid`` may take (see the module docstring)."""
    if cfg.dump_timeout_s is not None:
        return cfg.dump_timeout_s
    size = engine.resident_bytes(pid) or 0
    return cfg.dump_timeout_base_s + cfg.dump_timeout_per_gib_s * size / 2**30


class _Stopped(Exception):
    """CRIU was stopped before it finished (``timed_out``, else aborted)."""

    def __init__(self, timed_out: bool) -> None:
        self.timed_out = timed_out


def _run_until(
    argv: list[str],
    *,
    env: Mapping[str, str] | None,
    timeout_s: float,
    abort: threading.Event | None,
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` that another thread can stop (``abort``), as the timeout does:
    CRIU is killed, and _Stopped raised once it is reaped."""
    proc = subprocess.Popen(  # noqa: S603 (argv list)
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
    )
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            out, err = proc.communicate(timeout=0.2)
            return subprocess.CompletedProcess(argv, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            aborted = abort is not None and abort.is_set()
            if aborted or time.monotonic() > deadline:
                proc.kill()
                proc.communicate()
                raise _Stopped(timed_out=not aborted) from None


def dump(
    pid: int,
    pending: PendingCheckpoint,
    *,
    leave_running: bool,
    leave_stopped: bool = False,
    external_pipes: Sequence[int] = (),
    criu_path: str = "criu",
    timeout_s: float = 3600,
    options: CriuOptions | None = None,
    env: Mapping[str, str] | None = None,
    follow: bool = True,
    abort: threading.Event | None = None,
    while_stopped: Callable[[], None] | None = None,
) -> dict[str, float]:
    """Dump the tree rooted at ``pid`` into ``pending.images_dir``; returns timings (seconds).

    ``follow`` = False: no hashing (nor early write-back) while CRIU writes, so nothing
    competes with it for CPUs or the disk; publishing then hashes everything.

    Fills ``pending.precomputed`` with digests of the page images hashed while CRIU wrote them.
    ``leave_running``: the tree goes on. ``leave_stopped``: the tree stays frozen (the caller
    kills it once the checkpoint is published, or resumes it if publishing failed: never
    lose the workload). Neither: CRIU kills the tree once the dump succeeded.
    ``options``: None = ``current_options()`` (the configuration's). ``env``: CRIU's
    environment (None = ours), e.g. the GPU engine's helper on ``PATH`` for CRIU's plugin.
    ``timeout_s`` or ``abort`` (set by another thread) stop CRIU and raise CheckpointError.
    ``while_stopped`` (with ``leave_stopped``): called once CRIU exited with good images and
    before the hashing that followed CRIU's writes is waited for, so a tree the caller resumes
    there is held no longer than the caller's own work in it.
    """
    exe = require(criu_path)
    options = options or current_options()
    logfile = pending.work_dir / "criu-dump.log"
    argv = [exe, "dump", "-t", str(pid), "-D", str(pending.images_dir)]
    argv += ["-W", str(pending.work_dir), "-o", str(logfile), "-v2"]
    for inode in external_pipes:
        argv += ["--external", f"pipe[{inode}]"]
    argv += options.dump_args()
    if leave_running:
        argv.append("--leave-running")
    elif leave_stopped:
        argv.append("--leave-stopped")
    argv = in_namespaces(argv, pid)
    if nsinit.privileged() and nsinit.own_user_namespace(pid):
        # Root's payload in its own user namespace: its restore must make one again.
        (pending.images_dir / USERNS_MARK).write_bytes(b"")
    follower = digest.Follower(pending.images_dir) if follow else None
    if follower is not None:
        follower.start()
    t0 = time.perf_counter()
    try:
        # CRIU's parasite uses the task's cwd for a scratch mount: one dump per directory.
        with cwd_lock.dump_slot(pid, timeout_s=min(timeout_s, 60)):
            proc = _run_until(argv, env=env, timeout_s=timeout_s, abort=abort)
    except _Stopped as exc:
        if follower is not None:
            follower.cancel()
        why = (
            f"did not finish within {timeout_s:.0f} s"
            if exc.timed_out
            else "was given up: the workload is being killed"
        )
        raise errors.CheckpointError(
            f"criu dump of pid {pid} {why}; CRIU was stopped and nothing was kept",
            hint="the workload was resumed where it was; if the storage is this slow, raise "
            "[checkpoint] dump_timeout_per_gib_s (or set dump_timeout_s)"
            if exc.timed_out
            else "nothing to do: the kill goes on",
            details={"timeout_s": timeout_s, "timed_out": exc.timed_out},
        ) from None
    except (OSError, subprocess.SubprocessError) as exc:
        if follower is not None:
            follower.cancel()
        raise errors.CheckpointError(
            f"criu dump of pid {pid} did not complete: {exc}",
            hint="the workload was left as it was; retry, and check the wrapper's log",
        ) from exc
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        if follower is not None:
            follower.cancel()
        # The pending checkpoint is aborted after this error; the store keeps its logs there.
        kept = pending.kept_logs_dir / logfile.name
        refused = _refusal(logfile, options)
        if refused is not None:
            raise errors.CheckpointError(
                f"criu dump of pid {pid} refused: {refused[0]}",
                hint=refused[1],
                details={"log": str(kept)},
            )
        raise errors.CheckpointError(
            f"criu dump of pid {pid} failed (exit {proc.returncode}): {log_tail(logfile)}",
            hint=f"see {kept}; the previous checkpoints are untouched"
            + ("" if leave_running else "; CRIU does not stop a tree whose dump failed"),
            details={"log": str(kept)},
        )
    if missing := tasks_without_mm(pending.images_dir):
        if follower is not None:
            follower.cancel()
        raise errors.CheckpointError(
            f"criu dump of pid {pid} exited 0 without the memory layout of task(s) "
            f"{', '.join(missing)}, so its images could not be restored: {log_tail(logfile)}",
            hint="the checkpoint is not kept; the log names the file CRIU could not dump"
            + ("" if leave_running or leave_stopped else "; CRIU ended the tree it dumped"),
            details={"log": str(pending.kept_logs_dir / logfile.name)},
        )
    if while_stopped is not None:
        try:
            while_stopped()
        except BaseException:
            if follower is not None:
                follower.cancel()
            raise
    try:
        if follower is not None:
            pending.precomputed.update(follower.finish())
    except (OSError, errors.CheckpointError) as exc:
        log.warning("criu.follower_failed", error=str(exc))  # publish hashes everything instead
    # With -W, CRIU writes its stats file into the work dir rather than the images dir.
    dump_stats = stats.read_stats(pending.work_dir / "stats-dump") or stats.read_stats(
        pending.images_dir / "stats-dump"
    )
    timings = {"criu_dump_s": wall, **dump_stats}
    if dropped := inotify_queues_dropped(logfile):
        # Counted in the checkpoint's timings, so `checkpoints --json` shows it too.
        timings["inotify_queues_dropped"] = float(dropped)
        log.warning(
            "criu.inotify_events_dropped",
            pid=pid,
            instances=dropped,
            why="CRIU keeps inotify watches but not the events queued at the dump",
            hint="a restored program must rescan what it watches (docs/checkpointing.md)",
        )
    log.info("criu.dumped", pid=pid, wall_s=round(wall, 3), leave_running=leave_running)
    return timings


def inotify_queues_dropped(logfile: Path) -> int:
    """How many inotify instances had events queued that the images do not hold: CRIU
    dumps the watches but not the queue, and warns "fsnotify: The 0xID inotify events will
    be dropped" (criu/fsnotify.c, dump_one_inotify; checkpoint-restore/criu#48). A restore
    of such images gives the program none of those events."""
    try:
        text = logfile.read_text(errors="replace")
    except OSError:
        return 0
    return sum(1 for line in text.splitlines() if "inotify events will be dropped" in line)


def tasks_without_mm(images_dir: Path) -> list[str]:
    """Tasks whose pages were dumped (``pagemap-N.img``) but not their memory layout
    (``mm-N.img``). CRIU 4.2.1 exits 0 then: in ``dump_task_mm`` (criu/cr-dump.c) a failure of
    ``get_task_auxv`` or ``dump_task_exe_link`` jumps out with ``ret`` still 0 from the VMA
    loop, and the image is never written (met when CRIU could not name a task's executable,
    "Can't lookup mount=N for fd=-3"); its restore crashes."""
    names = {p.name for p in images_dir.iterdir()}
    tasks = (n[len("pagemap-") : -len(".img")] for n in names if n.startswith("pagemap-"))
    # Only a task's own (pagemap-PID); shared memory has its own (pagemap-shmem-INODE).
    return sorted(t for t in tasks if t.isdigit() and f"mm-{t}.img" not in names)


def written_files(images_dir: Path) -> list[str]:
    """Regular files the image records open for writing (``files.img``: each entry a
    length-prefixed FileEntry whose field 3 is a RegFileEntry: 2 flags, 6 name, 10 mode)."""
    try:
        data = (images_dir / "files.img").read_bytes()
    except OSError:
        return []
    found: list[str] = []
    pos = 8  # two magic numbers
    while pos + 4 <= len(data):
        size = int.from_bytes(data[pos : pos + 4], "little")
        entry = stats.fields(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
        reg = entry.get(3)
        if entry.get(1) != 1 or not isinstance(reg, bytes):  # type 1: a regular file
            continue
        f = stats.fields(reg)
        flags, mode, name = f.get(2, 0), f.get(10, 0), f.get(6)
        writes = isinstance(flags, int) and flags & 3 in (os.O_WRONLY, os.O_RDWR)
        regular = isinstance(mode, int) and mode & 0o170000 == 0o100000
        if writes and regular and isinstance(name, bytes):
            found.append(name.decode(errors="replace"))
    return found


class CriuEngine:
    """``criu``: transparent dump/restore of the payload's PID namespace (see module doc).

    The workload's files are copied while the tree is frozen (``core.checkpoint.files``): a
    leave-running checkpoint of a tree that has any is dumped ``--leave-stopped`` and resumed
    right after the copy. Options are read afresh at every dump (``current_options``).
    Subclassed by the GPU engine (``core.checkpoint.cuda``), which only adds the environment
    CRIU's plugin needs and its own checks: ``criu_env`` and ``extra_checks``.
    """

    name = "criu"
    needs_pid_namespace = True
    restores_process = True
    supports_handoff = True

    def status(self, cfg: CheckpointConfig) -> engine.EngineStatus:
        return criu_status(cfg.criu_path)

    def require(self, cfg: CheckpointConfig) -> None:
        require(cfg.criu_path)

    def payload_env(self, link: Path) -> dict[str, str]:
        return {}

    def criu_env(self) -> dict[str, str] | None:
        return None

    def dump(self, req: engine.DumpRequest) -> engine.Dumped:
        # A post-copy restore still copying memory in: its pages are not all there yet.
        lazy_pages.wait_done(req.pid)
        options = current_options()
        # Cheap look before the freeze: only a tree with files to copy (open ones, or side files
        # its caller names) pays for a stopped dump.
        frozen = (
            req.stop
            or req.side_files is not None
            or bool(files.writable_files(req.pid, exclude=req.exclude))
        )
        dumped = self._dump(req, options, frozen=frozen)
        if not frozen:
            # A file opened for writing between that look and CRIU's freeze is named in the
            # image but was not copied: once it changes (or is renamed away) no restore of
            # this checkpoint works. Then the checkpoint is taken again, stopped, with it.
            late = [
                p for p in written_files(req.pending.images_dir) if files.covered(p, req.exclude)
            ]
            if late:
                log.warning("criu.file_opened_during_dump", files=late[:5], retry="stopped dump")
                for f in req.pending.images_dir.iterdir():
                    f.unlink()
                req.pending.precomputed.clear()
                dumped = self._dump(req, options, frozen=True)
                dumped.timings["redone_for_files"] = 1.0
        return dumped

    def _dump(
        self, req: engine.DumpRequest, options: CriuOptions, *, frozen: bool
    ) -> engine.Dumped:
        budget = options.file_budget_mib * 2**20
        file_state: dict[str, object] = {"budget_bytes": budget}
        files_s = held_s = 0.0

        def in_the_freeze() -> None:
            # The files as the frozen tree left them; then a leave-running checkpoint's tree
            # goes on at once, while the images' hashing is still being finished.
            nonlocal file_state, files_s, held_s
            t1 = time.perf_counter()
            closed = req.side_files() if req.side_files is not None else ()
            file_state = files.save(
                req.pid, req.pending.images_dir, budget_bytes=budget, exclude=req.exclude,
                closed=closed,
            )  # fmt: skip
            files_s = time.perf_counter() - t1
            if not req.stop:
                self.resume(req.pid)
                held_s = time.perf_counter() - t1

        try:
            timings = dump(
                req.pid,
                req.pending,
                leave_running=not frozen,
                leave_stopped=frozen,
                external_pipes=req.pipes,
                criu_path=req.cfg.criu_path,
                timeout_s=dump_timeout_s(req.cfg, req.pid),
                abort=req.abort,
                options=options,
                env=self.criu_env(),
                follow=not req.staged,
                while_stopped=in_the_freeze if frozen else None,
            )
        except BaseException:
            if frozen:
                # CRIU resumes a tree whose dump failed, and a failed copy of its files must
                # not hold it either: let it go on rather than lose it (twice is harmless).
                self.resume(req.pid)
            raise
        if frozen:
            timings["files_s"] = files_s
            if not req.stop:
                # The pause past CRIU's own frozen_s: the tree stays stopped after CRIU's
                # exit until the copy and the resume are done (a few ms of CRIU's exit aside).
                timings["held_after_dump_s"] = held_s
            frozen = req.stop
        extra = {"pipes": list(req.pipes), files.FILES_KEY: file_state}
        return engine.Dumped(timings=timings, extra=extra, frozen=frozen)

    def resume(self, pid: int) -> None:
        resume(pid)

    def end(self, pid: int, exited: threading.Event) -> None:
        engine.kill_tree(pid)

    def refusals(self, pid: int) -> list[str]:
        from core.checkpoint import probe  # probe reads CriuOptions from this module

        return [str(r) for r in probe.refusals(pid, current_options())]

    def prepare_restore(self, req: engine.RestoreRequest) -> None:
        # The files the workload wrote, back as they were at the checkpoint (digests checked
        # first): CRIU refuses files whose size changed, and memory must match their contents.
        req.files = files.put_back(req.info, req.images, req.cfg.file_policy)

    def restore(self, req: engine.RestoreRequest) -> engine.Restored:
        return restore(
            req.images,
            work_dir=req.work_dir,
            inherit_pipes=req.inherit_pipes,
            leave_stopped=True,
            criu_path=req.cfg.criu_path,
            abort=req.abort,
            env=self.criu_env(),
            lazy=req.lazy and lazy_pages.supported(req.cfg.criu_path),
            join=req.join,
        )


ENGINE = CriuEngine()
