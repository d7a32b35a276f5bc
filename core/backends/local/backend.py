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

import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from core import errors
from core.backends.base import ProgressFn
from core.backends.local.common import (
    _CAPABILITIES,
    _LIVE,
    NAME,
    _pid_alive,
    _wrapper_alive,
)
from core.backends.local.planning import LocalPlanning
from core.config import LocalNodeConfig, Settings
from core.model import (
    Action,
    CheckpointInfo,
    NodeHealth,
    NodeInfo,
    WorkloadInfo,
    WorkloadState,
    utcnow,
    validate_name,
)
from core.state.db import Database
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.store.store import CheckpointStore
from core.wrapper import fence as fencing
from core.wrapper.control import ControlClient
from core.wrapper.launch import launch_detached
from core.wrapper.spec import RunSpec

log = structlog.get_logger("clawpoint.local")


class LocalBackend(LocalPlanning):
    name = NAME

    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self.registry = WorkloadRegistry(db, backend=NAME)
        self.store = CheckpointStore(settings.checkpoint_dir, keep=settings.store.keep_per_workload)
        self._node_config = {n.name: n for n in settings.local.nodes}

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
        return NodeInfo(
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
            for cfg in self.settings.local.nodes
        ]

    def get_node(self, name: str) -> NodeInfo:
        validate_name(name, what="node name")
        for node in self.nodes():
            if node.name == name:
                return node
        raise errors.NotFound(
            f"no node {NAME}:{name}",
            hint="run 'clawpoint nodes' to list nodes; local nodes come from the [local] config section",
        )

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
        return ckpt.model_copy(update={"id": f"{NAME}:{ckpt.id}"})

    # ---------------------------------------------------------------- planning
    def run_step(self, op: str, args: dict[str, Any], progress: ProgressFn) -> dict[str, Any]:
        if op == "checkpoint":
            rec = self.registry.require(args["workload"])
            if not rec.socket or not _wrapper_alive(self.settings, rec):
                raise errors.Conflict(
                    f"the wrapper of {NAME}:{rec.name} is not running",
                    hint=f"check 'clawpoint workloads'; a dead workload is recovered with 'clawpoint failover {NAME}:{rec.name}'",
                )
            ckpt = ControlClient(Path(rec.socket)).checkpoint(
                stop=bool(args["stop"]), progress=progress
            )
            if args["stop"]:
                self._wait_wrapper_exit(rec)
            return {
                "checkpoint_id": ckpt.id.split(":", 1)[-1],
                "size_bytes": ckpt.size_bytes,
                "timings": ckpt.timings,
                "node": rec.node,
            }
        if op == "start":
            return self._start(
                args["workload"], node=args["node"], restore_from=args.get("restore_from")
            )
        if op == "fence":
            rec = self.registry.require(args["workload"])
            killed = fencing.fence(self.settings, rec)
            return {"killed": killed}
        if op == "terminate":
            rec = self.registry.require(args["workload"])
            if rec.socket and _wrapper_alive(self.settings, rec):
                ControlClient(Path(rec.socket)).terminate(timeout_s=30)
            fencing.fence(self.settings, rec)
            self.registry.update(
                rec.name,
                state=WorkloadState.FAILED,
                exit_status="killed",
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
            self.store.delete(args["checkpoint_id"])
            return {"deleted": args["checkpoint_id"]}
        raise errors.OperationFailed(f"unknown local step {op!r}", hint="this is a bug; report it")

    def _wait_wrapper_exit(self, rec: WorkloadRecord, timeout_s: float = 30.0) -> None:
        """After a stop-checkpoint the wrapper records STOPPED and exits; wait for that so the
        next step never sees two wrappers for one workload."""
        deadline = time.monotonic() + timeout_s
        while _wrapper_alive(self.settings, rec):
            if time.monotonic() > deadline:
                raise errors.Conflict(
                    f"the wrapper of {NAME}:{rec.name} did not exit {timeout_s:.0f} s after its "
                    "stop-checkpoint",
                    hint="check its log under CLAWPOINT_HOME/logs; the checkpoint itself is safe",
                )
            time.sleep(0.05)

    def _start(self, name: str, *, node: str, restore_from: str | None) -> dict[str, Any]:
        rec = self.registry.require(name)
        if _wrapper_alive(self.settings, rec):
            # A wrapper is already up: either a start of this very step that was under way
            # when a previous clawpoint process died (resumed from the journal), or a
            # genuine second copy. Let it settle, then tell the two apart by its node.
            rec = self._settle(rec)
            if rec.state in _LIVE and rec.node == node:
                return {
                    "workload": f"{NAME}:{name}",
                    "node": rec.node,
                    "pid": rec.pid,
                    "restored_from": rec.last_checkpoint,
                    "already_started": True,
                }
            if rec.state in _LIVE or _wrapper_alive(self.settings, rec):
                raise errors.Conflict(
                    f"{NAME}:{name} is already running on {rec.node}",
                    hint="preempt or migrate it instead of starting a second copy",
                )
        fencing.fence(self.settings, rec)
        spec = RunSpec(
            name=name,
            node=node,
            engine=rec.engine,
            checkpoint_every=rec.checkpoint_every,
            command=rec.command,
            cwd=rec.cwd,
            labels=rec.labels,
            restore_from=restore_from,
            home=str(self.settings.home),
        )
        try:
            started = launch_detached(self.settings, spec)
        except errors.Conflict:
            # Another wrapper for this name won the lock meanwhile: the start spawned by a
            # clawpoint process that died right after spawning it. Same node: it is ours.
            current = self._settle(self.registry.require(name))
            if current.state in _LIVE and current.node == node:
                return {
                    "workload": f"{NAME}:{name}",
                    "node": current.node,
                    "pid": current.pid,
                    "restored_from": current.last_checkpoint,
                    "already_started": True,
                }
            raise
        return {
            "workload": f"{NAME}:{name}",
            "node": started.node,
            "pid": started.pid,
            "restored_from": started.last_checkpoint,
        }

    def _settle(self, rec: WorkloadRecord, timeout_s: float = 60.0) -> WorkloadRecord:
        """Wait while a live wrapper is still starting (its row not yet RUNNING)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _wrapper_alive(self.settings, rec):
            rec = self.registry.require(rec.name)
            if rec.state in _LIVE and rec.wrapper_pid and _pid_alive(rec.wrapper_pid):
                return rec
            time.sleep(0.05)
        return self.registry.require(rec.name)

    def _set_node(
        self, node: str, *, schedulable: bool, reason: str, health: str | None = None
    ) -> None:
        validate_name(node, what="node name")
        if node not in self._node_config:
            raise errors.NotFound(f"no node {NAME}:{node}", hint="run 'clawpoint nodes'")
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
        """Operator hook (CLI ``nodes set``): cordon/uncordon or mark health of a virtual node."""
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
            rec = self.registry.get(args["workload"])
            newer = [c for c in self.store.list(args["workload"]) if c.created_at >= started_at]
            if newer and (not args["stop"] or (rec and rec.state is not WorkloadState.RUNNING)):
                c = newer[0]
                return {
                    "checkpoint_id": c.id,
                    "size_bytes": c.size_bytes,
                    "timings": c.timings,
                    "node": c.node,
                    "recovered": True,
                }
            return None
        if op == "start":
            rec = self.registry.get(args["workload"])
            if (
                rec
                and rec.state is WorkloadState.RUNNING
                and _wrapper_alive(self.settings, rec)
                and rec.node == args["node"]
            ):
                return {
                    "workload": f"{NAME}:{rec.name}",
                    "node": rec.node,
                    "pid": rec.pid,
                    "restored_from": rec.last_checkpoint,
                    "recovered": True,
                }
            return None
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
