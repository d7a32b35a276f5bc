"""The target side of a handoff: a standby wrapper that waits for its order, then restores
exactly the checkpoint it names (``core.wrapper.handoff`` has the protocol and its ordering).

Everything that can be done before the order is done before it (:meth:`HandoffTarget.wait`:
the engine check, the store's cleanup, the state database opened), so that it is not part of
the workload's pause. An order for *staged* images (not yet published) hard-links them at
once (:meth:`HandoffTarget.take`), since the source publishes, and so renames, them soon;
if they are gone already, the published checkpoint is restored instead. The restore itself
is the supervisor's, except a staged one (:meth:`HandoffTarget.restore_staged`).

For the start step's report (``core.backends.local.moves.handoff_report``) the target notes
the moments of its takeover (:meth:`HandoffTarget.mark`), the handoff's clocks, and the
restored program's first progress report (:meth:`HandoffTarget.note`).

A standby for another node (a Slurm or a pod's move: ``spec.standby_for`` names the source)
waits on TCP instead (``core.wrapper.handoff_remote``) and answers its source once the
restore is done (:meth:`HandoffTarget.answering`).

Limits: the links are removed once nothing reads them (after the last lazy page
of a post-copy restore).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from core import errors, logs
from core.checkpoint import engine, lazy_pages, ops
from core.config import Settings
from core.model import CheckpointInfo, utcnow
from core.polling import poll_until
from core.specs import RunSpec
from core.state.workloads import WorkloadRegistry
from core.store import staging
from core.store.disk import parse_checkpoint_id
from core.store.store import CheckpointStore
from core.wrapper import fence, handoff, handoff_remote
from core.wrapper.progress import ProgressFile, Stamp

log = logs.get_logger(__name__)

FIRST_PROGRESS_WAIT_S = 30.0


class HandoffTarget:
    def __init__(
        self,
        settings: Settings,
        spec: RunSpec,
        store: CheckpointStore,
        engine_: engine.Engine,
        progress: ProgressFile,
    ) -> None:
        self.settings = settings
        self.spec = spec
        self.name = spec.name
        self.store = store
        self.engine = engine_
        self.progress = progress
        # Set on a standby that got its order: restore that checkpoint the way it says.
        self.order: handoff.HandoffOrder | None = None
        self._received_at: float | None = None
        self._links: Path | None = None
        self._links_slot: staging.Slot | None = None  # when they are in the tmpfs area
        self._marks: dict[str, float] = {}
        self._remote: handoff_remote.TcpStandby | None = None  # a standby for another node
        # A Slurm rerun of a standby job that had taken the workload over: restore it.
        self.rerun = False

    def wait(self, registry: WorkloadRegistry) -> handoff.HandoffOrder | None:
        """The standby's wait: its order, or None when none came within its timeout."""
        spec = self.spec
        assert spec.standby is not None
        self.engine.require(self.settings.checkpoint)  # ``criu check`` (cached): not in the pause
        self.store.cleanup_partial()
        registry.get(spec.name)  # opens the state database
        if spec.standby_for is not None and handoff_remote.is_rerun():
            # Slurm runs this job again: a standby that took over is the workload's job now
            # and restores it as any wrapped job does; one that never did restores nothing.
            self.rerun = handoff_remote.took_over(self.store.root, self.name)
            if self.rerun:
                log.info("wrapper.standby_rerun", workload=self.name, restores=True)
            else:
                log.warning("wrapper.standby_rerun", workload=self.name, restores=False,
                            why="requeued before any order: its source may still run it")  # fmt: skip
            return None
        if spec.standby_for is not None:
            return self._wait_remote(spec.standby, spec.standby_for)
        standby = handoff.Standby(handoff.standby_path(self.settings, spec.name, spec.standby))
        log.info(
            "wrapper.standby", workload=spec.name, node=spec.node, timeout_s=spec.standby_timeout_s
        )
        try:
            order = standby.wait(spec.standby_timeout_s)
        finally:
            standby.close()
        if order is None:
            log.info("wrapper.standby_expired", workload=spec.name)
        return order

    def _wait_remote(self, token: str, source_job: str) -> handoff.HandoffOrder | None:
        """A standby for a wrapper on another node (``handoff_remote``): listen on TCP,
        announce it in the store, take one signed order."""
        node = os.environ.get("SLURMD_NODENAME") or self.spec.node
        self._remote = handoff_remote.TcpStandby(
            self.store.root, self.name, token, source_job, node, host=self.spec.standby_host
        )
        r = self._remote.rendezvous
        log.info("wrapper.standby", workload=self.name, node=node, address=f"{r.host}:{r.port}",
                 source_job=source_job, timeout_s=self.spec.standby_timeout_s)  # fmt: skip
        order = self._remote.wait(self.spec.standby_timeout_s)
        if order is None:
            self._remote.close()
            self._remote = None
            log.info("wrapper.standby_expired", workload=self.name, state="no order")
        return order

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Around the start: a standby for another node tells its source how its restore
        went once it is done (the source publishes after that), or that it failed."""
        try:
            yield
        except BaseException as exc:
            self._answer(False, str(exc) or type(exc).__name__)
            raise
        self._answer(True)

    def _answer(self, taken: bool, why: str = "") -> None:
        if self._remote is not None:
            self._remote.answer(taken, why)
            self._remote.close()
            self._remote = None

    def take(self, order: handoff.HandoffOrder) -> handoff.HandoffOrder:
        """The order arrived: link its staged images at once (if they are gone already,
        the order becomes one for the published checkpoint). Returns the order kept."""
        self._received_at = time.time()
        if order.staged is not None:
            try:
                self._links = self._link_staged(Path(order.staged))
            except (OSError, errors.ClawpointError) as exc:
                log.warning("wrapper.staged_images_gone", workload=self.name, error=str(exc))
                order = order.model_copy(update={"staged": None})
        self.order = order
        return order

    def mark(self, what: str) -> None:
        """A moment of the takeover (seconds since the order), for its report."""
        if self._received_at is not None:
            self._marks[what] = round(time.time() - self._received_at, 4)

    def _link_staged(self, staged: Path) -> Path:
        """Hard links to the staged images, beside them (the same filesystem): they survive
        the source's publish, or its abort. In the tmpfs area ``staging.link`` checks them
        (private to our uid, so nobody else wrote them); refused, they raise and the
        published checkpoint is restored instead."""
        root = self.store.root.resolve()
        if staging.contains(self.settings.migration.staging_dir, staged):
            self._links_slot = staging.link(
                self.settings.migration.staging_dir, staged, str(self.spec.standby)
            )
            return self._links_slot.path
        if staged.resolve().is_relative_to(root):
            links = root / ".staged" / f"{self.name}-{self.spec.standby}"
        else:
            raise errors.InvalidInput(f"staged images {staged} are neither in the store nor staged")
        shutil.rmtree(links, ignore_errors=True)
        links.mkdir(parents=True)
        for f in staged.iterdir():
            if f.is_file():
                os.link(f, links / f.name)
        return links

    def restore_staged(
        self, fds: list[int], *, join: Callable[[], None] | None = None
    ) -> tuple[engine.Restored, dict[str, Any]]:
        """Restore the order's staged images (their links), the payload's pipes on ``fds``
        (stdout, stderr), into the cgroup ``join`` enters (``cgroup_limits``). Returns the
        restored tree and the restore's report."""
        order = self.order
        assert order is not None and self._links is not None
        lineage, seq = parse_checkpoint_id(order.checkpoint)
        info = CheckpointInfo(id=order.checkpoint, lineage=lineage, seq=seq,
                              engine=self.spec.engine, node=self.spec.node, created_at=utcnow(),
                              size_bytes=0, extra={"pipes": order.pipes})  # fmt: skip
        mark = self.progress.stamp()
        self.mark("restoring")
        lazy = order.mode == "post-copy"
        restored = ops.restore_staged(
            self.engine, self._links, work_dir=fence.restore_dir(self.settings, self.name),
            cfg=self.settings.checkpoint, info=info, lazy=lazy, join=join,
            inherit_pipes={ino: fd for ino, fd in zip(order.pipes, fds, strict=False)},
        )  # fmt: skip
        assert restored.pid is not None
        report = self.note(restored, mark)
        links, slot, pid = self._links, self._links_slot, restored.pid

        def drop_links() -> None:  # once nothing reads them: after the last lazy page
            if lazy:
                try:
                    lazy_pages.wait_done(pid)
                except errors.ClawpointError as exc:
                    log.warning("wrapper.lazy_restore_failed", error=exc.message)
            if slot is not None:
                slot.remove()
            else:
                shutil.rmtree(links, ignore_errors=True)

        threading.Thread(target=drop_links, daemon=True, name="staged-links").start()
        return restored, report

    def note(self, restored: engine.Restored, mark: Stamp | None) -> dict[str, Any]:
        """The restore's report (the wrapper's status ``restore``): where from, its timings
        and the handoff's; the restored program's first progress report is added to it as
        soon as one comes (``mark``: the progress file's stamp before the restore)."""
        order = self.order
        assert order is not None
        report: dict[str, Any] = {
            "from": order.checkpoint,
            "timings": restored.timings,
            "progress_mark": mark,
        }
        threading.Thread(
            target=self._note_first_progress, args=(report, mark), daemon=True,
            name="first-progress",
        ).start()  # fmt: skip
        report["handoff"] = {
            "mode": order.mode,
            "staged": order.staged is not None,
            "sent_at": order.sent_at,
            "received_at": self._received_at,
            "resumed_at": restored.timings.get("resumed_at"),
            "marks": self._marks,
        }
        return report

    def _note_first_progress(self, report: dict[str, Any], mark: Stamp | None) -> None:
        """Record the restored program's first progress report (its own view of the pause,
        with the report the checkpoint holds); polled finely, as later reports replace it."""
        first = poll_until(
            lambda: self.progress.report_since(mark),
            timeout_s=FIRST_PROGRESS_WAIT_S,
            every_s=0.002,
        )
        if first is not None:
            report["first_progress"] = first
