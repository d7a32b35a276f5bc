"""An in-memory backend at the port: the ``Backend`` protocol with no processes, no CRIU.

``FakeBackend`` keeps nodes, workloads and checkpoints in dicts and runs its plans' steps
(``checkpoint``, ``stop``, ``start``, ``set_node``) on them, so the service, the guardrails
and the journal can be exercised without the wrapper. ``ENTRY`` is its registry entry:
``core.backends.registry.register("fake", ENTRY)`` is all it takes to add it, and a
``[fake]`` section with ``enabled = true`` builds it (the ``nodes`` key names its nodes).

It lives in tests/ because it does nothing real: a demo of clawpoint should show real
workloads being saved and moved. Limits: state is per instance (one process); parameters
are read from a mapping or an object with the same attribute names, so it follows either
way the service hands them over.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core import errors
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


def _param(params: Any, key: str, default: Any = None) -> Any:
    if isinstance(params, dict):
        return params.get(key, default)
    return getattr(params, key, default)


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
                          Action.DRAIN_NODE, Action.UNDRAIN_NODE})  # fmt: skip

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
    def _free_node(self, exclude: str | None, wanted: Any) -> str:
        if wanted:
            self.get_node(str(wanted))
            if wanted == exclude:
                raise errors.InvalidInput(
                    f"{NAME}:{wanted} is where it already runs", hint="pick another node"
                )
            return str(wanted)
        for n, ok in self.schedulable.items():
            if ok and n != exclude:
                return n
        raise errors.Conflict("no schedulable fake node", hint="undrain one")

    def plan(self, action: Action, target: str, params: Any) -> PlanDraft:
        if action not in self.capabilities():
            raise not_supported(NAME, action)
        if action in (Action.DRAIN_NODE, Action.UNDRAIN_NODE):
            node = self.get_node(target)
            drain = action is Action.DRAIN_NODE
            if not drain and node.schedulable:
                raise errors.Conflict(f"{node.id} is not drained", hint="nothing to undo")
            steps = [PlanStep(name="node", op="set_node",
                              args={"node": target, "schedulable": not drain},
                              description=("drain " if drain else "undrain ") + node.id)]  # fmt: skip
            for wid in node.workloads if drain else []:
                name = wid.partition(":")[2]
                dest = self._free_node(target, _param(params, "to"))
                steps += self._move(name, dest, tag=name)
            return PlanDraft(steps=steps, summary=f"{action.value} {node.id}")
        w = self.get_workload(target)
        if action is Action.CHECKPOINT:
            stop = bool(_param(params, "stop", False))
            return PlanDraft(
                steps=[
                    PlanStep(
                        name="checkpoint",
                        op="checkpoint",
                        args={"workload": target, "stop": stop},
                        description=f"checkpoint {w.id}",
                    )
                ],
                summary=f"Checkpoint {w.id}" + (" and stop it" if stop else ""),
            )
        if action is Action.PREEMPT:
            return PlanDraft(steps=self._move(target, None, tag=""), summary=f"Preempt {w.id}")
        if action is Action.RESUME:
            if w.state is not WorkloadState.STOPPED:
                raise errors.Conflict(f"{w.id} is {w.state.value}", hint="resume a stopped one")
            dest = self._free_node(None, _param(params, "to"))
            step = PlanStep(name="start", op="start", args={"workload": target, "node": dest},
                            description=f"start {w.id} on {dest}")  # fmt: skip
            return PlanDraft(steps=[step], summary=f"Resume {w.id} on {dest}")
        dest = self._free_node(w.node, _param(params, "to"))
        return PlanDraft(steps=self._move(target, dest, tag=""), summary=f"Move {w.id} to {dest}")

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
            seq = len(self.saved.get(name, [])) + 1
            info = CheckpointInfo(
                id=f"{NAME}:{name}@{seq}", lineage=name, seq=seq, engine="fake", node=node,
                created_at=utcnow(), size_bytes=0, status=CheckpointStatus.GOOD,
                leave_running=not args.get("stop"),
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
        return None  # nothing is lost in memory: a started step is run again

    def reconcile_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        return None


def _build(settings: Settings, db: Database, config: FakeConfig) -> FakeBackend:
    return FakeBackend(config)


ENTRY: BackendEntry[FakeConfig] = BackendEntry(FakeConfig, _build, "in memory, for tests")
