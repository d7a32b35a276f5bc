"""How long a workload is paused by a move: the timing models and the one pause estimator.

The figures come from three producers, each writing its own keys: the engines and the store
into a checkpoint's ``timings`` (``core.checkpoint.criu``: ``criu_dump_s``, ``frozen_s``;
``core.checkpoint.ops``: ``total_s``), the wrapper that restored a handed-over workload into
its status (``core.wrapper.handoff_target``: the restore's timings and the handoff's times).
This module reads those keys in one place (``DumpTimings``, ``RestoreTimings``,
``HandoffTimes``), builds the report a handoff's start step returns (``PauseReport``), and
estimates the pause a plan will take (``estimate_pause``) for the local backend's plans and
the service's insights alike. Everything above reads fields; a change to how the pause is
measured changes this module and the producers above, nothing else.

Limits: estimates are orders of magnitude (about 1 GB/s each way when nothing was measured);
a report holds what was measured and leaves out what was not.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from core.model import CheckpointInfo
from core.schema_base import Model

# Bytes of state dumped or restored per second when no dump was timed (measured order of
# magnitude on one host).
BYTES_PER_S = 1e9
# A plain move's start-up on top of dump and restore: a new wrapper, its imports, CRIU's.
RESTART_S = 0.5
# A handoff's own share (the standby is up already) and a post-copy restore's (memory
# faults in after the workload runs again): docs/migration.md.
HANDOFF_S = 0.1
POST_COPY_RESTORE_S = 0.1


class _Read(Model):
    """A view of a producer's dict: known keys typed, the rest ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class DumpTimings(_Read):
    """What a checkpoint's dump took (its ``timings``)."""

    frozen_s: float | None = None  # the tree frozen, as CRIU measured it
    criu_dump_s: float | None = None  # CRIU's dump command, wall time
    total_s: float | None = None  # the whole checkpoint: dump, files, publish
    publish_s: float | None = None  # the images hashed, synced and published (the store)
    cooperative_save_s: float | None = None  # the program's own save (cooperative engine)

    @classmethod
    def of(cls, ckpt: CheckpointInfo) -> DumpTimings:
        return cls.model_validate(ckpt.timings)

    @property
    def dump_s(self) -> float | None:
        """The save itself, by whichever engine made it (a stored manifest holds no
        ``total_s``: it cannot contain its own total, which only its caller is told)."""
        return self.criu_dump_s if self.criu_dump_s is not None else self.cooperative_save_s


class RestoreTimings(_Read):
    """What a restore took, as the restoring wrapper reports it (``Restored.timings``)."""

    wall_s: float | None = Field(default=None, alias="criu_restore_s")  # CRIU's command, wall
    criu_s: float | None = Field(default=None, alias="restore_restore_s")  # CRIU's own figure
    resumed_at: float | None = None  # epoch seconds the workload ran again


class HandoffTimes(_Read):
    """The handoff part of a restoring wrapper's status (``core.wrapper.handoff_target``)."""

    mode: str | None = None
    staged: bool | None = None
    sent_at: float | None = None  # the source sent the order (epoch seconds)
    received_at: float | None = None  # the target received it
    resumed_at: float | None = None  # the workload ran again
    marks: Any = None  # the target's own marks along the takeover


class WorkloadGap(Model):
    """The workload's own view: its progress reports just before the freeze and just after."""

    steps: float
    seconds: float


class PauseReport(Model):
    """The pause of a handoff, as the start step returns it. Absent figures are left out
    (the first five are always there, possibly null), as the step output always had them."""

    mode: str | None = None
    # Restored from the images before they were hashed and synced (then published and
    # verified by the start step); else from the published checkpoint.
    staged: bool = False
    criu_frozen_s: float | None = None  # the dump, as CRIU measured it
    criu_restore_s: float | None = None
    restore_wall_s: float | None = None
    handoff_s: float | None = None  # order sent to order received
    takeover_s: float | None = None  # the target's part of the pause
    takeover_marks: Any = None
    paused_s: float | None = None  # the workload's last report before the freeze to running again
    workload_gap: WorkloadGap | None = None

    @model_serializer(mode="wrap")
    def _set_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}

    @classmethod
    def measured(
        cls,
        dump: DumpTimings,
        restore: RestoreTimings,
        hand: HandoffTimes,
        before: tuple[float, float] | None,
        after: tuple[float, float] | None,
    ) -> PauseReport:
        """The report from the figures measured: ``before``/``after`` are the workload's
        (step, ts) progress reports around the pause, when it writes them."""
        report = cls(
            mode=hand.mode,
            staged=bool(hand.staged),
            criu_frozen_s=dump.frozen_s,
            criu_restore_s=restore.criu_s,
            restore_wall_s=restore.wall_s,
        )
        sent, received, resumed = hand.sent_at, hand.received_at, hand.resumed_at
        if sent is not None and received is not None:
            report.handoff_s = round(received - sent, 4)
        if resumed is not None and received is not None:
            report.takeover_s = round(resumed - received, 4)
            report.takeover_marks = hand.marks
        if resumed is not None and before is not None:
            report.paused_s = round(resumed - before[1], 4)
        if before is not None and after is not None:
            report.workload_gap = WorkloadGap(
                steps=after[0] - before[0], seconds=round(after[1] - before[1], 4)
            )
        return report


def estimate_pause(
    last: CheckpointInfo | None,
    *,
    handoff_mode: str | None = None,
    resident_bytes: int | None = None,
) -> float | None:
    """Seconds a move pauses the workload: its dump plus its restore, and start-up.

    From ``last`` (its newest checkpoint) when there is one, else from ``resident_bytes``
    (its memory) at ``BYTES_PER_S`` each way; None when neither is known. A handoff in
    ``handoff_mode`` pauses for the dump as CRIU froze it, the restore (``POST_COPY_RESTORE_S``
    for post-copy) and ``HANDOFF_S``; a plain move for the whole checkpoint twice and
    ``RESTART_S``."""
    if last is not None:
        t = DumpTimings.of(last)
        size_s = last.size_bytes / BYTES_PER_S
        if handoff_mode is not None:
            dump = t.frozen_s or t.criu_dump_s or size_s
            restore = POST_COPY_RESTORE_S if handoff_mode == "post-copy" else dump
            return round(dump + restore + HANDOFF_S, 2)
        return round(2 * (t.total_s or size_s) + RESTART_S, 2)
    if resident_bytes:
        return round(2 * resident_bytes / BYTES_PER_S + RESTART_S, 2)
    return None
