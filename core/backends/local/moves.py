"""How a live local workload moves with a short pause: the handoff, its mode, its report.

A migrate plan (``planning``) is ``standby`` -> ``checkpoint`` (stop, hand over) -> ``start``:

1. ``standby`` starts the target's wrapper before anything is paused
   (``core.wrapper.handoff``): its interpreter, imports and engine check are done by then;
2. the source wrapper freezes and dumps the workload, publishes the checkpoint (durable
   before the source is gone), and hands the workload to the standby, which restores it;
3. ``start`` confirms it: the wrapper on the target runs that very checkpoint, the restore
   watch passes, and the pause is reported (:func:`handoff_report`).

Any part that fails falls back to the plain path (the start step launches a wrapper).

The restore *mode* (:func:`choose_mode`, ``[migration]``): post-copy restores the tree
without its memory and faults pages in from the checkpoint after it runs (CRIU lazy pages,
``core.checkpoint.lazy_pages``); stop-and-copy copies all memory first. Pre-copy (iterative
pre-dumps with dirty-page tracking) needs soft-dirty tracking in the kernel; it is detected
and, where present, still not used (not implemented here): the reason says so.

Limits: one host; the pause is measured by CRIU (frozen and restore times) and, where the
workload reports progress with a ``ts``, by the workload's own clock.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core import errors, logs
from core.checkpoint import engine as engines
from core.checkpoint import lazy_pages
from core.config import Settings
from core.model import CheckpointInfo
from core.state.workloads import WorkloadRecord
from core.timings import DumpTimings, HandoffTimes, PauseReport, RestoreTimings
from core.wrapper.control import ControlClient

log = logs.get_logger(__name__)


def choose_mode(
    settings: Settings, engine: str, size_bytes: int | None, *, user_namespace: bool = False
) -> tuple[str, str]:
    """(mode, why) for moving a workload of ``engine`` whose state is about ``size_bytes``
    (its last image, else its resident memory); ``user_namespace``: root's workload in a
    user namespace of its own (``run --user-namespace``)."""
    cfg = settings.migration
    criu_path = settings.checkpoint.criu_path
    pre = (
        "pre-copy not implemented (the kernel tracks dirty pages)"
        if lazy_pages.dirty_tracking(criu_path)
        else "no pre-copy: the kernel tracks no dirty pages"
    )
    if not engines.get(engine).restores_process:
        return "stop-and-copy", f"the {engine} engine restores by restarting its command"
    if cfg.mode == "stop-and-copy":
        return "stop-and-copy", "[migration] mode = stop-and-copy"
    if not lazy_pages.supported(criu_path):
        return "stop-and-copy", f"CRIU cannot restore lazily here (no uffd-noncoop); {pre}"
    if user_namespace:  # CRIU restores it inside one: userfaultfd needs the initial one's
        return "stop-and-copy", f"CRIU cannot restore lazily in its user namespace; {pre}"
    if cfg.mode == "post-copy":
        return "post-copy", "[migration] mode = post-copy"
    if size_bytes is None:
        return "stop-and-copy", f"size unknown; {pre}"
    size_mib = size_bytes / 2**20
    if size_mib >= cfg.post_copy_min_mib:
        return "post-copy", f"state {size_mib:.0f} MiB >= {cfg.post_copy_min_mib} MiB; {pre}"
    return "stop-and-copy", f"state {size_mib:.0f} MiB < {cfg.post_copy_min_mib} MiB; {pre}"


def _point(report: Any) -> tuple[float, float] | None:
    """(step, ts) of a workload's progress report, when it has both."""
    if not isinstance(report, dict):
        return None
    step, ts = report.get("step"), report.get("ts")
    if isinstance(step, int | float) and isinstance(ts, int | float):
        return float(step), float(ts)
    return None


def is_wrapper(pid: int) -> bool:
    """Is ``pid`` a clawpoint wrapper (``python -m core.wrapper``)?"""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"core.wrapper" in argv[1:3]


def restore_status(rec: WorkloadRecord) -> dict[str, Any] | None:
    """The ``restore`` part of the status of the wrapper running ``rec`` (None: no answer)."""
    if not rec.socket:
        return None
    try:
        restore = ControlClient(Path(rec.socket)).status().get("restore")
    except errors.ClawpointError as exc:
        log.warning("local.wrapper_status_unavailable", workload=rec.name, error=exc.message)
        return None
    return restore if isinstance(restore, dict) else None


def handed_over(restore: dict[str, Any] | None, checkpoint_id: str) -> bool:
    """Did a handoff start this wrapper, from ``checkpoint_id`` (bare id)?"""
    return bool(
        restore
        and isinstance(restore.get("handoff"), dict)
        and restore.get("from") == checkpoint_id
    )


def handoff_report(restore: dict[str, Any], ckpt: CheckpointInfo) -> PauseReport:
    """The pause of a handoff that restored ``ckpt``: CRIU's figures, the handoff's, and
    where the workload reports progress with a ``ts``, its own view."""
    return PauseReport.measured(
        DumpTimings.of(ckpt),
        RestoreTimings.model_validate(restore.get("timings") or {}),
        HandoffTimes.model_validate(restore.get("handoff") or {}),
        before=_point(ckpt.extra.get("progress")),
        after=_point(restore.get("first_progress")),
    )
