"""The restore side of the CRIU engine: ``criu restore`` of a dumped tree as a child of the
calling process, stopped until the caller has verified the images (``resume``), and the
end of a restore stopped mid-way (its images failed verification, or it timed out) or failed
by CRIU itself: the half-restored tasks CRIU leaves are ours to end (``--restore-sibling``),
and they must never hang the wrapper by holding CRIU's output pipes.

Limits: a restore is stopped by killing CRIU, then every new child of this process (the
tasks it restored); a child this process starts meanwhile from another thread would be
ended too, which is why the wrapper restores before it starts anything else.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from core import errors, logs
from core.checkpoint import engine, lazy_pages, stats
from core.checkpoint.criu_setup import USERNS_MARK, in_namespaces, log_tail, require

log = logs.get_logger(__name__)

# Restore flags do not depend on the options: CRIU refuses an image dumped with --tcp-close
# unless told again (and one dumped without it holds no established connection), and
# --file-locks only puts back locks the image records.
RESTORE_ARGS = ("--tcp-close", "--file-locks")
# The longest a killed restore's leftovers may keep its output pipes open (see
# _end_half_restored): past it the output is abandoned rather than the wrapper hung.
REAP_S = 30.0
# CRIU's log of a restore, in its work directory; its tasks hold it open until the restore is
# over (``core.wrapper.fence.half_restored`` looks for that).
RESTORE_LOG = "criu-restore.log"


def restore(
    images_dir: Path,
    *,
    work_dir: Path,
    inherit_pipes: Mapping[int, int] | None = None,
    leave_stopped: bool = True,
    criu_path: str = "criu",
    timeout_s: float = 900,
    abort: threading.Event | None = None,
    env: Mapping[str, str] | None = None,
    lazy: bool = False,
    join: Callable[[], None] | None = None,
) -> engine.Restored:
    """Restore a dumped tree as a child of the calling process; returns its root's host pid.

    ``inherit_pipes`` maps a pipe inode recorded at dump to the write end (an fd of ours)
    that replaces it. With ``leave_stopped`` the tree stays stopped until ``resume``.
    Call from a long-lived thread: the tree's parent-death signal is tied to the thread that
    starts CRIU (``--restore-sibling`` makes the tree our child, not CRIU's).
    ``abort`` (set by the concurrent verifier when an image is corrupt) stops CRIU at once:
    CRIU can spin for ever on damaged page images, so it is never waited out.
    ``lazy``: post-copy (``core.checkpoint.lazy``): the tree is restored without its memory,
    which a ``criu lazy-pages`` daemon then faults in and copies in the background.
    ``join`` runs in CRIU's process before exec (``core.wrapper.cgroup_limits``): it enters
    the workload's cgroup, and with ``--manage-cgroups=ignore`` the tasks it forks stay
    there (else CRIU's default, soft, would put them back into the cgroup they were dumped
    in, ``Documentation/criu.txt``).
    """
    exe = require(criu_path)
    work_dir.mkdir(parents=True, exist_ok=True)
    # Dumped from root's payload in a user namespace of its own: restored inside a new one,
    # where CRIU cannot restore lazily (userfaultfd: CAP_SYS_PTRACE in the initial one; the
    # move chose stop-and-copy for it, core.backends.local.moves).
    own_userns = (images_dir / USERNS_MARK).exists()
    lazy = lazy and not own_userns
    daemon = lazy_pages.start(exe, images_dir, work_dir, env=env) if lazy else None
    try:
        logfile = work_dir / RESTORE_LOG
        pidfile = work_dir / "restore.pid"
        pidfile.unlink(missing_ok=True)
        argv = [exe, "restore", "-D", str(images_dir), "-W", str(work_dir), "-o", str(logfile)]
        argv += ["-v2", "-d", "--restore-sibling", "--pidfile", str(pidfile)]
        argv += RESTORE_ARGS
        if leave_stopped:
            argv.append("--leave-stopped")
        if daemon is not None:
            argv.append("--lazy-pages")
        if join is not None:
            argv.append("--manage-cgroups=ignore")
        fds = []
        for inode, fd in (inherit_pipes or {}).items():
            argv += ["--inherit-fd", f"fd[{fd}]:pipe:[{inode}]"]
            fds.append(fd)
        argv = in_namespaces(argv, None, everyone=own_userns)
        t0 = time.perf_counter()
        before = _children()
        try:
            proc = subprocess.Popen(  # noqa: S603 (argv list)
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                pass_fds=fds,
                env=None if env is None else dict(env),
                preexec_fn=join,
            )
            while True:
                try:
                    proc.communicate(timeout=0.05)
                    break
                except subprocess.TimeoutExpired:
                    stopped = abort is not None and abort.is_set()
                    if stopped or time.perf_counter() - t0 > timeout_s:
                        proc.kill()
                        _end_half_restored(proc, before)
                        why = (
                            "stopped: its images failed verification"
                            if stopped
                            else (f"timed out after {timeout_s:.0f} s")
                        )
                        raise errors.CheckpointError(
                            f"criu restore from {images_dir} {why}",
                            hint="the checkpoint is kept; an older good one may be tried",
                        ) from None
        except OSError as exc:
            raise errors.CheckpointError(
                f"criu restore from {images_dir} did not start: {exc}",
                hint="check 'criu check'; the checkpoint itself is unchanged",
            ) from exc
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            # A restore that failed after it made tasks (our children, --restore-sibling) whose
            # CRIU could not end them: left alone they would outlive this wrapper, reparented
            # to init and so beyond any job's or pod's reach, each holding its memory (seen:
            # an unprivileged Slurm job's half-restored 200 MiB task, asleep on a futex).
            if left := _kill_new_children(before | {proc.pid}):
                log.warning("criu.restore_leftovers_ended", pids=left)
            raise errors.CheckpointError(
                f"criu restore from {images_dir} failed (exit {proc.returncode}): {log_tail(logfile)}",
                hint=f"see {logfile}; the checkpoint is kept, an older one may be tried",
                details={"log": str(logfile)},
            )
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError) as exc:
            raise errors.CheckpointError(
                f"criu restore reported success but wrote no pid file {pidfile}: {exc}",
                hint=f"see {logfile}",
            ) from exc
        timings = {"criu_restore_s": wall}
        if daemon is not None:
            daemon.adopt(pid)
            timings["lazy_daemon_start_s"] = daemon.start_s
        restore_stats = stats.read_stats(work_dir / "stats-restore") or stats.read_stats(
            images_dir / "stats-restore"
        )
        timings.update({f"restore_{k}": v for k, v in restore_stats.items()})
        # Not logged here: the tree is still stopped, and a first log line loads the logger
        # (tens of ms) inside the workload's pause; ``ops`` says it once the tree runs.
        return engine.Restored(pid=pid, timings=timings)
    except BaseException:
        if daemon is not None:
            daemon.stop()  # its tree is gone: nothing to feed
        raise


def _children() -> set[int]:
    """Pids whose parent is this process (from /proc; empty if unreadable)."""
    me = os.getpid()
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and fields[1] == str(me):
            found.add(int(entry.name))
    return found


def _kill_new_children(before: set[int]) -> list[int]:
    """End (and reap) every child of ours not in ``before``; returns their pids."""
    new = sorted(_children() - before)
    for pid in new:
        engine.kill_tree(pid)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return new


def _end_half_restored(proc: subprocess.Popen[str], before: set[int]) -> None:
    """After CRIU (``proc``) was killed mid-restore: end the tasks it left and reap it.

    ``--restore-sibling`` makes restored tasks our children (each forks the next with
    CLONE_PARENT); CRIU, killed, cannot clean them up, so they are ours to end. They hold
    CRIU's output pipes, so reading those to the end waits for them. A task may fork another
    between our look at /proc and our kill (seen under load: a stopped half-restored task
    kept the pipes open and the wrapper waited for ever), so look again until none is left,
    and never wait on the pipes for more than ``REAP_S`` in all."""
    deadline = time.monotonic() + REAP_S
    while True:
        _kill_new_children(before | {proc.pid})
        try:
            proc.communicate(timeout=0.5)
            return
        except subprocess.TimeoutExpired:
            if time.monotonic() < deadline:
                continue
        log.warning("criu.restore_output_abandoned", pid=proc.pid, waited_s=REAP_S)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        return


def resume(pid: int) -> None:
    """Let a tree restored with ``leave_stopped`` run (SIGCONT to every task of the tree)."""
    engine.signal_tree(pid, signal.SIGCONT)
