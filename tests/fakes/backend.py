"""An in-memory backend at the port: the ``Backend`` protocol with no processes, no CRIU.

``FakeBackend`` keeps nodes, workloads and checkpoints in dicts and runs its plans' steps
(``checkpoint``, ``stop``, ``start``, ``set_node``) on them, so the service, the guardrails
and the journal can be exercised without the wrapper. ``ENTRY`` is its registry entry:
``core.backends.registry.register("fake", ENTRY)`` is all it takes to add it, and a
``[fake]`` section with ``enabled = true`` builds it (the ``nodes`` key names its nodes).

It lives in tests/ because it does nothing real: a demo of clawpoint should show real
workloads being saved and moved. Limits: state is per instance (one process); it takes the
catalogue's typed parameters (``core.actions``) like every backend.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core import actions as catalogue
from core import errors
from core.actions import ActionParams, CordonParams, DrainParams, MoveParams
from core.backends.base import PlanDraft, ProgressFn, not_supported
from core.backends.registry import BackendEntry
from core.config import Settings
from core.model import (
    Action,
    CheckpointInfo,
    CheckpointStatus,
    NodeInfo,
    PlanStep,
    WorkloadInfo,
    WorkloadState,
    utcnow,
    validate_name,
)
from core.state.db import Database

NAME = "fake"


class FakeConfig(BaseModel):
    """The ``[fake]`` section."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    nodes: list[str] = Field(default_factory=lambda: ["f1", "f2"])
    workloads: dict[str, str] = Field(default_factory=lambda: {"w1": "f1"})  # name -> node


