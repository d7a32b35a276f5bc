"""The local backend: workloads under the wrapper on this machine, placed on virtual nodes.

Virtual nodes come from configuration (name, price, spot flag, labels); their runtime state
(schedulable, health) lives in the ``local_nodes`` table. A workload runs under
``clawpoint run`` (core.wrapper); moving it to another node means checkpointing it and
starting a new wrapper that restores the checkpoint with that node recorded. All of that is
real (real CRIU images, real processes); only the node boundary is virtual, which is what
makes this backend useful for demos, tests and single-host deployments.

Steps (``run_step`` ops): ``checkpoint``, ``start``, ``fence``, ``terminate``,
``set_node``, ``delete_checkpoint``. Each is safe to re-check after a crash
(``recover_step``).
"""

from __future__ import annotations

import contextlib
import os
import signal
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from core import errors
from core.backends.base import ProgressFn, asked_by_agent
from core.backends.local import moves, verify
from core.backends.local.common import (
    _CAPABILITIES,
    _LIVE,
    NAME,
    _pid_alive,
    _wrapper_alive,
)
from core.backends.local.config import LocalBackendConfig, LocalNodeConfig
from core.backends.local.planning import LocalPlanning
from core.checkpoint import engine
from core.config import Settings
from core.model import (
    KILLED,
    Action,
    CheckpointInfo,
    NodeCondition,
    NodeConditionType,
    NodeHealth,
    NodeInfo,
    WorkloadInfo,
    WorkloadState,
    utcnow,
    validate_name,
)
from core.polling import poll_until
from core.signals.sla import Progress, read_progress
from core.state.db import Database
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.store import retention
from core.store.store import CheckpointStore, parse_checkpoint_id
from core.wrapper import fence as fencing
from core.wrapper import handoff
from core.wrapper.control import ControlClient
from core.wrapper.launch import launch_detached, launch_standby
from core.wrapper.progress import ProgressFile, Stamp
from core.wrapper.spec import RunSpec

log = structlog.get_logger("clawpoint.local")


