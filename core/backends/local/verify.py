"""After a restore: watch the workload briefly before a step reports it done.

A restore that CRIU reports as successful can still hand back a program that fails its own
check a moment later (a timerfd restored disarmed, shared memory that did not travel, a
file that changed under it). Every start step that restores (migrate, resume, failover,
restore, and their compensations) ends with :func:`watch_restored`: for ``[verify]
settle_s`` seconds the workload must stay alive (a payload that exits 0 in that time
finished, which counts as alive), and where it speaks the progress protocol, the first
progress it reports after the restore must not be behind the progress the checkpoint
recorded. Otherwise the step fails with what was seen; the checkpoint is not touched, so the
workload stays restorable.

Limits: a program that reports no progress in the window is judged on liveness alone (a slow
step is not a failure); only a numeric ``step`` (else ``done``) field is compared; a check
that fails after the window is not seen here.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from core import errors
from core.backends.local.common import NAME, _wrapper_alive
from core.config import Settings
from core.model import WorkloadState
from core.polling import poll_until
from core.schema_base import Model
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.store.store import CheckpointStore
from core.wrapper.progress import ProgressFile, Stamp


class RestoreWatch(Model):
    """What the watch saw; returned in the start step's output as ``verified``."""

    model_config = ConfigDict(extra="forbid")
    settle_s: float
    alive: bool
    state: str
    checkpoint_progress: float | None = None
    first_progress: float | None = None
    problem: str | None = Field(default=None, description="why the restore is not accepted")


def progress_value(report: dict[str, Any] | None) -> float | None:
    """The comparable number of a progress report: its ``step``, else ``done``."""
    if not report:
        return None
    for key in ("step", "done"):
        value = report.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _fmt(value: float | None) -> str:
    if value is None:
        return "none"
    return str(int(value)) if value.is_integer() else f"{value:g}"


def watch_restored(
    settings: Settings,
    registry: WorkloadRegistry,
    store: CheckpointStore,
    name: str,
    *,
    checkpoint_id: str,
    mark: Stamp | None,
) -> RestoreWatch:
    """Watch the restored workload ``name`` for ``settings.verify.settle_s`` seconds;
    ``mark``: its progress file's stamp before the restore (a later report is the restored
    program's).

    Returns what was seen when the restore is accepted; raises CheckpointError (code
    ``restore-unverified``) naming what was seen otherwise. The caller stops a workload that
    is still running when this raises; the checkpoint is never touched here."""
    settle_s = settings.verify.settle_s
    try:
        recorded = progress_value(store.get(checkpoint_id).extra.get("progress"))
    except errors.ClawpointError:
        recorded = None
    progress = ProgressFile.of(settings, name)
    first: float | None = None
    seen_report = False
    rec: WorkloadRecord = registry.require(name)

    def problem_now() -> str | None:
        nonlocal rec, first, seen_report
        rec = registry.require(name)
        if not seen_report:
            report = progress.report_since(mark)
            if report is not None:
                seen_report, first = True, progress_value(report)
        return _problem(settings, rec, recorded=recorded, first=first)

    problem = poll_until(problem_now, timeout_s=settle_s, every_s=0.05)
    seen = RestoreWatch(
        settle_s=settle_s,
        alive=problem is None,
        state=rec.state.value,
        checkpoint_progress=recorded,
        first_progress=first,
        problem=problem,
    )
    if problem is None:
        return seen
    raise errors.CheckpointError(
        f"{NAME}:{name} was restored from {checkpoint_id} but {problem} within "
        f"{settle_s:g} s of the restore; not reporting it done",
        hint=(
            "the checkpoint is untouched: read the workload's log (CLAWPOINT_HOME/logs), then "
            f"'clawpoint failover {NAME}:{name}' or resume it once the cause is fixed; if "
            f"this checkpoint is the cause, restore an older one ('clawpoint checkpoints "
            f"{NAME}:{name}', then 'clawpoint restore ID'); "
            "[verify] settle_s sets how long a restore is watched"
        ),
        code="restore-unverified",
        details=seen.model_dump(mode="json"),
    )


def _problem(
    settings: Settings, rec: WorkloadRecord, *, recorded: float | None, first: float | None
) -> str | None:
    if rec.state is WorkloadState.COMPLETED and rec.exit_status == "exit 0":
        return None  # it finished: its own verdict is success
    if rec.state not in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING):
        status = f" ({rec.exit_status})" if rec.exit_status else ""
        return f"it did not stay up: it is {rec.state.value}{status}"
    if not _wrapper_alive(settings, rec):
        return "its wrapper is gone"
    if recorded is not None and first is not None and first < recorded:
        return (
            f"its first progress after the restore ({_fmt(first)}) is behind the "
            f"checkpoint's ({_fmt(recorded)})"
        )
    return None