class FakeBackend:
    name = NAME

    def __init__(self, config: FakeConfig | None = None) -> None:
        config = config or FakeConfig()
        self.schedulable = {n: True for n in config.nodes}
        self.placed: dict[str, tuple[WorkloadState, str | None]] = {
            w: (WorkloadState.RUNNING, node) for w, node in config.workloads.items()
        }
        self.saved: dict[str, list[CheckpointInfo]] = {}
        self.steps_run: list[tuple[str, dict[str, Any]]] = []

    # ------------------------------------------------------------------ inventory
    def capabilities(self) -> frozenset[Action]:
        return frozenset({Action.CHECKPOINT, Action.MIGRATE, Action.PREEMPT, Action.RESUME,
                          Action.DRAIN_NODE, Action.UNDRAIN_NODE, Action.CORDON_NODE})  # fmt: skip

    def nodes(self) -> list[NodeInfo]:
        return [
            NodeInfo(
                id=f"{NAME}:{n}",
                backend=NAME,
                name=n,
                schedulable=ok,
                state="up" if ok else "drained",
                workloads=[
                    f"{NAME}:{w}"
                    for w, (s, at) in self.placed.items()
                    if at == n and s is WorkloadState.RUNNING
                ],
            )
            for n, ok in self.schedulable.items()
        ]

    def get_node(self, name: str) -> NodeInfo:
        for node in self.nodes():
            if node.name == name:
                return node
        raise errors.NotFound(f"no node {NAME}:{name}", hint="list nodes with 'clawpoint nodes'")

    def workloads(self) -> list[WorkloadInfo]:
        return [self.get_workload(w) for w in self.placed]

    def get_workload(self, name: str) -> WorkloadInfo:
        validate_name(name, what="workload name")
        if name not in self.placed:
            raise errors.NotFound(f"no workload {NAME}:{name}", hint="list workloads first")
        state, node = self.placed[name]
        newest = self.saved.get(name, [])
        return WorkloadInfo(
            id=f"{NAME}:{name}", backend=NAME, name=name, state=state, node=node,
            engine="fake", last_checkpoint=newest[-1].id if newest else None,
        )  # fmt: skip

    def checkpoints(self, workload: str | None = None) -> list[CheckpointInfo]:
        if workload is not None:
            return list(reversed(self.saved.get(workload, [])))
        return [c for w in self.saved for c in reversed(self.saved[w])]

    # ------------------------------------------------------------------ planning
    def _free_node(self, exclude: str | None, wanted: str | None) -> str:
        if wanted:
            wanted = wanted.removeprefix(f"{NAME}:")
            self.get_node(wanted)
            if wanted == exclude:
                raise errors.InvalidInput(
                    f"{NAME}:{wanted} is where it already runs", hint="pick another node"
                )
            return wanted
        for n, ok in self.schedulable.items():
            if ok and n != exclude:
                return n
        raise errors.Conflict(
            "no schedulable fake node", hint="undrain one with 'clawpoint nodes undrain'"
        )

    def plan(self, action: Action, target: str, params: ActionParams) -> PlanDraft:
        if action not in self.capabilities():
            raise not_supported(NAME, action)
        model = catalogue.spec(action).params
        catalogue.expect(params, model)  # another action's parameters: InvalidInput
        if action in (Action.DRAIN_NODE, Action.UNDRAIN_NODE, Action.CORDON_NODE):
            return self._plan_node(action, self.get_node(target), params)
        w = self.get_workload(target)
        if action is Action.CHECKPOINT:
            step = PlanStep(name="checkpoint", op="checkpoint",
                            args={"workload": target, "stop": False},
                            description=f"checkpoint {w.id}")  # fmt: skip
            return PlanDraft(steps=[step], summary=f"Checkpoint {w.id}",
                             rollback="nothing to undo: a checkpoint only adds an image")  # fmt: skip
        if action is Action.PREEMPT:
            return PlanDraft(steps=self._move(target, None, tag=""), summary=f"Preempt {w.id}",
                             rollback=catalogue.undo_step(Action.RESUME, w.id))  # fmt: skip
        to = catalogue.expect(params, MoveParams).to
        if action is Action.RESUME:
            if w.state is not WorkloadState.STOPPED:
                raise errors.Conflict(f"{w.id} is {w.state.value}", hint="resume a stopped one")
            dest = self._free_node(None, to)
            step = PlanStep(name="start", op="start", args={"workload": target, "node": dest},
                            description=f"start {w.id} on {dest}")  # fmt: skip
            return PlanDraft(steps=[step], summary=f"Resume {w.id} on {dest}",
                             rollback=catalogue.undo_step(Action.PREEMPT, w.id))  # fmt: skip
        dest = self._free_node(w.node, to)
        return PlanDraft(steps=self._move(target, dest, tag=""), summary=f"Move {w.id} to {dest}",
                         rollback=catalogue.undo_step(Action.MIGRATE, w.id, to=w.node))  # fmt: skip

    def _plan_node(self, action: Action, node: NodeInfo, params: ActionParams) -> PlanDraft:
        undo = catalogue.undo_step(Action.UNDRAIN_NODE, node.id)
        if action is Action.UNDRAIN_NODE:
            if node.schedulable:
                raise errors.Conflict(f"{node.id} is in service", hint="nothing to undo")
            step = PlanStep(name="node", op="set_node",
                            args={"node": node.name, "schedulable": True, "reason": ""},
                            description=f"return {node.id} to service")  # fmt: skip
            return PlanDraft(steps=[step], summary=f"Undrain {node.id}", rollback="")
        if not node.schedulable:
            raise errors.Conflict(f"{node.id} is already out of service", hint=undo)
        if action is Action.CORDON_NODE:
            reason = catalogue.expect(params, CordonParams).reason
        else:
            reason = catalogue.expect(params, DrainParams).reason
        steps = [PlanStep(name="node", op="set_node",
                          args={"node": node.name, "schedulable": False, "reason": reason},
                          description=f"{action.value} {node.id}")]  # fmt: skip
        if action is Action.DRAIN_NODE:
            drain = catalogue.expect(params, DrainParams)
            for wid in node.workloads:
                name = wid.partition(":")[2]
                dest = self._free_node(node.name, drain.to) if drain.save else None
                steps += self._move(name, dest, tag=f"-{name}")
        where = f" onto {steps[-1].args['node']}" if steps[-1].op == "start" else ""
        return PlanDraft(steps=steps, summary=f"{action.value} {node.id}{where}", rollback=undo)

    @staticmethod
    def _move(name: str, dest: str | None, *, tag: str) -> list[PlanStep]:
        steps = [PlanStep(name=f"checkpoint{tag}", op="checkpoint",
                          args={"workload": name, "stop": True},
                          description=f"checkpoint and stop {NAME}:{name}")]  # fmt: skip
        if dest is not None:
            steps.append(PlanStep(name=f"start{tag}", op="start",
                                  args={"workload": name, "node": dest},
                                  description=f"start {NAME}:{name} on {dest}"))  # fmt: skip
        return steps

    # ------------------------------------------------------------------ steps
    def run_step(self, op: str, args: dict[str, Any], progress: ProgressFn) -> dict[str, Any]:
        self.steps_run.append((op, dict(args)))
        if op == "set_node":
            self.schedulable[str(args["node"])] = bool(args["schedulable"])
            return {"node": args["node"]}
        name = str(args["workload"])
        _, node = self.placed[name]
        if op == "checkpoint":
            newest = self.saved.get(name, [])
            seq = len(newest) + 1
            info = CheckpointInfo(
                id=f"{NAME}:{name}@{seq}", lineage=name, seq=seq, engine="fake", node=node,
                parent=newest[-1].id if newest else None, created_at=utcnow(), size_bytes=0,
                status=CheckpointStatus.GOOD, leave_running=not args.get("stop"),
            )  # fmt: skip
            self.saved.setdefault(name, []).append(info)
            if args.get("stop"):
                self.placed[name] = (WorkloadState.STOPPED, node)
            progress(1, 1, f"checkpoint {info.id}")
            return {"checkpoint_id": info.id}
        if op == "start":
            self.placed[name] = (WorkloadState.RUNNING, str(args["node"]))
            return {"node": args["node"]}
        raise errors.InvalidInput(f"unknown step {op!r}", hint="plan again")

    def recover_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        """Whether a step that started took effect, read from the state itself."""
        if op == "set_node":
            done = self.schedulable.get(str(args["node"])) == bool(args["schedulable"])
            return {"node": args["node"]} if done else None
        name = str(args["workload"])
        if op == "checkpoint":
            newer = [c for c in self.saved.get(name, []) if c.created_at >= started_at]
            return {"checkpoint_id": newer[-1].id} if newer else None
        state, node = self.placed.get(name, (WorkloadState.UNKNOWN, None))
        running = state is WorkloadState.RUNNING and node == args.get("node")
        return {"node": node} if op == "start" and running else None

    def reconcile_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        return self.recover_step(op, args, started_at)


def _build(settings: Settings, db: Database, config: FakeConfig) -> FakeBackend:
    return FakeBackend(config)


ENTRY: BackendEntry[FakeConfig] = BackendEntry(FakeConfig, _build, "in memory, for tests")
