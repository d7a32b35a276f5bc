"""The rules of ``resize``, stated once for every backend: what a workload will have, which
node can take it, and how risky and costly the change is.

A backend's resize plan reads the workload's size now (``WorkloadInfo`` cpus, memory_mb,
gpus, gpu_class: its limits or allocation), asks ``wanted`` for the size after (what the
parameters leave out stays as it is), ``pick_node`` for the node (its own when the new
size fits there and the caller named no other: a change in place; else the cheapest node
that fits), and states the plan through ``resize_draft``. How the change is made is the
backend's: new cgroup limits locally, a new allocation on Slurm, new requests on
Kubernetes (in place where the cluster allows, else a move).

Capacity a node does not report counts as not fitting: a plan must not promise room it did
not check. ``used`` is what the node's other workloads hold (the backend knows how to count
it: recorded limits locally, allocated TRES on Slurm, pod requests on Kubernetes).

Limits: pure functions (no I/O); one workload at a time (no packing of several).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core import errors
from core.action_params import ResizeParams
from core.actions import undo_step
from core.backends.base import PlanDraft
from core.model import Action, NodeHealth, NodeInfo, PlanScope, PlanStep, RiskClass, WorkloadInfo
from core.sizes import memory_text


@dataclass(frozen=True)
class Size:
    """What a workload may use. None: not limited (cpus, memory) or any model (gpu_class)."""

    cpus: float | None = None
    memory_mb: int | None = None
    gpus: int = 0
    gpu_class: str | None = None

    def text(self) -> str:
        """``2 CPUs, 4Gi, 1 GPU (a100)``; ``unlimited`` when nothing is set."""
        said = []
        if self.cpus is not None:
            said.append(f"{self.cpus:g} CPU{'s' if self.cpus != 1 else ''}")
        if self.memory_mb is not None:
            said.append(memory_text(self.memory_mb))
        if self.gpus:
            said.append(f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}")
        if self.gpu_class:
            said.append(f"({self.gpu_class})" if self.gpus else f"GPU class {self.gpu_class}")
        return " ".join(said) if said else "unlimited"


def size_of(workload: WorkloadInfo) -> Size:
    return Size(workload.cpus, workload.memory_mb, workload.gpus, workload.gpu_class)


def wanted(workload: WorkloadInfo, params: ResizeParams) -> Size:
    """The size after the resize; Conflict (exit 10) when it is the size the workload has."""
    now = size_of(workload)
    after = Size(
        cpus=params.cpus if params.cpus is not None else now.cpus,
        memory_mb=params.memory_mb if params.memory_mb is not None else now.memory_mb,
        gpus=params.gpus if params.gpus is not None else now.gpus,
        gpu_class=(params.gpu_class or now.gpu_class) if (params.gpus or now.gpus) else None,
    )
    if params.gpu_class and not after.gpus:
        raise errors.InvalidInput(
            f"gpu_class {params.gpu_class} for {workload.id}, which has no GPU",
            hint=f"pass {errors.arg('gpus')} too (the number of GPUs of that class it needs)",
        )
    if after == now:
        raise errors.Conflict(
            f"{workload.id} already has {now.text()}",
            hint=f"nothing to do; {errors.step('list_workloads')} shows each workload's size",
        )
    return after


def total(sizes: Iterable[Size]) -> Size:
    """What several workloads hold together (unlimited ones count nothing)."""
    cpus, mem, gpus = 0.0, 0, 0
    for s in sizes:
        cpus += s.cpus or 0.0
        mem += s.memory_mb or 0
        gpus += s.gpus
    return Size(cpus, mem, gpus)


def misfit(node: NodeInfo, want: Size, used: Size) -> str | None:
    """Why ``want`` does not fit on ``node`` beside ``used``; None when it fits."""
    if want.cpus is not None:
        if node.cpus is None:
            return "its CPUs are not known"
        free = node.cpus - (used.cpus or 0.0)
        if want.cpus > free + 1e-9:
            return f"{free:g} of {node.cpus} CPUs free"
    if want.memory_mb is not None:
        if node.memory_mb is None:
            return "its memory is not known"
        free_mb = node.memory_mb - (used.memory_mb or 0)
        if want.memory_mb > free_mb:
            return f"{memory_text(max(free_mb, 0))} of {memory_text(node.memory_mb)} free"
    if want.gpus:
        free_gpus = node.gpus - used.gpus
        if want.gpus > free_gpus:
            return f"{free_gpus} of {node.gpus} GPUs free"
        if want.gpu_class and (node.gpu_class or "").lower() != want.gpu_class.lower():
            return f"its GPUs are {node.gpu_class or 'of an unknown class'}"
    return None


def pick_node(
    nodes: Sequence[NodeInfo],
    want: Size,
    used: Mapping[str, Size],
    *,
    workload: WorkloadInfo,
    to: str | None = None,
) -> NodeInfo:
    """The node the resized workload runs on: ``to`` when named (and it fits), else its own
    node when the new size fits there (in place), else the cheapest healthy schedulable node
    that fits (then most free memory, then name). ``used``: what each node's other
    workloads hold, by node name. Conflict (exit 10) naming why each node does not fit."""
    here = workload.node

    def why_not(node: NodeInfo) -> str | None:
        if node.name != here and (not node.schedulable or node.health is not NodeHealth.HEALTHY):
            return "not schedulable" if node.health is NodeHealth.HEALTHY else node.health.value
        return misfit(node, want, used.get(node.name, Size()))

    if to is not None:
        node = next((n for n in nodes if n.name == to), None)
        if node is None:
            raise errors.NotFound(
                f"no node {to} for {workload.id}",
                hint=f"list nodes with {errors.step('list_nodes')}",
            )
        reason = why_not(node)
        if reason:
            raise _no_fit(workload, want, {node.name: reason})
        return node
    reasons: dict[str, str] = {}
    fitting: list[NodeInfo] = []
    for node in nodes:
        reason = why_not(node)
        if reason is None and node.name == here:
            return node
        if reason is None:
            fitting.append(node)
        else:
            reasons[node.name] = reason
    if not fitting:
        raise _no_fit(workload, want, reasons)

    def free_mb(n: NodeInfo) -> int:
        return (n.memory_mb or 0) - (used.get(n.name, Size()).memory_mb or 0)

    return min(fitting, key=lambda n: (n.price_per_hour, -free_mb(n), n.name))


def _no_fit(workload: WorkloadInfo, want: Size, reasons: Mapping[str, str]) -> errors.Conflict:
    said = "; ".join(f"{n}: {r}" for n, r in sorted(reasons.items())[:6])
    more = f" (and {len(reasons) - 6} more)" if len(reasons) > 6 else ""
    return errors.Conflict(
        f"no node fits {workload.id} at {want.text()}: {said or 'no nodes'}{more}",
        hint="ask for less, free a node, or add capacity "
        f"({errors.step('list_pools')}, {errors.step('scale_pool')})",
        code="no-node-fits",
        details={"nodes": dict(reasons)},
    )


def gives_less(before: Size, after: Size) -> bool:
    """``after`` takes something away: fewer CPUs or GPUs, less memory, or a limit where
    there was none (a workload may be using more than the new limit)."""

    def less(b: float | None, a: float | None) -> bool:
        return a is not None and (b is None or a < b)

    return (
        less(before.cpus, after.cpus)
        or less(before.memory_mb, after.memory_mb)
        or (after.gpus < before.gpus)
    )


def resize_risk(*, moves: bool, gives_less: bool) -> RiskClass:
    """Safe only in place and giving no less: a move pauses the workload, and a lower limit
    may throttle it or, for memory, kill it; a person (or a standing grant) decides those."""
    return RiskClass.DISRUPTIVE if moves or gives_less else RiskClass.SAFE


def _undo(workload: WorkloadInfo, before: Size) -> str:
    """How the old size is put back (a neutral next step, like every plan's rollback: the
    tool call for an agent, the command for a person; a limit that was not set cannot be
    unset by a resize, so it says so)."""
    args: dict[str, Any] = {}
    if before.cpus is not None:
        args["cpus"] = f"{before.cpus:g}"
    if before.memory_mb is not None:
        args["memory"] = memory_text(before.memory_mb)
    if before.gpus or before.gpu_class:
        args["gpus"] = before.gpus
    if before.gpu_class:
        args["gpu_class"] = before.gpu_class
    if not args:
        return f"none by resize: {workload.id} had no limits (migrate or restart it without them)"
    return f"resize it back: {undo_step(Action.RESIZE, workload.id, **args)}"


def resize_draft(
    workload: WorkloadInfo,
    before: Size,
    after: Size,
    *,
    source: NodeInfo | None,
    target: NodeInfo,
    steps: list[PlanStep],
    pause_s: float,
    scope: PlanScope,
    undo: list[PlanStep] | None = None,
    how: str = "",
    restarts: bool = False,
) -> PlanDraft:
    """A resize's plan as every backend states it: in place or moved, the pause, the cost
    difference between the nodes (``added_cost_per_hour`` when the new node is dearer),
    and the risk of ``resize_risk``. ``how``: the backend's words for the change;
    ``restarts``: the workload is checkpointed and restored even on its own node (Slurm's
    new allocation, a Kubernetes replacement pod): a pause like a move, at no cost change."""
    changes_node = source is None or source.name != target.name
    moves = changes_node or restarts
    delta = target.price_per_hour - (source.price_per_hour if source else 0.0)
    where = f"on {target.name}" if not changes_node else (
        f"from {source.name if source else 'nowhere'} to {target.name}"
    )  # fmt: skip
    summary = f"Resize {workload.id} from {before.text()} to {after.text()} {where}"
    if how:
        summary += f" ({how})"
    return PlanDraft(
        steps=steps,
        on_failure=undo or [],
        summary=summary,
        expected_pause_s=round(pause_s, 3) if moves else 0.0,
        saves="its full state (checkpointed and restored)"
        if moves
        else "nothing to save: it keeps running",
        rollback=_undo(workload, before),
        cost_effect=(
            f"{delta:+.2f}/h: {source.name if source else '-'} "
            f"({source.price_per_hour if source else 0:.2f}/h) -> {target.name} "
            f"({target.price_per_hour:.2f}/h)"
            if changes_node
            else "none: same node"
        ),
        scope=scope,
        risk=resize_risk(moves=moves, gives_less=gives_less(before, after)),
        added_cost_per_hour=max(0.0, delta) if changes_node else 0.0,
    )
