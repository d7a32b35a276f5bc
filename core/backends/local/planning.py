"""How the local backend turns an action into a plan: target choice, pause estimate, steps.

A mixin of ``LocalBackend`` (which provides the registry, the store, the node configuration
and the inventory calls declared below). Read-only: planning never changes a workload.
"""

from __future__ import annotations

from typing import Any

from core import actions, errors
from core.actions import ActionParams, CordonParams, DrainParams, MoveParams, StartParams
from core.backends.base import PlanDraft, not_supported
from core.backends.local import moves
from core.backends.local.common import _CAPABILITIES, _LIVE, NAME, _resident_bytes
from core.backends.local.config import LocalNodeConfig
from core.checkpoint import engine, files
from core.config import Settings
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
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.store import retention
from core.store.store import CheckpointStore, parse_checkpoint_id


def _start_step(
    workload: str,
    node: str | None,
    restore_from: str | None,
    description: str,
    *,
    fresh: bool = False,
) -> PlanStep:
    """Start the workload's wrapper on ``node``, restoring ``restore_from`` (None = newest
    good; a start step never falls back to a fresh start), or from scratch when ``fresh``."""
    args: dict[str, Any] = {"workload": workload, "node": node, "restore_from": restore_from}
    if fresh:
        args["fresh"] = True
    return PlanStep(name="start", op="start", args=args, description=description)


def _hands_off(name: str) -> bool:
    """Can a live move of a workload of engine ``name`` hand it to a standby (``moves``)?"""
    return name in engine.ENGINES and engine.get(name).supports_handoff


def _refuse_unsupported(rec: WorkloadRecord, action: Action) -> None:
    """Probe a workload's resources (read-only) and refuse a plan its engine cannot carry
    out, so a plan or dry-run names the problem before anything is paused."""
    if rec.pid is None or rec.engine not in engine.ENGINES:
        return
    found = engine.get(rec.engine).refusals(rec.pid)
    if found:
        shown = "; ".join(found[:5])
        raise errors.CheckpointError(
            f"cannot {action.value} {NAME}:{rec.name}: it holds what a checkpoint cannot "
            f"carry: {shown}",
            hint="nothing was paused or changed; do what the message says for each resource, "
            "then plan again (docs/checkpointing.md lists what a checkpoint carries)",
            code="checkpoint-unsupported-resource",
            details={"refusals": found},
        )


