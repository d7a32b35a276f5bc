"""The CRIU engine: dump and restore a process tree rooted at a PID-namespace init.

The wrapper runs the payload as the init of its own PID namespace, with stdout/stderr on
pipes the wrapper owns. Dump: the pipes are declared external (``--external pipe[INODE]``)
and their inodes recorded, and the image files are hashed while CRIU writes them (a
follower thread), so publishing adds little to CRIU's own time. Restore: the new wrapper's
pipes are handed in with ``--inherit-fd``; CRIU restores the tree stopped
(``--leave-stopped``) while the images are verified concurrently, and the tree is resumed
(SIGCONT) only once every digest matched, else it is killed and the error raised.

Limits: root only (unprivileged CRIU needs CAP_CHECKPOINT_RESTORE; not handled); no TCP
connections, no GPU (the CUDA plugin is another engine); the caller must be a child
subreaper to wait on a restored tree (``criu restore -d`` reparents it to us).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from pydantic import BaseModel

from core import errors
from core.checkpoint import stats
from core.store.digest import DirectoryFollower

log = structlog.get_logger(__name__)

INSTALL_HINT = "run scripts/install-criu.sh (as root) to install CRIU >= 4.1"


class EngineStatus(BaseModel):
    name: str
    available: bool
    version: str | None = None
    reason: str = ""


class DumpResult(BaseModel):
    digests: dict[str, tuple[int, str]]
    timings: dict[str, float]
    extra: dict[str, Any]


class RestoreResult(BaseModel):
    pid: int
    timings: dict[str, float]


@functools.cache
def criu_status(criu_path: str = "criu") -> EngineStatus:
    """Whether CRIU can run here, and why not (cached per process)."""
    if os.geteuid() != 0:
        return EngineStatus(name="criu", available=False, reason="not root: CRIU needs root here")
    exe = shutil.which(criu_path)
    if exe is None:
        return EngineStatus(
            name="criu", available=False, reason=f"criu not installed: {INSTALL_HINT}"
        )
    try:
        ver = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
        chk = subprocess.run([exe, "check"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return EngineStatus(name="criu", available=False, reason=f"cannot run {exe}: {exc}")
    match = re.search(r"Version:\s*(\S+)", ver.stdout)
    version = match.group(1) if match else None
    if chk.returncode != 0:
        tail = (chk.stderr or chk.stdout).strip().splitlines()[-3:]
        return EngineStatus(
            name="criu",
            available=False,
            version=version,
            reason="criu check failed: " + " | ".join(tail) + f" ({INSTALL_HINT})",
        )
    return EngineStatus(name="criu", available=True, version=version)


def require_criu(criu_path: str = "criu") -> str:
    status = criu_status(criu_path)
    if not status.available:
        raise errors.EngineUnavailable(
            f"the CRIU engine is not available: {status.reason}",
            hint="fix that, or run the workload with the cooperative engine",
        )
    return shutil.which(criu_path) or criu_path


def log_tail(path: Path, *, lines: int = 12) -> str:
    """The most useful end of a CRIU log: its error lines, else its last lines."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no CRIU log)"
    bad = [ln for ln in text if "Error" in ln or "error" in ln]
    return "\n".join((bad or text)[-lines:])


