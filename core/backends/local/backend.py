"""The local backend: workloads under the wrapper on this machine, placed on virtual nodes.

Virtual nodes come from configuration (name, price, spot flag, labels); their runtime state
(schedulable, health) lives in the ``local_nodes`` table. A workload runs under
``clawpoint run`` (core.wrapper); moving it to another node means checkpointing it and
starting a new wrapper that restores the checkpoint with that node recorded. All of that is
real (real CRIU images, real processes); only the node boundary is virtual, which is what
makes this backend useful for demos, tests and single-host deployments.

This module is the inventory (nodes, workloads, checkpoints), the launcher and the node
state; plans come from ``plans.PLANS`` and steps from ``steps.STEPS`` (dispatch tables
keyed by the catalogue's action and the step op), each function taking the backend as a
narrow protocol (``context``). Each step is safe to re-check after a crash
(``recovery``). Those tables are imported when a plan or a step needs them, not with the
backend: read commands (``clawpoint workloads``) build the backend and never plan.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core import errors
from core.actions import ActionParams
from core.backends import dispatch
from core.backends.base import PlanDraft, ProgressFn
from core.backends.local.common import (
    _LIVE,
    NAME,
    _pid_alive,
    _wrapper_alive,
)
from core.backends.local.config import LocalBackendConfig, LocalNodeConfig, LocalPoolConfig
from core.config import Settings
from core.model import (
    Action,
    CheckpointInfo,
    NodeCondition,
    NodeConditionType,
    NodeHealth,
    NodeInfo,
    PoolInfo,
    WorkloadInfo,
    WorkloadState,
    utcnow,
    validate_name,
)
from core.signals.sla import Progress, read_progress
from core.specs import RunSpec
from core.state.db import Database
from core.state.workloads import WorkloadRecord, WorkloadRegistry
from core.store.store import CheckpointStore
from core.wrapper import cgroup_limits
from core.wrapper.launch import launch_detached


class LocalBackend:
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
        from core.backends.local import plans

        return dispatch.capabilities(plans.PLANS)

    @property
    def node_config(self) -> dict[str, LocalNodeConfig]:
        """The configured virtual nodes by name (``LocalContext``)."""
        return self._node_config

    @property
    def pool_config(self) -> dict[str, LocalPoolConfig]:
        """The ``[local.pools.NAME]`` bounds by pool name (``LocalContext``)."""
        return self.config.pools

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
            cpus=cfg.cpu_count,
            memory_mb=cfg.memory_mb,
            gpus=cfg.gpus,
            gpu_class=cfg.gpu_class,
            workloads=placed,
        )

    def nodes(self) -> list[NodeInfo]:
        """The configured nodes that are up: a node a pool released is not listed."""
        overrides = self._node_overrides()
        workloads = self.workloads()
        return [
            self._node_info(
                cfg,
                overrides,
                [w.id for w in workloads if w.node == cfg.name and w.state in _LIVE],
            )
            for cfg in self.config.nodes
            if not overrides.get(cfg.name, {}).get("released")
        ]

    def released_nodes(self) -> set[str]:
        """The configured nodes a pool has released (``scale_pool`` down)."""
        return {name for name, o in self._node_overrides().items() if o.get("released")}

    def pools(self) -> list[PoolInfo]:
        """``PoolSource``: the pools of the configured nodes (their ``pool`` label)."""
        from core.backends.local import pools

        return pools.pools(self, self.released_nodes())

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
        """``Launcher``: the named node checked, or the least busy, cheapest healthy one; a
        spec with a size needs a cgroup this user may write (refused here, nothing started)."""
        if spec.cpus is not None or spec.memory_mb is not None:
            cgroup_limits.require(self.settings)
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

    def refresh(self, record: WorkloadRecord) -> WorkloadRecord:
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
        return [self._with_use(self.refresh(r).to_info()) for r in self.registry.list()]

    def get_workload(self, name: str) -> WorkloadInfo:
        validate_name(name, what="workload name")
        return self._with_use(self.refresh(self.registry.require(name)).to_info())

    def _with_use(self, info: WorkloadInfo) -> WorkloadInfo:
        """A live workload with a memory limit, with what its cgroup is charged now (the
        planner's resize rule reads it); others as they are."""
        if info.memory_mb is None or info.pid is None or info.state not in _LIVE:
            return info
        group = cgroup_limits.of_process(self.settings, info.pid)
        used = group.usage_bytes() if group is not None else None
        if used is None:
            return info
        return info.model_copy(update={"memory_used_mb": -(-used // cgroup_limits.MIB)})

    def checkpoints(self, workload: str | None = None) -> list[CheckpointInfo]:
        if workload is not None:
            validate_name(workload, what="workload name")
        return [self._qualify(c) for c in self.store.list(workload)]

    def _qualify(self, ckpt: CheckpointInfo) -> CheckpointInfo:
        parent = f"{NAME}:{ckpt.parent}" if ckpt.parent else None
        return ckpt.model_copy(update={"id": f"{NAME}:{ckpt.id}", "parent": parent})

    # ---------------------------------------------------------------- planning and steps
    def plan(self, action: Action, target: str, params: ActionParams) -> PlanDraft:
        """The draft of ``action`` on ``target`` from the plan table (``plans.PLANS``), its
        steps' arguments and references checked against their models (``step_args``)."""
        from core.backends.local import plans, step_args

        return dispatch.plan(
            plans.PLANS, self, action, target, params, backend=NAME,
            why_not=plans.WHY_NOT_BY_ACTION, args=step_args.ARGS, outputs=step_args.OUTPUTS,
        )  # fmt: skip

    def check_deletable(self, checkpoint_id: str) -> None:
        """Refuse (Conflict ``last-good-checkpoint``) the deletion of the newest good
        checkpoint of a workload that is not gone, as its newer checkpoints verify now."""
        from core.backends.local import planning

        planning.check_deletable(self, checkpoint_id)

    def run_step(self, op: str, args: dict[str, Any], progress: ProgressFn) -> dict[str, Any]:
        """Run the step ``op`` from the step table (``steps.STEPS``), its answer held to
        its model (``step_args.OUTPUTS``)."""
        from core.backends.local import step_args, steps

        return dispatch.run_step(
            steps.STEPS, self, op, args, progress, backend=NAME, outputs=step_args.OUTPUTS
        )

    def reconcile_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        """After a step reported an error: did it take effect anyway (``recovery``)?"""
        from core.backends.local import recovery

        return recovery.reconcile_step(self, op, args, started_at)

    def recover_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        """After a crash: the output of a step that took effect (``recovery``), or None."""
        from core.backends.local import recovery

        return recovery.recover_step(self, op, args, started_at)

    def set_node(
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

    def set_released(self, node: str, released: bool) -> None:
        """Release a pool's node (it leaves ``nodes()``) or provision it again: up,
        schedulable and healthy, like a new machine."""
        validate_name(node, what="node name")
        if node not in self._node_config:
            raise errors.NotFound(f"no node {NAME}:{node}", hint=errors.step("list_pools"))
        with self.db.write() as conn:
            conn.execute(
                "INSERT INTO local_nodes(name, schedulable, health, reason, released, updated_at) "
                "VALUES(?, 1, 'healthy', '', ?, ?) ON CONFLICT(name) DO UPDATE SET "
                "schedulable=1, health='healthy', reason='', released=excluded.released, "
                "updated_at=excluded.updated_at",
                (node, int(released), utcnow().isoformat()),
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
        self.set_node(
            node,
            schedulable=current.schedulable if schedulable is None else schedulable,
            reason=reason,
            health=health or current.health.value,
        )
        return self.get_node(node)