class LocalPlanning:
    """Plan drafting for ``LocalBackend``; see its docstring for the steps."""

    registry: WorkloadRegistry
    store: CheckpointStore
    settings: Settings
    _node_config: dict[str, LocalNodeConfig]

    def nodes(self) -> list[NodeInfo]:
        raise NotImplementedError

    def workloads(self) -> list[WorkloadInfo]:
        raise NotImplementedError

    def get_node(self, name: str) -> NodeInfo:
        raise NotImplementedError

    def _refresh(self, record: WorkloadRecord) -> WorkloadRecord:
        raise NotImplementedError

    def _pick_target(self, *, exclude: set[str], requested: str | None) -> str:
        nodes = self.nodes()
        if requested is not None:
            validate_name(requested, what="node name")
            match = next((n for n in nodes if n.name == requested), None)
            if match is None:
                raise errors.NotFound(
                    f"no node {NAME}:{requested}",
                    hint=f"list nodes with {errors.step('list_nodes')}",
                )
            if requested in exclude:
                raise errors.InvalidInput(
                    f"the workload is already on {NAME}:{requested}",
                    hint=f"pass another node as {errors.arg('to')}, or omit it to let clawpoint pick one",
                )
            if match.health is NodeHealth.DOWN or not match.schedulable:
                raise errors.Conflict(
                    f"node {match.id} is {match.state} and takes no workloads",
                    hint=f"pick a healthy, schedulable node ({errors.step('list_nodes')})",
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

    def _move_scope(self, rec: WorkloadRecord, dest: str) -> dict[str, Any]:
        """The scope of a plan that moves ``rec`` onto ``dest`` (policies match both ends)."""
        return {
            **self._scope(rec),
            "target_node": dest,
            "target_node_labels": self._labels_of(dest),
        }

    def _labels_of(self, node: str) -> dict[str, str]:
        cfg = self._node_config.get(node)
        return dict(cfg.labels) if cfg else {}

    def _estimate_pause(self, name: str, move: list[PlanStep] | None = None) -> float | None:
        """Seconds the workload is paused by a move: dump + restore of its state.

        From the last checkpoint's own timings when there is one, else from the payload's
        resident memory at ~1 GB/s each way (measured order of magnitude here). A handoff
        (``move`` has a standby step) pauses for the dump, the restore (a tenth of a second
        for post-copy) and little else (docs/migration.md)."""
        ckpts = self.store.list(name)
        mode = next((str(s.args.get("mode")) for s in move or [] if s.args.get("handoff")), None)
        if ckpts and mode is not None:
            t = ckpts[0].timings
            dump = float(t.get("frozen_s") or t.get("criu_dump_s") or ckpts[0].size_bytes / 1e9)
            restore = 0.1 if mode == "post-copy" else dump
            return round(dump + restore + 0.1, 2)
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

    def plan(self, action: Action, target: str, params: ActionParams) -> PlanDraft:
        if action not in _CAPABILITIES:
            raise not_supported(NAME, action, "local workloads are single processes; use migrate")
        params = actions.parse(action, params)  # the right model for this action, or refused
        if action is Action.RESTORE:
            return self._plan_restore(target, actions.expect(params, MoveParams))
        if action is Action.DELETE_CHECKPOINT:
            return self._plan_delete(target)
        if action is Action.DRAIN_NODE:
            return self._plan_drain(target, actions.expect(params, DrainParams))
        if action is Action.CORDON_NODE:
            return self._plan_cordon(target, actions.expect(params, CordonParams))
        if action is Action.UNDRAIN_NODE:
            return self._plan_undrain(target)
        validate_name(target, what="workload name")
        rec = self._refresh(self.registry.require(target))
        ref = f"{NAME}:{target}"
        size = self._size_hint(target)
        if action is Action.CHECKPOINT:
            self._require_state(rec, {WorkloadState.RUNNING}, action)
            _refuse_unsupported(rec, action)
            return PlanDraft(
                steps=[
                    PlanStep(
                        name="checkpoint",
                        op="checkpoint",
                        args={"workload": target, "stop": False},
                        description=f"checkpoint {ref}, leave it running",
                    )
                ],
                summary=f"Checkpoint {ref} on {rec.node} (it keeps running)",
                expected_pause_s=self._estimate_pause(target),
                saves=f"the full process state of {ref}{size}",
                rollback="nothing to undo: a checkpoint only adds an image",
                scope=self._scope(rec),
            )
        if action is Action.MIGRATE:
            self._require_state(rec, {WorkloadState.RUNNING}, action)
            _refuse_unsupported(rec, action)
            to = actions.expect(params, MoveParams).to
            dest = self._pick_target(exclude={rec.node or ""}, requested=to)
            return PlanDraft(
                steps=[
                    *(stops := self._move_steps(rec, dest)),
                    PlanStep(
                        name="start",
                        op="start",
                        args={
                            "workload": target,
                            "node": dest,
                            "restore_from": "$checkpoint.checkpoint_id",
                            **(
                                {"standby_pid": "$standby.pid", "standby": "$standby.socket"}
                                if len(stops) > 1
                                else {}
                            ),
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
                expected_pause_s=self._estimate_pause(target, move=stops),
                saves=f"the full process state of {ref}{size}",
                rollback=f"migrate it back: clawpoint migrate {ref} --to {rec.node}",
                cost_effect=self._cost_effect(rec.node, dest),
                scope=self._move_scope(rec, dest),
            )
        if action is Action.PREEMPT:
            self._require_state(rec, {WorkloadState.RUNNING}, action)
            _refuse_unsupported(rec, action)
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
            start = actions.expect(params, StartParams)
            wanted: str | None = start.to or rec.node
            dest = self._pick_target(exclude=set(), requested=wanted)
            if start.fresh:
                return self._plan_fresh(rec, dest, fence=False)
            self._require_restorable(target)
            return PlanDraft(
                steps=[
                    _start_step(
                        target,
                        dest,
                        None,
                        f"restore {ref} on {dest} from its newest good checkpoint",
                    )
                ],
                summary=f"Resume {ref} on {dest} from its newest good checkpoint",
                saves="nothing new; restores the saved state",
                rollback=f"preempt it again: clawpoint preempt {ref}",
                scope=self._move_scope(rec, dest),
            )
        if action is Action.FAILOVER:
            if rec.state in _LIVE:
                raise errors.Conflict(
                    f"{ref} is running on {rec.node}; failover is for a workload that died",
                    hint=f"to move a live workload use {errors.step('migrate_workload', workload=ref)}",
                )
            self._require_state(rec, {WorkloadState.FAILED}, action)
            exclude = {rec.node} if rec.node else set()
            start = actions.expect(params, StartParams)
            if start.fresh:
                dest = self._pick_target(exclude=exclude, requested=start.to)
                return self._plan_fresh(rec, dest, fence=True)
            good = self.store.newest_good(target)
            if good is None:
                self._require_restorable(target)  # names the corrupt ones, if any
                raise errors.CorruptCheckpoint(
                    f"no checkpoint of {ref} verifies: nothing to fail over from",
                    hint="a person can start it from scratch: "
                    + errors.step("failover_workload", workload=ref, fresh=True),
                )
            dest = self._pick_target(exclude=exclude, requested=start.to)
            lost = self._work_lost_note(good)
            return PlanDraft(
                steps=[
                    PlanStep(
                        name="fence",
                        op="fence",
                        args={"workload": target},
                        description="make sure no copy of the workload is still running",
                    ),
                    _start_step(
                        target, dest, None, f"restore it on {dest} from its newest good checkpoint"
                    ),
                ],
                summary=f"Fail over {ref} from {rec.node} to {dest}, restoring checkpoint {NAME}:{good.id}",
                saves=self._with_files(f"resumes from {NAME}:{good.id}; {lost}", good),
                rollback=f"migrate it back: clawpoint migrate {ref} --to {rec.node}",
                cost_effect=self._cost_effect(rec.node, dest),
                scope=self._move_scope(rec, dest),
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
        if action in (Action.SUSPEND_GPU, Action.RESUME_GPU):
            self._require_state(rec, {WorkloadState.RUNNING}, action)
            suspend = action is Action.SUSPEND_GPU
            return PlanDraft(
                steps=[
                    PlanStep(
                        name=action.value,
                        op=action.value,
                        args={"workload": target},
                        description=(
                            f"move {ref}'s GPU memory to host memory and free its GPU"
                            if suspend
                            else f"put {ref}'s GPU memory back and let its GPU calls go on"
                        ),
                    )
                ],
                summary=(
                    f"Suspend the GPU state of {ref} in place: it stays alive, its GPU is freed"
                    if suspend
                    else f"Resume the GPU state of {ref} on its GPU"
                ),
                saves="the workload's GPU state is kept in its host memory; nothing is lost",
                rollback=(
                    f"clawpoint resume-gpu {ref}" if suspend else f"clawpoint suspend-gpu {ref}"
                ),
                scope=self._scope(rec),
            )
        raise not_supported(NAME, action)

    def _move_steps(self, rec: WorkloadRecord, dest: str) -> list[PlanStep]:
        """The steps that stop ``rec`` for a move to ``dest``: a standby wrapper started on
        ``dest`` first and the workload handed to it (``moves``), or a plain stop."""
        ref = f"{NAME}:{rec.name}"
        if not (self.settings.migration.handoff and _hands_off(rec.engine)):
            return [
                PlanStep(
                    name="checkpoint",
                    op="checkpoint",
                    args={"workload": rec.name, "stop": True},
                    description=f"checkpoint {ref} and stop it on {rec.node}",
                )
            ]
        last = next(iter(self.store.list(rec.name)), None)
        size = last.size_bytes if last else (_resident_bytes(rec.pid) if rec.pid else None)
        mode, why = moves.choose_mode(self.settings, rec.engine, size)
        return [
            PlanStep(
                name="standby",
                op="standby",
                args={"workload": rec.name, "node": dest},
                description=f"start a standby wrapper for {ref} on {dest} (nothing paused yet)",
            ),
            PlanStep(
                name="checkpoint",
                op="checkpoint",
                args={"workload": rec.name, "stop": True, "handoff": "$standby.socket",
                      "mode": mode},
                description=f"checkpoint {ref} and stop it on {rec.node}, then hand it to the "
                f"standby ({mode}: {why})",
            ),
        ]  # fmt: skip

    def _require_restorable(self, name: str) -> None:
        """Refuse to plan a restore when no checkpoint of ``name`` can possibly verify.

        Cheap (sizes only); the wrapper still verifies every byte before it resumes one and
        fails rather than start from scratch."""
        ref = f"{NAME}:{name}"
        published = self.store.published_ids(name)
        if not published:
            raise errors.NotFound(
                f"{ref} has no checkpoint to restore",
                hint="a person can start it from scratch: "
                + errors.step("resume_workload", workload=ref, fresh=True)
                + " (for a failed one: "
                + errors.step("failover_workload", workload=ref, fresh=True)
                + ")",
            )
        for info in self.store.candidates(name):
            try:
                self.store.verify(info.id, digests=False)
                return
            except errors.CorruptCheckpoint:
                continue
        untrusted = [i.id for i in self.store.list(name) if i.status is CheckpointStatus.UNTRUSTED]
        if untrusted:
            raise errors.UntrustedCheckpoint(
                f"no checkpoint of {ref} can be restored ({', '.join(published)}): "
                f"{', '.join(untrusted)} failed manifest authentication and the rest are "
                "corrupt; nothing was changed",
                hint=f"see why with {errors.step('list_checkpoints', workload=ref, detail=True)}; one "
                "you wrote before "
                "checkpoints were signed can be re-signed ('clawpoint checkpoints --reseal ID') "
                f"if nobody else could write to it; else start from scratch: clawpoint resume "
                f"{ref} --fresh (losing its progress)",
                details={"checkpoints": published, "untrusted": untrusted},
            )
        raise errors.CorruptCheckpoint(
            f"every checkpoint of {ref} is corrupt ({', '.join(published)}); nothing was changed",
            hint=f"a person can start it from scratch, losing its progress: "
            f"clawpoint resume {ref} --fresh (failover ... --fresh for a failed one)",
            details={"checkpoints": published},
        )

    def _plan_fresh(self, rec: WorkloadRecord, dest: str, *, fence: bool) -> PlanDraft:
        """Start ``rec`` from scratch on ``dest``: an explicit request by a person (``--fresh``)."""
        ref = f"{NAME}:{rec.name}"
        n = len(self.store.published_ids(rec.name))
        steps = [
            PlanStep(
                name="fence",
                op="fence",
                args={"workload": rec.name},
                description="make sure no copy of the workload is still running",
            )
        ] if fence else []  # fmt: skip
        steps.append(
            _start_step(
                rec.name,
                dest,
                None,
                f"start {ref} on {dest} FROM SCRATCH: restore no checkpoint",
                fresh=True,
            )
        )
        return PlanDraft(
            steps=steps,
            summary=f"Start {ref} on {dest} from scratch (--fresh): none of its {n} checkpoint(s) "
            "is restored and all its progress is lost",
            saves="nothing: the workload starts over (its checkpoints are kept)",
            rollback=f"its checkpoints stay in the store: clawpoint checkpoints {ref}",
            scope=self._move_scope(rec, dest),
        )

    def _plan_restore(self, checkpoint_id: str, params: MoveParams) -> PlanDraft:
        ckpt = self.store.get(checkpoint_id)
        self.store.verify(checkpoint_id, digests=False)  # known corrupt or truncated: refuse now
        rec = self.registry.get(ckpt.lineage)
        if rec is not None:
            rec = self._refresh(rec)
            if rec.state in _LIVE:
                raise errors.Conflict(
                    f"{NAME}:{ckpt.lineage} is running; restoring it would run two copies",
                    hint=f"preempt it first ({errors.step('preempt_workload', workload=f'{NAME}:{ckpt.lineage}')})"
                    " or migrate it",
                )
        if rec is None:
            raise errors.NotFound(
                f"checkpoint {checkpoint_id} belongs to no known workload",
                hint="start it with 'clawpoint run --name NAME -- CMD' to restore it",
            )
        dest = self._pick_target(exclude=set(), requested=params.to or rec.node)
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
            saves=self._with_files(
                f"restores the state saved at {ckpt.created_at:%Y-%m-%d %H:%M:%S} UTC", ckpt
            ),
            rollback=f"preempt it: clawpoint preempt {NAME}:{ckpt.lineage}",
            scope=self._move_scope(rec, dest),
        )

    def _with_files(self, saves: str, ckpt: CheckpointInfo) -> str:
        """``saves`` plus what the restore will do to the files the workload wrote."""
        note = files.plan_note(ckpt, self.settings.checkpoint.file_policy)
        return f"{saves}; {note}" if note else saves

    def _plan_delete(self, checkpoint_id: str) -> PlanDraft:
        ckpt = self.store.get(checkpoint_id)
        rec = self.registry.get(ckpt.lineage)
        # Protected by goodness, not age: the newest checkpoint that verifies (newer corrupt
        # ones are found, marked and skipped here), whatever lies above it. Execution asks
        # again, under the store's lock (``check_deletable`` and the delete step).
        protected = self._last_good(ckpt.id) is not None
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
                "newest_of_live_workload": protected,
            },
        )

    def _protects(self, lineage: str) -> bool:
        """Whether the newest good checkpoint of ``lineage`` is protected from deletion: its
        workload is not gone (running, stopped or failed: it may need it to come back)."""
        rec = self.registry.get(lineage)
        return rec is not None and rec.state in (
            WorkloadState.RUNNING,
            WorkloadState.CHECKPOINTING,
            WorkloadState.STOPPED,
            WorkloadState.FAILED,
        )

    def _last_good(self, checkpoint_id: str) -> errors.Conflict | None:
        """Why ``checkpoint_id`` may not be deleted now (the newest good checkpoint of a
        workload that is not gone), or None."""
        live = self._protects(parse_checkpoint_id(checkpoint_id)[0])
        return retention.last_good_problem(self.store, checkpoint_id, live=live, label=f"{NAME}:")

    def check_deletable(self, checkpoint_id: str) -> None:
        """Refuse (Conflict ``last-good-checkpoint``) the deletion of the newest good
        checkpoint of a workload that is not gone, as its newer checkpoints verify now."""
        problem = self._last_good(checkpoint_id)
        if problem is not None:
            raise problem

    def _plan_drain(self, node: str, params: DrainParams) -> PlanDraft:
        info = self.get_node(node)
        save = params.save
        steps: list[PlanStep] = []
        running = [w for w in self.workloads() if w.node == node and w.state in _LIVE]
        targets: list[str] = []
        for w in running:
            if save:
                dest = self._pick_target(exclude={node}, requested=params.to)
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
                    "reason": params.reason or "drained by clawpoint",
                },
                description=f"mark {info.id} unschedulable",
            )
        )
        onto = f" onto {params.to}" if targets and params.to else ""
        return PlanDraft(
            steps=steps,
            summary=f"Drain {info.id}: "
            + (
                f"move {len(running)} workload(s) off it{onto}"
                if save
                else f"kill {len(running)} workload(s) on it"
            )
            + ", then cordon it",
            saves="the full state of every workload on it"
            if save
            else "nothing: running work is lost",
            rollback=f"return it to service: clawpoint nodes undrain {info.id}",
            scope={
                "backend": NAME,
                "node": node,
                "node_labels": info.labels,
                "workloads": [w.id for w in running],
                "targets": targets,
            },
        )

    def _plan_cordon(self, node: str, params: CordonParams) -> PlanDraft:
        info = self.get_node(node)
        if not info.schedulable:
            raise errors.Conflict(
                f"{info.id} is already {info.state}: it takes no new workloads",
                hint="nothing to do; 'clawpoint nodes' shows each node's state",
            )
        return PlanDraft(
            steps=[
                PlanStep(
                    name="cordon",
                    op="set_node",
                    args={
                        "node": node,
                        "schedulable": False,
                        "reason": params.reason or "cordoned by clawpoint",
                    },
                    description=f"mark {info.id} unschedulable; its workloads keep running",
                )
            ],
            summary=f"Cordon {info.id}: nothing new lands there; "
            f"{len(info.workloads)} workload(s) keep running",
            saves="nothing to save: no workload moves",
            rollback=f"return it to service: clawpoint nodes undrain {info.id}",
            scope={"backend": NAME, "node": node, "node_labels": info.labels},
        )

    def _plan_undrain(self, node: str) -> PlanDraft:
        info = self.get_node(node)
        if info.schedulable:
            raise errors.Conflict(
                f"{info.id} is not drained: it already takes workloads",
                hint="nothing to undo; 'clawpoint nodes' shows each node's state",
            )
        return PlanDraft(
            steps=[
                PlanStep(
                    name="uncordon",
                    op="set_node",
                    args={"node": node, "schedulable": True, "reason": ""},
                    description=f"mark {info.id} schedulable again",
                )
            ],
            summary=f"Undrain {info.id}: return it to service (new workloads may land there)",
            saves="nothing to save: no workload moves",
            rollback=f"drain it again: clawpoint drain {info.id}",
            scope={"backend": NAME, "node": node, "node_labels": info.labels},
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
                hint=f"see its state with {errors.step('list_workloads')}"
                + (
                    f"; a failed workload is recovered with {errors.step('failover_workload')}"
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