def pipe_inode(pid: int, fd: int) -> int | None:
    """The inode of the pipe a process has on ``fd``, if it is a pipe."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None
    match = re.fullmatch(r"pipe:\[(\d+)\]", target)
    return int(match.group(1)) if match else None


def dump(
    pid: int,
    images_dir: Path,
    *,
    leave_running: bool,
    log_path: Path,
    criu_path: str = "criu",
    timeout_s: float = 3600,
) -> DumpResult:
    """Dump the tree rooted at ``pid`` into ``images_dir``, hashing files as they are written."""
    exe = require_criu(criu_path)
    pipes = {name: pipe_inode(pid, fd) for name, fd in (("stdout", 1), ("stderr", 2))}
    argv = [exe, "dump", "-t", str(pid), "-D", str(images_dir), "-o", str(log_path), "-v2"]
    for ino in sorted({i for i in pipes.values() if i is not None}):
        argv += ["--external", f"pipe[{ino}]"]
    if leave_running:
        argv.append("--leave-running")
    follower = DirectoryFollower(images_dir).start()
    t0 = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        follower.close()
        raise errors.CheckpointError(
            f"criu dump of pid {pid} did not complete: {exc}",
            hint="check the workload is alive; see the CRIU log " + str(log_path),
        ) from exc
    dump_s = time.monotonic() - t0
    if proc.returncode != 0:
        follower.close()
        raise errors.CheckpointError(
            f"criu dump of pid {pid} failed (exit {proc.returncode}):\n{log_tail(log_path)}",
            hint="the workload may use something CRIU cannot dump (TCP, GPU, a growing "
            "regular file); see " + str(log_path),
            details={"log": str(log_path)},
        )
    digests = follower.finish()
    timings = {"criu_dump_wall_s": dump_s, **stats.decode(images_dir / "stats-dump")}
    extra: dict[str, Any] = {
        "pipes": {k: v for k, v in pipes.items() if v is not None},
    }
    return DumpResult(digests=digests, timings=timings, extra=extra)


def tree_pids(root: int) -> list[int]:
    """``root`` and every descendant (threads' children included), parents first."""
    out: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
            except OSError:
                continue
    return out


def restore(
    images_dir: Path,
    *,
    pipes: dict[str, int],
    fds: dict[str, int],
    log_path: Path,
    verify: Callable[[], object] | None = None,
    criu_path: str = "criu",
    timeout_s: float = 3600,
) -> RestoreResult:
    """Restore a dumped tree, detached and stopped; verify meanwhile; resume only if intact.

    ``pipes`` maps "stdout"/"stderr" to the pipe inodes recorded at dump time; ``fds`` maps
    the same names to the write ends of our new pipes. Returns the host pid of the new root.
    """
    exe = require_criu(criu_path)
    pidfile = log_path.with_suffix(".pid")
    pidfile.unlink(missing_ok=True)
    argv = [
        exe, "restore", "-D", str(images_dir), "-d", "--leave-stopped",
        "--pidfile", str(pidfile), "-o", str(log_path), "-v2",
    ]  # fmt: skip
    passed: list[int] = []
    seen: set[int] = set()
    for name, ino in sorted(pipes.items()):
        if name in fds and ino not in seen:  # stdout and stderr may share one pipe
            seen.add(ino)
            argv += ["--inherit-fd", f"fd[{fds[name]}]:pipe:[{ino}]"]
            passed.append(fds[name])
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv, pass_fds=passed, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
    except OSError as exc:
        raise errors.CheckpointError(
            f"cannot start criu restore: {exc}", hint=INSTALL_HINT
        ) from exc
    verify_error: BaseException | None = None
    t_verify = 0.0
    if verify is not None:
        tv = time.monotonic()
        try:
            verify()
        except BaseException as exc:  # re-raised after the half-restored tree is removed
            verify_error = exc
        t_verify = time.monotonic() - tv
    try:
        proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.wait()
        raise errors.CheckpointError(
            f"criu restore from {images_dir} timed out", hint=f"see the CRIU log {log_path}"
        ) from exc
    restore_s = time.monotonic() - t0
    if proc.returncode != 0:
        if verify_error is not None:
            raise verify_error
        raise errors.CheckpointError(
            f"criu restore from {images_dir} failed (exit {proc.returncode}):\n"
            f"{log_tail(log_path)}",
            hint="if the message names a busy PID or a file, see docs/checkpointing.md; "
            "an older checkpoint may restore",
            details={"log": str(log_path)},
        )
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError) as exc:
        raise errors.CheckpointError(
            f"criu restore gave no pid file at {pidfile}", hint=f"see the CRIU log {log_path}"
        ) from exc
    if verify_error is not None:
        _kill_tree(pid)
        raise verify_error
    for p in tree_pids(pid):
        try:
            os.kill(p, signal.SIGCONT)
        except ProcessLookupError:
            continue
    timings = {"criu_restore_wall_s": restore_s, "verify_s": t_verify}
    timings.update(stats.decode(images_dir / "stats-restore"))
    log.info("criu.restored", pid=pid, images=str(images_dir), seconds=round(restore_s, 3))
    return RestoreResult(pid=pid, timings=timings)


def _kill_tree(pid: int) -> None:
    """SIGKILL a restored tree: killing a PID namespace's init kills the whole namespace."""
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        return
