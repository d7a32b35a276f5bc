"""Start a wrapper detached (its own session, output to ``$HOME/logs/NAME.log``).

Returns once the registry shows the new wrapper RUNNING, or raises with the tail of the log
if the wrapper exited first. Limits: the wrapper outlives the caller by design; stop it with
the control socket (checkpoint-and-stop or terminate).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from core import errors
from core.config import Settings, ensure_dirs
from core.model import WorkloadState
from core.state.db import Database
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.wrapper.spec import RunSpec

_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def launch_detached(settings: Settings, spec: RunSpec, *, wait_s: float = 60) -> WorkloadRecord:
    ensure_dirs(settings)
    log_path = settings.log_dir / f"{spec.name}.log"
    env = dict(os.environ)
    env["CLAWPOINT_HOME"] = spec.home
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
    )
    with open(log_path, "ab") as logf:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "core.wrapper", spec.model_dump_json()],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
                env=env,
                start_new_session=True,
                cwd=spec.cwd or None,
            )
        except OSError as exc:
            raise errors.OperationFailed(
                f"cannot start the wrapper for {spec.name}: {exc}",
                hint="check that the Python interpreter is usable",
            ) from exc
    registry = WorkloadRegistry(Database(settings.state_db))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        rec = registry.get(spec.name)
        if rec is not None and rec.wrapper_pid == proc.pid and rec.state is WorkloadState.RUNNING:
            return rec
        if proc.poll() is not None:
            raise errors.OperationFailed(
                f"the wrapper of {spec.name} exited with {proc.returncode} before running:\n"
                f"{_tail(log_path)}",
                hint=f"read the full log at {log_path}",
            )
        time.sleep(0.05)
    raise errors.OperationFailed(
        f"the wrapper of {spec.name} did not report RUNNING within {wait_s:g} s:\n"
        f"{_tail(log_path)}",
        hint=f"it may still be restoring a large checkpoint; see {log_path}",
    )
