"""The source side of a handoff: the stop checkpoint that gives a live workload to the
standby wrapper waiting for it (``core.wrapper.handoff`` has the protocol and its ordering).

The pause holds only the dump. The images are *staged* (dumped, not yet hashed or synced);
the order goes out while the tree is still frozen; then the tree is ended and reaped (one
copy), the last registry row written and the workload's lock released for the standby,
which restores the staged images at once; the checkpoint is hashed, synced and published
after that, while the workload already runs on the target.

A checkpoint that carries the workload's files (``core.checkpoint.files``) is staged the
same way: the copies go with the images, and the standby puts nothing back, since the
files are as the frozen tree left them (nothing of the workload ran since); the copies are
for a later restore from this checkpoint (resume, failover), which puts them back.

Whatever fails, the workload is never lost: no standby (or one this workload may not use),
and the checkpoint is published and the tree ended as for a plain stop; a publish that fails
lets the frozen tree run on (:meth:`HandoffSource._publish_and_end`). The answer says "sent"
or why not, and the migrate's start step then launches a wrapper the plain way.

Across nodes (``to["remote"]``, the standby of a Slurm job or a pod:
``core.wrapper.handoff_remote``) the order goes by TCP, signed, and only after the payload
is ended and reaped. There the files as the frozen tree left them are on the source's node,
not the standby's: a checkpoint that carries the workload's files is published first (in
the pause) and the order names it, so that the standby's restore puts them back.

Limits: the local standby must be this workload's (its socket's name says so).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core import errors, logs
from core.checkpoint import engine, ops
from core.config import Settings
from core.model import CheckpointInfo, WorkloadState
from core.polling import poll_until
from core.specs import RunSpec
from core.state.workloads import WorkloadRegistry
from core.store.store import CheckpointStore
from core.wrapper import connection_hold, fence, handoff, handoff_remote, payload
from core.wrapper.faults import die_if
from core.wrapper.progress import ProgressFile

log = logs.get_logger(__name__)

TAKEOVER_WAIT_S = 15.0  # the standby's restore, before the images are hashed
REAP_WAIT_S = 10.0


class HandoffSource:
    def __init__(
        self,
        settings: Settings,
        spec: RunSpec,
        store: CheckpointStore,
        engine_: engine.Engine,
        registry: WorkloadRegistry,
        release_lock: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.spec = spec
        self.name = spec.name
        self.store = store
        self.engine = engine_
        self.registry = registry
        self.release_lock = release_lock
        # Set once the standby has the workload: its registry row is the new wrapper's.
        self.handed_off = False
        # New connections queued while the last handoff ran (None: no hold was made).
        self.connections_held: int | None = None
        self._hold: connection_hold.Hold | None = None

    def hand_over(
        self,
        p: payload.Payload,
        to: dict[str, Any],
        *,
        pipes: list[int],
        progress: dict[str, object] | None,
        abort: threading.Event,
    ) -> tuple[CheckpointInfo, str]:
        """Stop-checkpoint ``p`` and give it to the standby at ``to["socket"]`` (restoring
        it the way ``to["mode"]`` says). Returns the published checkpoint and "sent" or why
        not (``pipes``: the inodes of the payload's stdout/stderr; ``progress``: its last
        report, recorded in the checkpoint; ``abort``: set to give the dump up)."""
        remote = to.get("remote")
        if isinstance(remote, handoff_remote.Rendezvous):
            return self._hand_over_remote(p, remote, pipes, progress, abort)
        mode = to.get("mode") or "stop-and-copy"
        path, refused = self._standby_socket(to)
        self._hold = self._hold_connections(p) if path is not None else None
        try:
            return self._hand_over(p, path, refused, mode, pipes, progress, abort)
        finally:
            self._release_connections()  # whatever failed (idempotent)

    def standby_for(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """Whom a stop hands over to, as ``hand_over`` takes it: the standby on another node
        the request names by its token (a pod's move: ``{"remote": rendezvous}``, if it
        waits), the local standby the request names (``handoff``), else, for a SIGUSR2
        (``may_hand_over``), a standby waiting on another node for this Slurm job, else None."""
        named = request.get("handoff")
        if isinstance(named, dict) and "token" in named:
            r = handoff_remote.find_named(self.store.root, self.name, str(named["token"]))
            return {"remote": r} if r is not None else None
        if named is not None or not request.get("may_hand_over"):
            return named
        job = os.environ.get("SLURM_JOB_ID", "")
        if not job.isdigit():
            return None
        r = handoff_remote.find_waiting(self.store.root, self.name, job)
        return {"remote": r} if r is not None else None

    def _release_connections(self) -> None:
        """The held connections go on to whoever listens now: the restored server once the
        standby has taken over (the caller waits for that first)."""
        if self._hold is not None:
            self.connections_held = self._hold.release()
            self._hold = None

    def _hold_connections(self, p: payload.Payload) -> connection_hold.Hold | None:
        """Queue new connections to the workload's ports for the move, where configured
        and possible (``core.wrapper.connection_hold``); None otherwise, with why logged."""
        if not self.settings.migration.hold_connections:
            return None
        try:
            frozen = functools.partial(connection_hold.stopped, p.pid)  # CRIU seized it
            key = connection_hold.hold_key(self.name, self.settings.home)
            hold, said = connection_hold.start(key, engine.tree(p.pid), frozen)
        except OSError as exc:  # the tree ended meanwhile: the dump will say so
            hold, said = None, f"not held: {exc}"
        log.info("wrapper.connection_hold", workload=self.name, said=said)
        return hold

    def _hand_over(
        self,
        p: payload.Payload,
        path: Path | None,
        refused: str | None,
        mode: str,
        pipes: list[int],
        progress: dict[str, object] | None,
        abort: threading.Event,
    ) -> tuple[CheckpointInfo, str]:
        staged = ops.stage(
            self.store, self.engine, lineage=self.name, pid=p.pid, node=self.spec.node,
            cfg=self.settings.checkpoint, pipes=pipes,
            extra={"command": self.spec.command, "progress": progress},
            staging_dir=self.settings.migration.staging_dir, abort=abort,
            side_files=ProgressFile.of(self.settings, self.name).side_files(),
        )  # fmt: skip
        said = refused
        if path is not None:
            order = handoff.HandoffOrder(
                checkpoint=staged.pending.id, mode=mode, staged=str(staged.pending.images_dir),
                pipes=pipes,
            )  # fmt: skip
            try:
                handoff.send(path, order)
            except errors.ClawpointError as exc:
                said = f"not sent: {exc.message}"
        if said is not None:
            log.warning("wrapper.handoff_not_sent", workload=self.name, why=said)
            return self._publish_and_end(p, staged), said
        self.engine.end(p.pid, p.exited)
        if not p.exited.wait(REAP_WAIT_S):  # the standby waits for our lock meanwhile
            log.error("wrapper.payload_not_reaped", workload=self.name, pid=p.pid)
        self._leave(staged.pending.id, f"handed over to a standby ({mode})")
        self.handed_off = True
        log.info(
            "wrapper.handoff_sent", workload=self.name, checkpoint=staged.pending.id, mode=mode
        )
        die_if("CLAWPOINT_TEST_DIE_AFTER_HANDOFF")  # the fault matrix's source death
        self._await_takeover(TAKEOVER_WAIT_S)
        self._release_connections()  # before publishing: the server listens again
        return ops.publish_staged(self.store, staged), "sent"

    def _hand_over_remote(
        self,
        p: payload.Payload,
        r: handoff_remote.Rendezvous,
        pipes: list[int],
        progress: dict[str, object] | None,
        abort: threading.Event,
    ) -> tuple[CheckpointInfo, str]:
        """Hand over to a standby on another node (``core.wrapper.handoff_remote``): the
        images staged in the store (the one place both nodes see), the payload ended and
        reaped *before* the order goes (no lock orders two nodes), the checkpoint published
        after the standby's answer (its restore is the pause; hashing would slow it)."""
        staged = ops.stage(
            self.store, self.engine, lineage=self.name, pid=p.pid, node=self.spec.node,
            cfg=self.settings.checkpoint, pipes=pipes,
            extra={"command": self.spec.command, "progress": progress},
            staging_dir="", abort=abort,
            side_files=ProgressFile.of(self.settings, self.name).side_files(),
        )  # fmt: skip
        published: CheckpointInfo | None = None
        if staged.carries_files:
            # The other node's copies of the workload's files are not the frozen tree's: only
            # the restore of a published checkpoint puts them back (``files.put_back``, their
            # digests checked), so the standby gets that one; the publish is in the pause.
            published = self._publish_frozen(p, staged)
        try:
            standby = handoff_remote.RemoteStandby(r)
        except errors.ClawpointError as exc:
            log.warning("wrapper.handoff_not_sent", workload=self.name, why=exc.message)
            if published is not None:
                self.engine.end(p.pid, p.exited)
                return published, f"not sent: {exc.message}"
            return self._publish_and_end(p, staged), f"not sent: {exc.message}"
        self.engine.end(p.pid, p.exited)
        if not p.exited.wait(REAP_WAIT_S):  # not provably gone: no second copy anywhere
            standby.close()
            log.error("wrapper.payload_not_reaped", workload=self.name, pid=p.pid)
            info = published or ops.publish_staged(self.store, staged)
            return info, "not sent: the payload was not reaped"
        self._leave(staged.pending.id, f"handed over to a standby on {r.node or r.host}")
        images = None if published is not None else str(staged.pending.images_dir)
        order = handoff.HandoffOrder(checkpoint=staged.pending.id, staged=images, pipes=pipes)
        try:
            standby.send(order)
        except errors.ClawpointError as exc:  # ended, not handed over: publish for a restart
            log.warning("wrapper.handoff_not_sent", workload=self.name, why=exc.message)
            return published or ops.publish_staged(self.store, staged), f"not sent: {exc.message}"
        self.handed_off = True
        log.info("wrapper.handoff_sent", workload=self.name, checkpoint=staged.pending.id,
                 to=f"{r.host}:{r.port}", job=r.job)  # fmt: skip
        die_if("CLAWPOINT_TEST_DIE_AFTER_HANDOFF")  # the fault matrix's source death
        taken, why = standby.answer(TAKEOVER_WAIT_S)
        info = published or ops.publish_staged(self.store, staged)
        if not taken:
            log.warning("wrapper.handoff_not_taken", workload=self.name, why=why)
            return info, f"sent, not taken: {why}"
        return info, "sent"

    def _publish_and_end(self, p: payload.Payload, staged: ops.Staged) -> CheckpointInfo:
        """Publish the staged checkpoint, else let the frozen tree run on (never lose the
        workload: the failure is raised); then end the tree."""
        info = self._publish_frozen(p, staged)
        self.engine.end(p.pid, p.exited)
        return info

    def _publish_frozen(self, p: payload.Payload, staged: ops.Staged) -> CheckpointInfo:
        """Publish the staged checkpoint while the tree is frozen; if that fails the tree
        runs on (the dump froze it) and the failure is raised."""
        try:
            return ops.publish_staged(self.store, staged)
        except BaseException:
            self.engine.resume(p.pid)
            raise

    def _leave(self, checkpoint_id: str, message: str) -> None:
        """Our last registry row, then the lock released for the standby to take."""
        self.registry.update(
            self.name, state=WorkloadState.STOPPED, last_checkpoint=checkpoint_id, message=message
        )
        self.release_lock()

    def _standby_socket(self, to: dict[str, Any]) -> tuple[Path | None, str | None]:
        """(path, None) for a standby of this workload, or (None, why not)."""
        path = self.settings.run_dir / os.path.basename(str(to.get("socket", "")))
        if not path.name.startswith(f"{self.name}.standby-"):
            return None, f"not sent: {path.name} is no standby of {self.name}"
        return path, None

    def _await_takeover(self, timeout_s: float) -> None:
        """Let the standby restore before hashing the images: on a machine with few cores
        the hashing would slow the restore, which is part of the workload's pause."""
        holder_seen = False

        def taken() -> bool:
            nonlocal holder_seen
            row = self.registry.get(self.name)
            if row is not None and row.wrapper_pid not in (None, os.getpid()):
                return True
            holder = fence.lock_holder(self.settings, self.name)
            if holder is not None and holder != os.getpid():
                holder_seen = True
            elif holder_seen:
                return True  # the standby took the lock and died: publish for whoever restores next
            return False

        poll_until(taken, timeout_s=timeout_s, every_s=0.005)
