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
from core.backends.base import PlanDraft, ProgressFn, not_supported
from core.config import LocalNodeConfig, Settings
from core.model import (
    Action,
    CheckpointInfo,
    CheckpointStatus,
    NodeHealth,
    NodeInfo,
    PlanStep,
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

NAME = "local"
_LIVE = (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING)
_CAPABILITIES = frozenset(
    {
        Action.CHECKPOINT,
        Action.RESTORE,
        Action.MIGRATE,
        Action.PREEMPT,
        Action.RESUME,
        Action.FAILOVER,
        Action.DRAIN_NODE,
        Action.KILL,
        Action.DELETE_CHECKPOINT,
    }
)


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wrapper_alive(settings: Settings, record: WorkloadRecord) -> bool:
    """True while the workload's wrapper holds its lock (it does for its whole life)."""
    return fencing.wrapper_alive(settings, record)


def _resident_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


class LocalBackend:
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
    def _pick_target(self, *, exclude: set[str], requested: str | None) -> str:
        nodes = self.nodes()
        if requested is not None:
            validate_name(requested, what="node name")
            match = next((n for n in nodes if n.name == requested), None)
            if match is None:
                raise errors.NotFound(
                    f"no node {NAME}:{requested}", hint="run 'clawpoint nodes' to list nodes"
                )
            if requested in exclude:
                raise errors.InvalidInput(
                    f"the workload is already on {NAME}:{requested}",
                    hint="pass another node with --to, or omit it to let clawpoint pick one",
                )
            if match.health is NodeHealth.DOWN or not match.schedulable:
                raise errors.Conflict(
                    f"node {match.id} is {match.state} and takes no workloads",
                    hint="pick a healthy, schedulable node ('clawpoint nodes')",
                )
            return requested
        candidates = [
            n
            for n in nodes
            if n.name not in exclude and n.schedulable and n.health is not NodeHealth.DOWN
        ]
        if not candidates:
            raise errors.Conflict(
                "no other healthy, schedulable node to place the workload on",
                hint="add a node to the [local] config section or undrain one",
            )
        # Healthy before degraded, then cheapest, then least loaded.
        candidates.sort(
            key=lambda n: (n.health is not NodeHealth.HEALTHY, n.price_per_hour, len(n.workloads))
        )
        return candidates[0].name

    def _labels_of(self, node: str) -> dict[str, str]:
        cfg = self._node_config.get(node)
        return dict(cfg.labels) if cfg else {}

    def _estimate_pause(self, name: str) -> float | None:
        """Seconds the workload is paused by a move: dump + restore of its state.

        From the last checkpoint's own timings when there is one, else from the payload's
        resident memory at ~1 GB/s each way (measured order of magnitude here)."""
        ckpts = self.store.list(name)
        if ckpts:
            last = ckpts[0]
            dump = last.timings.get("total_s") or last.size_bytes / 1e9
            return round(2 * float(dump) + 0.5, 2)
        rec = self.registry.get(name)
        rss = _resident_bytes(rec.pid) if rec and rec.pid else None
        return round(2 * rss / 1e9 + 0.5, 2) if rss else None

    def _scope(self, rec: WorkloadRecord) -> dict[str, Any]:
        node = self._node_config.get(rec.node or "")
        return {
            "backend": NAME,
            "pool": (node.labels.get("pool") if node else None) or f"{NAME}:{rec.node}",
            "node": rec.node,
            "labels": rec.labels,
            "node_labels": node.labels if node else {},
            "spot": node.spot if node else False,
            "gpus": node.gpus if node else 0,
        }

    def plan(self, action: Action, target: str, params: dict[str, Any]) -> PlanDraft:
        if action not in _CAPABILITIES:
            raise not_supported(NAME, action, "local workloads are single processes; use migrate")
        if action is Action.RESTORE:
            return self._plan_restore(target, params)
        if action is Action.DELETE_CHECKPOINT:
            return self._plan_delete(target)
        if action is Action.DRAIN_NODE:
            return self._plan_drain(target, params)
        validate_name(target, what="workload name")
        rec = self._refresh(self.registry.require(target))
        ref = f"{NAME}:{target}"
        size = self._size_hint(target)
        if action is Action.CHECKPOINT:
            stop = bool(params.get("stop", False))
            self._require_state(rec, {WorkloadState.RUNNING}, action)
            return PlanDraft(
                steps=[
                    PlanStep(
                        name="checkpoint",
                        op="checkpoint",
                        args={"workload": target, "stop": stop},
                        description=f"checkpoint {ref}"
                        + (" and stop it" if stop else ", leave it running"),
                    )
                ],
                summary=f"Checkpoint {ref} on {rec.node}"
                + (" and stop it" if stop else " (it keeps running)"),
                expected_pause_s=self._estimate_pause(target),
                saves=f"the full process state of {ref}{size}",
                rollback="nothing to undo: a checkpoint only adds an image"
                if not stop
                else f"resume it: clawpoint resume {ref}",
                scope=self._scope(rec),
            )
        if action is Action.MIGRATE:
            self._require_state(rec, {WorkloadState.RUNNING}, action)
            dest = self._pick_target(exclude={rec.node or ""}, requested=params.get("to"))
            return PlanDraft(
                steps=[
                    PlanStep(
                        name="checkpoint",
                        op="checkpoint",
                        args={"workload": target, "stop": True},
                        description=f"checkpoint {ref} and stop it on {rec.node}",
                    ),
                    PlanStep(
                        name="start",
                        op="start",
                        args={
                            "workload": target,
                            "node": dest,
                            "restore_from": "$checkpoint.checkpoint_id",
                        },
                        description=f"restore it on {dest} from that checkpoint",
                    ),
                ],
                on_failure=[
                    PlanStep(
                        name="restart-source",
                        op="start",
                        args={"workload": target, "node": rec.node, "restore_from": None},
                        description=f"restart it on {rec.node} from its newest good checkpoint",
                    )
                ],
                summary=f"Move {ref} from {rec.node} to {dest} without losing progress",
                expected_pause_s=self._estimate_pause(target),
                saves=f"the full process state of {ref}{size}",
                rollback=f"migrate it back: clawpoint migrate {ref} --to {rec.node}",
                cost_effect=self._cost_effect(rec.node, dest),
                scope={
                    **self._scope(rec),
                    "target_node": dest,
                    "target_node_labels": self._labels_of(dest),
                },
            )
        if action is Action.PREEMPT:
            self._require_state(rec, {WorkloadState.RUNNING}, action)
            return PlanDraft(
                steps=[
                    PlanStep(
                        name="checkpoint",
                        op="checkpoint",
                        args={"workload": target, "stop": True},
                        description=f"checkpoint {ref} and stop it, freeing {rec.node}",
                    )
                ],
                summary=f"Preempt {ref}: save its state and stop it, freeing node {rec.node}",
                expected_pause_s=None,
                saves=f"the full process state of {ref}{size}",
                rollback=f"resume it: clawpoint resume {ref}",
                cost_effect=f"frees {rec.node}" + self._price_note(rec.node),
                scope=self._scope(rec),
            )
        if action is Action.RESUME:
            self._require_state(rec, {WorkloadState.STOPPED}, action)
            wanted: str | None = params.get("to") or rec.node
            dest = self._pick_target(exclude=set(), requested=wanted)
            return PlanDraft(
                steps=[
                    PlanStep(
                        name="start",
                        op="start",
                        args={"workload": target, "node": dest, "restore_from": None},
                        description=f"restore {ref} on {dest} from its newest good checkpoint",
                    )
                ],
                summary=f"Resume {ref} on {dest} from its newest good checkpoint",
                saves="nothing new; restores the saved state",
                rollback=f"preempt it again: clawpoint preempt {ref}",
                scope={
                    **self._scope(rec),
                    "target_node": dest,
                    "target_node_labels": self._labels_of(dest),
                },
            )
        if action is Action.FAILOVER:
            if rec.state in _LIVE:
                raise errors.Conflict(
                    f"{ref} is running on {rec.node}; failover is for a workload that died",
                    hint=f"to move a live workload use: clawpoint migrate {ref}",
                )
            self._require_state(rec, {WorkloadState.FAILED}, action)
            good = self.store.newest_good(target)
            if good is None:
                raise errors.NotFound(
                    f"{ref} has no good checkpoint to fail over from",
                    hint="run workloads with --checkpoint-every so failover has something to restore",
                )
            exclude = {rec.node} if rec.node else set()
            dest = self._pick_target(exclude=exclude, requested=params.get("to"))
            lost = self._work_lost_note(good)
            return PlanDraft(
                steps=[
                    PlanStep(
                        name="fence",
                        op="fence",
                        args={"workload": target},
                        description="make sure no copy of the workload is still running",
                    ),
                    PlanStep(
                        name="start",
                        op="start",
                        args={"workload": target, "node": dest, "restore_from": None},
                        description=f"restore it on {dest} from its newest good checkpoint",
                    ),
                ],
                summary=f"Fail over {ref} from {rec.node} to {dest}, restoring checkpoint {NAME}:{good.id}",
                saves=f"resumes from {NAME}:{good.id}; {lost}",
                rollback=f"migrate it back: clawpoint migrate {ref} --to {rec.node}",
                cost_effect=self._cost_effect(rec.node, dest),
                scope={
                    **self._scope(rec),
                    "target_node": dest,
                    "target_node_labels": self._labels_of(dest),
                },
            )
        if action is Action.KILL:
            self._require_state(rec, {WorkloadState.RUNNING}, action)
            return PlanDraft(
                steps=[
                    PlanStep(
                        name="terminate",
                        op="terminate",
                        args={"workload": target},
                        description=f"terminate {ref} without saving",
                    )
                ],
                summary=f"Kill {ref} without saving: work since its last checkpoint is lost",
                saves="nothing",
                rollback=f"resume from its newest checkpoint: clawpoint failover {ref}",
                scope=self._scope(rec),
            )
        raise not_supported(NAME, action)

    def _plan_restore(self, checkpoint_id: str, params: dict[str, Any]) -> PlanDraft:
        ckpt = self.store.get(checkpoint_id)
        rec = self.registry.get(ckpt.lineage)
        if rec is not None:
            rec = self._refresh(rec)
            if rec.state in _LIVE:
                raise errors.Conflict(
                    f"{NAME}:{ckpt.lineage} is running; restoring it would run two copies",
                    hint=f"preempt it first (clawpoint preempt {NAME}:{ckpt.lineage}) or migrate it",
                )
        if rec is None:
            raise errors.NotFound(
                f"checkpoint {checkpoint_id} belongs to no known workload",
                hint="start it with 'clawpoint run --name NAME -- CMD' to restore it",
            )
        dest = self._pick_target(exclude=set(), requested=params.get("to") or rec.node)
        return PlanDraft(
            steps=[
                PlanStep(
                    name="fence",
                    op="fence",
                    args={"workload": ckpt.lineage},
                    description="make sure no copy of the workload is still running",
                ),
                PlanStep(
                    name="start",
                    op="start",
                    args={"workload": ckpt.lineage, "node": dest, "restore_from": ckpt.id},
                    description=f"restore {NAME}:{ckpt.id} on {dest}",
                ),
            ],
            summary=f"Restore {NAME}:{ckpt.lineage} on {dest} from checkpoint {NAME}:{ckpt.id}",
            saves=f"restores the state saved at {ckpt.created_at:%Y-%m-%d %H:%M:%S} UTC",
            rollback=f"preempt it: clawpoint preempt {NAME}:{ckpt.lineage}",
            scope={
                **self._scope(rec),
                "target_node": dest,
                "target_node_labels": self._labels_of(dest),
            },
        )

    def _plan_delete(self, checkpoint_id: str) -> PlanDraft:
        ckpt = self.store.get(checkpoint_id)
        rec = self.registry.get(ckpt.lineage)
        newest = self.store.list(ckpt.lineage)
        is_newest = bool(newest) and newest[0].id == ckpt.id
        live = rec is not None and rec.state in (
            WorkloadState.RUNNING,
            WorkloadState.STOPPED,
            WorkloadState.FAILED,
        )
        return PlanDraft(
            steps=[
                PlanStep(
                    name="delete",
                    op="delete_checkpoint",
                    args={"checkpoint_id": ckpt.id},
                    description=f"delete checkpoint {NAME}:{ckpt.id}",
                )
            ],
            summary=f"Delete checkpoint {NAME}:{ckpt.id} ({ckpt.size_bytes / 2**20:.0f} MiB)",
            saves="nothing; the image is removed for good",
            rollback="none: a deleted checkpoint cannot be recovered",
            scope={
                "backend": NAME,
                "labels": rec.labels if rec else {},
                "newest_of_live_workload": is_newest and live,
            },
        )

    def _plan_drain(self, node: str, params: dict[str, Any]) -> PlanDraft:
        info = self.get_node(node)
        save = bool(params.get("save", True))
        steps: list[PlanStep] = []
        running = [w for w in self.workloads() if w.node == node and w.state in _LIVE]
        targets: list[str] = []
        for w in running:
            if save:
                dest = self._pick_target(exclude={node}, requested=params.get("to"))
                targets.append(dest)
                steps.append(
                    PlanStep(
                        name=f"checkpoint-{w.name}",
                        op="checkpoint",
                        args={"workload": w.name, "stop": True},
                        description=f"checkpoint {w.id} and stop it",
                    )
                )
                steps.append(
                    PlanStep(
                        name=f"start-{w.name}",
                        op="start",
                        args={
                            "workload": w.name,
                            "node": dest,
                            "restore_from": f"$checkpoint-{w.name}.checkpoint_id",
                        },
                        description=f"restore {w.id} on {dest}",
                    )
                )
            else:
                steps.append(
                    PlanStep(
                        name=f"terminate-{w.name}",
                        op="terminate",
                        args={"workload": w.name},
                        description=f"terminate {w.id} without saving",
                    )
                )
        steps.append(
            PlanStep(
                name="cordon",
                op="set_node",
                args={
                    "node": node,
                    "schedulable": False,
                    "reason": str(params.get("reason") or "drained by clawpoint"),
                },
                description=f"mark {info.id} unschedulable",
            )
        )
        return PlanDraft(
            steps=steps,
            summary=f"Drain {info.id}: "
            + (
                f"move {len(running)} workload(s) off it"
                if save
                else f"kill {len(running)} workload(s) on it"
            )
            + ", then cordon it",
            saves="the full state of every workload on it"
            if save
            else "nothing: running work is lost",
            rollback=f"undrain: clawpoint nodes undrain {info.id}",
            scope={
                "backend": NAME,
                "node": node,
                "node_labels": info.labels,
                "workloads": [w.id for w in running],
                "targets": targets,
            },
        )

    def _require_state(
        self, rec: WorkloadRecord, allowed: set[WorkloadState], action: Action
    ) -> None:
        # A periodic checkpoint in progress is still a running workload: the wrapper
        # serialises control requests, so the action simply follows that checkpoint.
        state = WorkloadState.RUNNING if rec.state is WorkloadState.CHECKPOINTING else rec.state
        if state not in allowed:
            wanted = " or ".join(sorted(s.value for s in allowed))
            raise errors.Conflict(
                f"cannot {action.value} {NAME}:{rec.name}: it is {rec.state.value}, not {wanted}",
                hint="run 'clawpoint workloads' to see its state"
                + (
                    "; a failed workload is recovered with 'clawpoint failover'"
                    if rec.state is WorkloadState.FAILED
                    else ""
                ),
            )

    def _size_hint(self, name: str) -> str:
        ckpts = self.store.list(name)
        return f" (last image {ckpts[0].size_bytes / 2**20:.0f} MiB)" if ckpts else ""

    def _price_note(self, node: str | None) -> str:
        cfg = self._node_config.get(node or "")
        return f" (${cfg.price_per_hour:.2f}/h)" if cfg else ""

    def _cost_effect(self, src: str | None, dst: str) -> str:
        a = self._node_config.get(src or "")
        b = self._node_config.get(dst)
        if not a or not b:
            return ""
        return f"${a.price_per_hour:.2f}/h on {src} -> ${b.price_per_hour:.2f}/h on {dst}"

    def _work_lost_note(self, ckpt: CheckpointInfo) -> str:
        age = (utcnow() - ckpt.created_at).total_seconds()
        return f"work since that checkpoint ({age:.0f} s ago) is redone"

    # ---------------------------------------------------------------- execution
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
        if _wrapper_alive(self.settings, rec) and rec.state in _LIVE:
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
        started = launch_detached(self.settings, spec)
        return {
            "workload": f"{NAME}:{name}",
            "node": started.node,
            "pid": started.pid,
            "restored_from": started.last_checkpoint,
        }

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


def checkpoint_is_good(ckpt: CheckpointInfo) -> bool:
    return ckpt.status is not CheckpointStatus.CORRUPT
