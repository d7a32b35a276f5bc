"""Start a wrapper detached from the caller (``clawpoint run --detach``, backend steps).

The wrapper runs as ``sys.executable -m core.wrapper <spec json>`` in a new session, in the
clawpoint home (not the workload's launch directory, which later starts must not need), with
its stdio on ``<log_dir>/NAME.log`` (appended; the payload's own output goes to
``NAME.out``, see ``core.wrapper.payload.RotatingOutput``), so it outlives the CLI or MCP
server that started it. ``launch_detached`` returns once the registry shows the new wrapper
RUNNING, or raises with the tail of the log (and of the output) if it exited first.

Limits: waits by polling the registry (every 50 ms); this host only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from core import errors
from core.config import Settings, ensure_dirs
from core.model import WorkloadState
from core.polling import poll_until
from core.specs import RunSpec
from core.state.db import Database
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.wrapper import handoff
from core.wrapper.control import error_from
from core.wrapper.spec import output_path

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
ERROR_LINE = "clawpoint-wrapper-error: "


def log_path(settings: Settings, name: str) -> Path:
    return settings.log_dir / f"{name}.log"


def _catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (``SigCgt`` of /proc/PID/status)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _reported_error(lines: list[str]) -> errors.ClawpointError | None:
    """The error the wrapper reported before exiting (its last ``ERROR_LINE``), if any."""
    for line in reversed(lines):
        if line.startswith(ERROR_LINE):
            try:
                data = json.loads(line[len(ERROR_LINE) :])
            except ValueError:
                return None
            return error_from(data) if isinstance(data, dict) else None
    return None


def _spawn(settings: Settings, spec: RunSpec) -> tuple[subprocess.Popen[bytes], int, Path, int]:
    """Start ``python -m core.wrapper SPEC`` detached; (process, log offset, output, offset)."""
    ensure_dirs(settings)
    spec = spec.model_copy(update={"output": "file"})  # the payload's output: logs/NAME.out
    logfile = log_path(settings, spec.name)
    env = dict(os.environ)
    env["CLAWPOINT_HOME"] = spec.home
    # The wrapper imports ``core``: make it importable even when clawpoint is not installed.
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
    )
    offset = logfile.stat().st_size if logfile.exists() else 0
    outfile = output_path(settings, spec.name)
    out_offset = outfile.stat().st_size if outfile.exists() else 0
    with open(logfile, "ab") as log:
        try:
            proc = subprocess.Popen(  # noqa: S603 (our own interpreter and module)
                [sys.executable, "-m", "core.wrapper", spec.model_dump_json()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                # Not spec.cwd: that directory may be gone by a later start (a CI workspace),
                # and only a fresh payload start needs it (CRIU restores take the cwd from the
                # image). The wrapper itself runs in the clawpoint home, which always exists.
                cwd=settings.home,
                start_new_session=True,
            )
        except OSError as exc:
            raise errors.OperationFailed(
                f"cannot start the wrapper for {spec.name}: {exc}",
                hint=f"check that {settings.home} exists and Python is runnable",
            ) from exc
    return proc, offset, outfile, out_offset


def launch_standby(settings: Settings, spec: RunSpec, *, wait_s: float = 60) -> tuple[int, Path]:
    """Start a standby wrapper (``core.wrapper.handoff``) and return (pid, its socket) once
    it listens: its interpreter, imports and engine check are then behind it."""
    if spec.standby is None:
        raise errors.InvalidInput("launch_standby needs a spec with a standby token")
    proc, offset, _, _ = _spawn(settings, spec)
    path = handoff.standby_path(settings, spec.name, spec.standby)
    if handoff.wait_ready(path, lambda: proc.poll() is None, wait_s):
        return proc.pid, path
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    with open(log_path(settings, spec.name), "rb") as f:
        f.seek(offset)
        lines = f.read().decode(errors="replace").splitlines()
    raise _reported_error(lines) or errors.OperationFailed(
        f"the standby wrapper of {spec.name} did not come up (exit {proc.returncode}):\n"
        + "\n".join(lines[-10:]),
        hint="the move goes on without it (a wrapper is started after the checkpoint)",
    )


def launch_detached(settings: Settings, spec: RunSpec, *, wait_s: float = 60) -> WorkloadRecord:
    proc, offset, outfile, out_offset = _spawn(settings, spec)
    logfile = log_path(settings, spec.name)
    registry = WorkloadRegistry(Database(settings.state_db))

    def running() -> WorkloadRecord | None:
        code = proc.poll()
        record = registry.get(spec.name)
        if (
            record is not None
            and record.wrapper_pid == proc.pid
            and record.state is WorkloadState.RUNNING
        ):
            return record
        if code is None:
            return None
        with open(logfile, "rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
        reported = _reported_error(lines)
        if reported is not None:
            raise reported
        tail = "\n".join(lines[-15:])
        if outfile.exists() and outfile.stat().st_size > out_offset:
            tail += f"\n(its output, {outfile}:)\n{_tail(outfile, 10)}"
        # The wrapper exits with Conflict's code when another wrapper holds the name.
        kind = errors.Conflict if code == errors.Conflict.exit_code else errors.OperationFailed
        hint = f"read {logfile} for details; fix the cause and start it again"
        if spec.start_mode != "fresh":  # the same checkpoint would fail the same way again
            hint += (
                "; if it was restored and its checkpoint is the cause, restore an older one "
                "('clawpoint checkpoints', then 'clawpoint restore ID')"
            )
        raise kind(
            f"the wrapper of {spec.name} exited with code {code} before running:\n{tail}",
            hint=hint,
            details={"exit_code": code, "log": str(logfile)},
        )

    started = poll_until(running, timeout_s=wait_s, every_s=0.05)
    if started is not None:
        return started
    # Where it is stuck, for whoever reads the error: its threads' stacks, into its log. Only
    # once it catches SIGQUIT (an interpreter still starting would be killed by it).
    if _catches(proc.pid, signal.SIGQUIT):
        sizes = [logfile.stat().st_size if logfile.exists() else 0]

        def written() -> bool:  # grown, and no longer growing: every thread's stack is in
            sizes.append(logfile.stat().st_size)
            return sizes[-1] > sizes[0] and sizes[-1] == sizes[-2]

        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGQUIT)
            poll_until(written, timeout_s=2, every_s=0.1)
    raise errors.OperationFailed(
        f"the wrapper of {spec.name} (pid {proc.pid}) did not report RUNNING within "
        f"{wait_s:g}s (its threads' stacks are at the end of its log):\n{_tail(logfile, 60)}",
        hint=f"it may still be restoring a large checkpoint; check {logfile} and the workload list",
        details={"wrapper_pid": proc.pid, "log": str(logfile)},
    )