class LocalBackend(LocalPlanning):
    name = NAME

    def __init__(
        self, settings: Settings, db: Database, config: LocalBackendConfig | None = None
    ) -> None:
        self.settings = settings
        self.config = config or LocalBackendConfig.model_validate(settings.backend_section(NAME))
        self.db = db
        self.registry = WorkloadRegistry(db, backend=NAME)
        self.store = CheckpointStore(
            settings.checkpoint_dir,
            keep=settings.store.keep_per_workload,
            keep_on_request=settings.store.keep_on_request,
            key=settings.store_key_path,
            group=settings.store.group,
        )
        self._node_config = {n.name: n for n in self.config.nodes}

    # ---------------------------------------------------------------- inventory
    def capabilities(self) -> frozenset[Action]:
        return _CAPABILITIES

    def _node_overrides(self) -> dict[str, dict[str, Any]]:
        with self.db.read() as conn:
            rows = conn.execute("SELECT * FROM local_nodes").fetchall()
        return {r["name"]: dict(r) for r in rows}

    def _node_info(
        self, cfg: LocalNodeConfig, overrides: dict[str, dict[str, Any]], placed: list[str]
    ) -> NodeInfo:
        o = overrides.get(cfg.name, {})
        health = NodeHealth(o.get("health", "healthy"))
        schedulable = bool(o.get("schedulable", 1))
        state = "down" if health is NodeHealth.DOWN else ("drained" if not schedulable else "up")
        reason = str(o.get("reason") or "")
        conditions = []
        if health is not NodeHealth.HEALTHY:  # set by a person or a test (set_node_state)
            kind = NodeConditionType.READY if health is NodeHealth.DOWN else NodeConditionType.OTHER
            conditions.append(
                NodeCondition(type=kind, ok=False, reason=reason, source=health.value)
            )
        if not schedulable:
            conditions.append(
                NodeCondition(type=NodeConditionType.SCHEDULABLE, ok=False, reason="drained")
            )
        return NodeInfo(
            conditions=conditions,
            id=f"{NAME}:{cfg.name}",
            backend=NAME,
            name=cfg.name,
            price_per_hour=cfg.price_per_hour,
            spot=cfg.spot,
            labels=cfg.labels,
            health=health,
            schedulable=schedulable,
            state=state,
            reason=o.get("reason", ""),
            cpus=os.cpu_count(),
            gpus=cfg.gpus,
            workloads=placed,
        )

    def nodes(self) -> list[NodeInfo]:
        overrides = self._node_overrides()
        workloads = self.workloads()
        return [
            self._node_info(
                cfg,
                overrides,
                [w.id for w in workloads if w.node == cfg.name and w.state in _LIVE],
            )
            for cfg in self.config.nodes
        ]

    def get_node(self, name: str) -> NodeInfo:
        validate_name(name, what="node name")
        for node in self.nodes():
            if node.name == name:
                return node
        raise errors.NotFound(
            f"no node {NAME}:{name}",
            hint=f"list nodes with {errors.step('list_nodes')}; local nodes come from the [local] "
            "config section",
        )

    # ---------------------------------------------------------------- optional capabilities
    def progress(self, name: str) -> Progress | None:
        """``ProgressSource``: the step the workload last wrote to its progress file."""
        return read_progress(self.settings.run_dir, name)

    def place(self, spec: RunSpec) -> RunSpec:
        """``Launcher``: the named node checked, or the least busy, cheapest healthy one."""
        if spec.node is not None:
            if spec.node not in {n.name for n in self.nodes()}:
                raise errors.NotFound(
                    f"no node {NAME}:{spec.node}",
                    hint=f"list local nodes with {errors.step('list_nodes', backend=NAME)}",
                )
            return spec
        nodes = [n for n in self.nodes() if n.schedulable and n.health is not NodeHealth.DOWN]
        if not nodes:
            raise errors.Conflict(
                "no schedulable local node", hint="undrain a node or add one to the [local] config"
            )
        nodes.sort(key=lambda n: (len(n.workloads), n.price_per_hour))
        return spec.model_copy(update={"node": nodes[0].name})

    def launch(self, spec: RunSpec, *, detach: bool) -> int | WorkloadInfo:
        """``Launcher``: start (or restore) under the wrapper; detached returns the workload,
        foreground runs it to the end in this process and returns the wrapper's exit code."""
        from core.wrapper import supervisor

        if detach:
            return launch_detached(self.settings, spec).to_info()
        return supervisor.run(self.settings, spec)

    def _refresh(self, record: WorkloadRecord) -> WorkloadRecord:
        """A RUNNING row whose wrapper is gone is a workload that died with it."""
        if record.state in (
            WorkloadState.RUNNING,
            WorkloadState.CHECKPOINTING,
        ) and not _wrapper_alive(self.settings, record):
            payload_alive = _pid_alive(record.pid)
            message = "wrapper gone" + (
                ", payload orphaned (fence before failover)" if payload_alive else ""
            )
            try:
                record = self.registry.update(
                    record.name, state=WorkloadState.FAILED, exit_status="lost", message=message
                )
            except errors.ClawpointError:
                pass
        return record

    def workloads(self) -> list[WorkloadInfo]:
        return [self._refresh(r).to_info() for r in self.registry.list()]

    def get_workload(self, name: str) -> WorkloadInfo:
        validate_name(name, what="workload name")
        return self._refresh(self.registry.require(name)).to_info()

    def checkpoints(self, workload: str | None = None) -> list[CheckpointInfo]:
        if workload is not None:
            validate_name(workload, what="workload name")
        return [self._qualify(c) for c in self.store.list(workload)]

    def _qualify(self, ckpt: CheckpointInfo) -> CheckpointInfo:
        parent = f"{NAME}:{ckpt.parent}" if ckpt.parent else None
        return ckpt.model_copy(update={"id": f"{NAME}:{ckpt.id}", "parent": parent})

    # ---------------------------------------------------------------- planning
    def run_step(self, op: str, args: dict[str, Any], progress: ProgressFn) -> dict[str, Any]:
        if op == "checkpoint":
            rec = self.registry.require(args["workload"])
            if not rec.socket or not _wrapper_alive(self.settings, rec):
                raise errors.Conflict(
                    f"the wrapper of {NAME}:{rec.name} is not running",
                    hint=f"check {errors.step('list_workloads')}; a dead workload is recovered with "
                    f"{errors.step('failover_workload', workload=f'{NAME}:{rec.name}')}",
                )
            client = ControlClient(Path(rec.socket))
            said: str | None = None
            if args["stop"] and args.get("handoff"):
                ckpt, said = client.stop_and_hand_over(
                    standby=str(args["handoff"]), mode=str(args.get("mode")), progress=progress
                )
            else:
                ckpt = client.checkpoint(
                    stop=bool(args["stop"]), progress=progress, by_agent=asked_by_agent()
                )
            if args["stop"]:
                self._wait_wrapper_exit(rec, only_pid=said == "sent")
            return {
                "checkpoint_id": ckpt.id.split(":", 1)[-1],
                "size_bytes": ckpt.size_bytes,
                "timings": ckpt.timings,
                "node": rec.node,
                **({"handoff": said} if said is not None else {}),
            }
        if op == "standby":
            return self._launch_standby(args["workload"], node=args["node"])
        if op == "start":
            if args.get("standby_pid"):
                self._await_standby(args["workload"], int(args["standby_pid"]), args.get("standby"))
            restore_from = args.get("restore_from")
            # Held from here until the wrapper reports the restore (it holds it too while it
            # reads it): retention never rotates out what this execution restores.
            with (
                retention.hold(self.store, restore_from, missing_ok=True)
                if restore_from
                else contextlib.nullcontext()
            ):
                return self._start(
                    args["workload"],
                    node=args["node"],
                    restore_from=restore_from,
                    fresh=bool(args.get("fresh")),
                )
        if op == "fence":
            rec = self.registry.require(args["workload"])
            killed = fencing.fence(self.settings, rec)
            return {"killed": killed}
        if op == "terminate":
            rec = self.registry.require(args["workload"])
            if rec.socket and _wrapper_alive(self.settings, rec):
                # Nothing is saved: a checkpoint under way gets a moment, then is given up
                # (a hung dump must not keep a person's kill waiting).
                ControlClient(Path(rec.socket)).terminate(timeout_s=30, dump_wait_s=5.0)
            fencing.fence(self.settings, rec)
            self.registry.update(
                rec.name,
                state=WorkloadState.FAILED,
                exit_status=KILLED,
                message="killed by clawpoint",
            )
            return {"terminated": True}
        if op == "set_node":
            self._set_node(
                args["node"],
                schedulable=bool(args["schedulable"]),
                reason=str(args.get("reason", "")),
            )
            return {"node": args["node"], "schedulable": bool(args["schedulable"])}
        if op == "delete_checkpoint":
            # Under the store's lock, as the newer checkpoints verify now: the plan's view of
            # them may be stale (Conflict, nothing deleted).
            cid = args["checkpoint_id"]
            live = self._protects(parse_checkpoint_id(cid)[0])
            retention.delete(self.store, cid, live=live, label=f"{NAME}:")
            return {"deleted": cid}
        if op in ("suspend_gpu", "resume_gpu"):
            return self._gpu_step(op, self.registry.require(args["workload"]))
        raise errors.OperationFailed(f"unknown local step {op!r}", hint="this is a bug; report it")

    def _gpu_step(self, op: str, rec: WorkloadRecord) -> dict[str, Any]:
        """GPU suspend/resume in place of the workload's processes (core.checkpoint.gpu)."""
        from core.checkpoint import gpu  # local import: loads the driver library on use

        if rec.pid is None or not _pid_alive(rec.pid):
            raise errors.Conflict(
                f"{NAME}:{rec.name} has no running process",
                hint=f"check {errors.step('list_workloads')}",
            )
        reports = gpu.suspend_tree(rec.pid) if op == "suspend_gpu" else gpu.resume_tree(rec.pid)
        freed = [r.freed_bytes for r in reports if r.freed_bytes is not None]
        total = sum(freed) if freed else None
        if total is None:
            said = f"unmeasured (NVML: {reports[0].nvml})"
        else:
            said = f"{abs(total) / 2**30:.2f} GiB {'freed' if total >= 0 else 'taken back'}"
        self.registry.update(
            rec.name, message=f"GPU {'suspended' if op == 'suspend_gpu' else 'resumed'}: {said}"
        )
        return {
            "pids": [r.pid for r in reports],
            "freed_bytes": total,
            "reports": [r.model_dump() for r in reports],
        }

    def reconcile_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        """After a step reported an error: did it take effect anyway? Read from the store,
        the registry and the processes, never from the (possibly lost) answer. A
        stop-checkpoint whose answer was lost but whose checkpoint is published and whose
        wrapper stopped is a step that succeeded."""
        if op == "terminate":
            # The answer to a terminate can be lost the same way: what counts is that no
            # process of the workload is left.
            rec = self.registry.get(args["workload"])
            if rec is None:
                return None
            try:
                self._wait_wrapper_exit(rec)  # a wrapper that ended its payload exits next
            except errors.Conflict:
                return None
            if not fencing.fence(self.settings, rec):
                return None
            self.registry.update(
                rec.name, state=WorkloadState.FAILED, exit_status=KILLED,
                message="killed by clawpoint",
            )  # fmt: skip
            return {"terminated": True, "recovered": True}
        return self.recover_step(op, args, started_at)

    def _checkpoint_happened(
        self, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        """The output of a checkpoint step that took effect since ``started_at``: a checkpoint
        published since then that the wrapper recorded as its last, and for a stop, the
        wrapper STOPPED with it and gone."""
        name = args["workload"]
        rec = self.registry.get(name)
        newer = [c for c in self.store.list(name) if c.created_at >= started_at]
        if rec is None or not newer:
            return None
        if args["stop"] and args.get("handoff"):
            handed = self._handed_over_since(rec, newer)
            if handed is not None:
                return handed
        if args["stop"]:
            try:
                self._wait_wrapper_exit(rec)  # it exits right after recording STOPPED
            except errors.Conflict:
                return None
            rec = self.registry.get(name)
            if rec is None or rec.state is not WorkloadState.STOPPED:
                return None
        c = next((c for c in newer if c.id == rec.last_checkpoint), None)
        return None if c is None else _recovered_checkpoint(c)

    def _handed_over_since(
        self, rec: WorkloadRecord, newer: list[CheckpointInfo]
    ) -> dict[str, Any] | None:
        """The output of a handoff's checkpoint step whose answer was lost: a checkpoint
        published since the step began is the one the wrapper now running the workload
        (the standby) was started from."""
        rec = self._settle(rec, timeout_s=15.0)
        known, got = self._restored_from(rec)
        c = next((c for c in newer if known and c.id == got), None)
        if c is None or rec.state not in _LIVE or not _wrapper_alive(self.settings, rec):
            return None
        return _recovered_checkpoint(c, handoff="sent")

    def _wait_wrapper_exit(
        self, rec: WorkloadRecord, timeout_s: float = 30.0, *, only_pid: bool = False
    ) -> None:
        """After a stop-checkpoint the wrapper records STOPPED and exits; wait for that so the
        next step never sees two wrappers for one workload. ``only_pid``: after a handoff,
        the workload's lock is the new wrapper's: wait for the old wrapper's process only."""
        start = engine.start_time(rec.wrapper_pid) if rec.wrapper_pid else None

        def gone() -> bool:
            if only_pid:
                return not fencing.same_process(rec.wrapper_pid, start)
            return not _wrapper_alive(self.settings, rec)

        if not poll_until(gone, timeout_s=timeout_s, every_s=0.05):
            raise errors.Conflict(
                f"the wrapper of {NAME}:{rec.name} did not exit {timeout_s:.0f} s after its "
                "stop-checkpoint",
                hint="check its log under CLAWPOINT_HOME/logs; the checkpoint itself is safe",
            )

    def _start(
        self, name: str, *, node: str, restore_from: str | None, fresh: bool = False
    ) -> dict[str, Any]:
        rec = self.registry.require(name)
        before = rec.state
        if _wrapper_alive(self.settings, rec):
            # A wrapper is already up: either a start of this very step that was under way
            # when a previous clawpoint process died (resumed from the journal), or a
            # genuine second copy. Let it settle, then tell the two apart by its node.
            rec = self._settle(rec)
            mine = self._started_here(rec, node=node, restore_from=restore_from, fresh=fresh)
            if mine is not None:
                handed = self._confirm_handoff(rec, restore_from)
                if handed is not None:
                    return {**mine, **handed}
                return {**mine, "already_started": True}
            if rec.state in _LIVE or _wrapper_alive(self.settings, rec):
                raise errors.Conflict(
                    f"{NAME}:{name} is already running on {rec.node}",
                    hint="preempt or migrate it instead of starting a second copy",
                )
        fencing.fence(self.settings, rec)
        mark = ProgressFile.of(self.settings, name).stamp()
        # A start step restores (or fails); only a person's explicit --fresh starts over.
        spec = self._spec(
            rec, node, restore_from=restore_from, start_mode="fresh" if fresh else "restore"
        )
        try:
            started = launch_detached(self.settings, spec)
        except errors.Conflict:
            # Another wrapper for this name won the lock meanwhile: the start spawned by a
            # clawpoint process that died right after spawning it. Same node: it is ours.
            current = self._settle(self.registry.require(name))
            mine = self._started_here(current, node=node, restore_from=restore_from, fresh=fresh)
            if mine is not None:
                return {**mine, "already_started": True}
            raise
        restored = self._check_started_as_asked(
            started, restore_from=restore_from, fresh=fresh, previous=before
        )
        seen = None if restored is None else self._watch_restored(started, restored, mark)
        # Files the restore rewound (their later content kept beside them) or kept: said in
        # the result, never silently.
        changed = fencing.read_identity(self.settings, name).get("files") or []
        return {
            "workload": f"{NAME}:{name}",
            "node": started.node,
            "pid": started.pid,
            "restored_from": restored,
            **({"fresh": True} if fresh else {}),
            **({"verified": seen.model_dump(mode="json")} if seen is not None else {}),
            **({"files": changed} if changed else {}),
        }

    def _spec(self, rec: WorkloadRecord, node: str, **how: Any) -> RunSpec:
        """The run spec of ``rec`` started on ``node``; ``how``: restore_from, start_mode..."""
        return RunSpec(
            name=rec.name, node=node, engine=rec.engine, checkpoint_every=rec.checkpoint_every,
            command=rec.command, cwd=rec.cwd, labels=rec.labels, home=str(self.settings.home),
            **how,
        )  # fmt: skip

    def _launch_standby(self, name: str, *, node: str) -> dict[str, Any]:
        """The standby step: a wrapper waiting on ``node`` for the workload (``moves``). A
        standby that cannot start is no failure: the move goes on the plain way."""
        rec = self.registry.require(name)
        spec = self._spec(
            rec, node, start_mode="restore", standby=handoff.new_token(),
            standby_timeout_s=self.settings.migration.standby_timeout_s,
        )  # fmt: skip
        try:
            pid, path = launch_standby(self.settings, spec)
        except errors.ClawpointError as exc:
            log.warning("local.standby_failed", workload=name, error=exc.message)
            return {"socket": None, "pid": None, "node": node, "problem": exc.message}
        return {"socket": str(path), "pid": pid, "node": node}

    def _await_standby(self, name: str, pid: int, socket_path: str | None) -> None:
        """Before a start after a handoff: let the standby that got the order take the
        workload's lock (so no second wrapper is launched beside it); retire one that got
        no order (its socket is still there): it holds nothing, and is not needed now."""
        start = engine.start_time(pid)
        if not moves.is_wrapper(pid):
            return
        if socket_path and Path(socket_path).exists():
            log.info("local.standby_retired", workload=name, pid=pid)
            engine.signal_tree(pid, signal.SIGTERM)
            return
        poll_until(
            lambda: (
                not fencing.same_process(pid, start)
                or fencing.lock_holder(self.settings, name) == pid
            ),
            timeout_s=15.0,
            every_s=0.005,
        )

    def _confirm_handoff(
        self, rec: WorkloadRecord, restore_from: str | None
    ) -> dict[str, Any] | None:
        """For a wrapper a handoff started from ``restore_from``: the restore watch (as for
        every restore) and the pause it took. None for any other wrapper."""
        if restore_from is None:
            return None
        restore = moves.restore_status(rec)
        if not moves.handed_over(restore, restore_from):
            return None
        assert restore is not None
        mark = Stamp.parse(restore.get("progress_mark"))
        seen = self._watch_restored(rec, restore_from, mark)
        restore = moves.restore_status(rec) or restore  # the first progress is known by now
        if (restore.get("handoff") or {}).get("staged"):
            # Restored from images published only afterwards: what was restored must be
            # what was published, and verify (the same files: hard links of them).
            self._verify_or_stop(rec, restore_from)
        report = moves.handoff_report(restore, self.store.get(restore_from))
        return {"handoff": report, "verified": seen.model_dump(mode="json")}

    def _verify_or_stop(self, rec: WorkloadRecord, checkpoint_id: str) -> None:
        try:
            self.store.verify(checkpoint_id)
        except errors.CorruptCheckpoint as exc:
            log.error("local.handoff_images_corrupt", workload=rec.name, error=exc.message)
            if rec.socket and _wrapper_alive(self.settings, rec):
                ControlClient(Path(rec.socket)).terminate(timeout_s=30)
            self.registry.update(rec.name, state=WorkloadState.FAILED,
                                 exit_status="restore unverified", message=exc.message)  # fmt: skip
            raise

    def _watch_restored(
        self, started: WorkloadRecord, checkpoint_id: str, mark: Stamp | None
    ) -> verify.RestoreWatch:
        """The last postcondition of every restoring start: the restored program stays up
        and does not go back behind its checkpoint's progress. A workload that fails it and
        is still running is stopped (the checkpoint untouched), so it stays restorable."""
        try:
            return verify.watch_restored(
                self.settings, self.registry, self.store, started.name,
                checkpoint_id=checkpoint_id, mark=mark,
            )  # fmt: skip
        except errors.CheckpointError as exc:
            log.error("local.restore_unverified", workload=started.name, error=exc.message)
            current = self.registry.require(started.name)
            if current.socket and _wrapper_alive(self.settings, current):
                try:
                    ControlClient(Path(current.socket)).terminate(timeout_s=30)
                except errors.ClawpointError as stop_exc:
                    log.warning("local.stop_after_unverified_failed", error=str(stop_exc))
            try:  # its last registry write must come before ours
                self._wait_wrapper_exit(current)
            except errors.Conflict as wait_exc:
                log.warning("local.wrapper_still_up_after_unverified", error=str(wait_exc))
            fencing.fence(self.settings, current)
            self.registry.update(
                started.name,
                state=WorkloadState.FAILED,
                exit_status=current.exit_status or "restore unverified",
                message=exc.message,
            )
            raise

    def _started_here(
        self, rec: WorkloadRecord, *, node: str, restore_from: str | None, fresh: bool
    ) -> dict[str, Any] | None:
        """The output of a start step when ``rec`` is a live wrapper on ``node`` that started
        the way the step asks (that checkpoint, or fresh): a start that already happened."""
        if rec.state not in _LIVE or rec.node != node or not _wrapper_alive(self.settings, rec):
            return None
        known, got = self._restored_from(rec)
        if not known or not _as_asked(got, restore_from=restore_from, fresh=fresh):
            return None
        return {"workload": f"{NAME}:{rec.name}", "node": rec.node, "pid": rec.pid,
                "restored_from": got, **({"fresh": True} if fresh else {})}  # fmt: skip

    def _restored_from(self, rec: WorkloadRecord) -> tuple[bool, str | None]:
        """(known, checkpoint id) the running wrapper of ``rec`` started from (None: fresh),
        from the identity it wrote at start; unknown if that file is not this wrapper's."""
        ident = fencing.read_identity(self.settings, rec.name)
        if not rec.wrapper_pid or ident.get("wrapper_pid") != rec.wrapper_pid:
            return False, None
        if "restored_from" not in ident:
            return False, None
        value = ident.get("restored_from")
        return True, value if isinstance(value, str) else None

    def _check_started_as_asked(
        self,
        started: WorkloadRecord,
        *,
        restore_from: str | None,
        fresh: bool,
        previous: WorkloadState,
    ) -> str | None:
        """The postcondition of a start step: it restored exactly ``restore_from`` (or some
        checkpoint of the lineage when None), or nothing when ``fresh``. Anything else is
        stopped again and reported as the failed restore it is."""
        known, got = self._restored_from(started)
        if known and _as_asked(got, restore_from=restore_from, fresh=fresh):
            return got
        wanted = "a fresh start" if fresh else (restore_from or "a checkpoint of the lineage")
        log.error("local.start_postcondition", workload=started.name, wanted=wanted, got=got)
        if started.socket and _wrapper_alive(self.settings, started):
            try:
                ControlClient(Path(started.socket)).terminate(timeout_s=30)
            except errors.ClawpointError as exc:
                log.warning("local.stop_after_postcondition_failed", error=str(exc))
        fencing.fence(self.settings, started)
        self.registry.update(
            started.name,
            state=previous,
            message=f"start refused: wanted {wanted}, the wrapper started from {got or 'scratch'}",
        )
        raise errors.CheckpointError(
            f"{NAME}:{started.name} was to start from {wanted} but the wrapper started from "
            f"{got or 'scratch' if known else 'an unknown state'}; it was stopped again",
            hint="check the workload's log; then restore the checkpoint you want explicitly",
            details={"wanted": wanted, "got": got},
        )

    def _settle(self, rec: WorkloadRecord, timeout_s: float = 60.0) -> WorkloadRecord:
        """Wait while a live wrapper is still starting (its row not yet RUNNING)."""
        current = rec

        def settled() -> WorkloadRecord | bool:
            nonlocal current
            if not _wrapper_alive(self.settings, current):
                return True  # no wrapper is starting: its row is final
            current = self.registry.require(rec.name)
            if current.state in _LIVE and current.wrapper_pid and _pid_alive(current.wrapper_pid):
                return current
            return False

        found = poll_until(settled, timeout_s=timeout_s, every_s=0.05)
        return found if isinstance(found, WorkloadRecord) else self.registry.require(rec.name)

    def _set_node(
        self, node: str, *, schedulable: bool, reason: str, health: str | None = None
    ) -> None:
        validate_name(node, what="node name")
        if node not in self._node_config:
            raise errors.NotFound(f"no node {NAME}:{node}", hint=errors.step("list_nodes"))
        with self.db.write() as conn:
            row = conn.execute("SELECT health FROM local_nodes WHERE name=?", (node,)).fetchone()
            conn.execute(
                "INSERT INTO local_nodes(name, schedulable, health, reason, updated_at) VALUES(?, ?, ?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET schedulable=excluded.schedulable, health=excluded.health, "
                "reason=excluded.reason, updated_at=excluded.updated_at",
                (
                    node,
                    int(schedulable),
                    health or (row["health"] if row else "healthy"),
                    reason,
                    utcnow().isoformat(),
                ),
            )

    def set_node_state(
        self,
        node: str,
        *,
        schedulable: bool | None = None,
        health: str | None = None,
        reason: str = "",
    ) -> NodeInfo:
        """Set a virtual node's schedulable flag or health directly, outside any plan (tests)."""
        current = self.get_node(node)
        self._set_node(
            node,
            schedulable=current.schedulable if schedulable is None else schedulable,
            reason=reason,
            health=health or current.health.value,
        )
        return self.get_node(node)

    def recover_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        if op == "checkpoint":
            return self._checkpoint_happened(args, started_at)
        if op == "start":
            rec = self.registry.get(args["workload"])
            if rec is None:
                return None
            mine = self._started_here(
                rec,
                node=args["node"],
                restore_from=args.get("restore_from"),
                fresh=bool(args.get("fresh")),
            )
            return {**mine, "recovered": True} if mine is not None else None
        if op == "set_node":
            node = self.get_node(args["node"])
            return (
                {"node": node.name, "schedulable": node.schedulable}
                if node.schedulable == args["schedulable"]
                else None
            )
        if op == "delete_checkpoint":
            try:
                self.store.get(args["checkpoint_id"])
            except errors.NotFound:
                return {"deleted": args["checkpoint_id"], "recovered": True}
            return None
        return None  # fence / terminate are safe to run again


def _recovered_checkpoint(c: CheckpointInfo, **extra: Any) -> dict[str, Any]:
    """A checkpoint step's output, found again after its answer was lost."""
    return {"checkpoint_id": c.id, "size_bytes": c.size_bytes, "timings": c.timings,
            "node": c.node, **extra, "recovered": True}  # fmt: skip


def _as_asked(got: str | None, *, restore_from: str | None, fresh: bool) -> bool:
    """Whether a wrapper that started from ``got`` (None: fresh) did what a start step asked."""
    if fresh:
        return got is None
    return got == restore_from if restore_from else got is not None
