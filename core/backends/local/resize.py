"""``resize`` on the local backend: new CPU and memory limits for a workload, in place when
its node has room, else moved to a node that fits with the new limits on the restored tree.

The shared rules (size after, which node fits, risk, the plan's words) are
``core.backends.sizing``'s; the limits are cgroup limits (``core.wrapper.cgroup_limits``).

- In place (``pick_node`` returns its own node): one ``set_limits`` step writes the limit
  files of the workload's cgroup (making one and moving its tree there if it ran without a
  size) and records the size. No checkpoint, no pause; safe when it gives no less.
- Moved: the migrate path, the same steps (``planning.move_steps``, ``start_step``: a
  standby and a handoff where the engine can), with the new size on the standby and start
  steps: the new wrapper restores the tree into a new cgroup with the new limits before it
  runs. On a failure the workload is restarted on its node from its newest checkpoint with
  its old size (as a failed migrate is).
- Stopped (preempted): the new size is recorded for its resume (no pause); it must fit the
  node it will resume on.

Refused at plan time, nothing changed: no node fits (``sizing``: exit 10 naming each node),
no writable cgroup (exit 4: run as root or set ``[local] cgroup_root``), a memory limit below
what the workload uses now (it would be OOM-killed: exit 10 naming the usage), GPUs (local
workloads have no GPU limits). Limits: CPU and memory only; the node's capacity is the
configured size, not what the host has free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core import errors
from core.actions import ResizeParams
from core.backends import sizing
from core.backends.base import PlanDraft, ProgressFn
from core.backends.local.common import _LIVE, NAME, _pid_alive
from core.backends.local.context import LocalContext, LocalStepContext
from core.backends.local.planning import (
    estimate_pause,
    move_scope,
    move_steps,
    require_state,
    scope,
    start_step,
    workload_record,
)
from core.backends.local.step_args import LimitsArgs, StartArgs, step
from core.checkpoint import engine
from core.model import Action, NodeInfo, WorkloadState
from core.sizes import memory_text
from core.state.workloads import WorkloadRecord
from core.wrapper import cgroup_limits

Obj = dict[str, Any]


def plan_resize(ctx: LocalContext, target: str, params: ResizeParams) -> PlanDraft:
    """New limits for a running or stopped workload (see the module's docstring)."""
    rec = workload_record(ctx, target)
    require_state(rec, {WorkloadState.RUNNING, WorkloadState.STOPPED}, Action.RESIZE)
    if params.gpus or params.gpu_class:
        raise errors.NotSupported(
            f"local workloads have no GPU limits: cannot give {NAME}:{target} GPUs",
            hint=f"resize its {errors.arg('cpus')} or {errors.arg('memory')} only",
        )
    info = rec.to_info()
    before = sizing.size_of(info)
    after = sizing.wanted(info, params)
    cgroup_limits.require(ctx.settings)  # refused before anything is planned
    nodes = ctx.nodes()
    live = rec.state is not WorkloadState.STOPPED
    to = params.to if live else (params.to or rec.node)
    if not live and params.to and params.to != rec.node:
        raise errors.InvalidInput(
            f"{NAME}:{target} is stopped: its new size is recorded for its resume, on its node",
            hint="resume it where you want it (clawpoint resume --to NODE), then resize it",
        )
    dest = sizing.pick_node(nodes, after, used_by_others(ctx, rec), workload=info, to=to)
    source = next((n for n in nodes if n.name == rec.node), None)
    if live:
        refuse_below_usage(ctx, rec, after)
    if not live or dest.name == rec.node:
        return _in_place(ctx, rec, info_size=before, after=after, node=dest, live=live)
    return _moved(ctx, rec, before, after, source=source, dest=dest)


def _in_place(
    ctx: LocalContext,
    rec: WorkloadRecord,
    *,
    info_size: sizing.Size,
    after: sizing.Size,
    node: NodeInfo,
    live: bool,
) -> PlanDraft:
    ref = f"{NAME}:{rec.name}"
    what = "write its cgroup's limits" if live else "record them for its resume"
    limits = LimitsArgs(
        workload=rec.name, cpus=after.cpus, memory_mb=after.memory_mb,
        was_cpus=rec.cpus, was_memory_mb=rec.memory_mb,
    )  # fmt: skip
    steps = [step("set-limits", "set_limits", limits, f"give {ref} {after.text()}: {what}")]
    return sizing.resize_draft(
        rec.to_info(), info_size, after, source=node, target=node, steps=steps, pause_s=0.0,
        scope=scope(ctx, rec), how="cgroup limits" if live else "stopped: applied on resume",
    )  # fmt: skip


def _moved(
    ctx: LocalContext,
    rec: WorkloadRecord,
    before: sizing.Size,
    after: sizing.Size,
    *,
    source: NodeInfo | None,
    dest: NodeInfo,
) -> PlanDraft:
    """The migrate path to ``dest``, the new limits on the standby and the start."""
    size = (after.cpus, after.memory_mb)
    stops = move_steps(ctx, rec, dest.name, limits=size)
    steps = [
        *stops,
        start_step(
            rec.name, dest.name, "$checkpoint.checkpoint_id",
            f"restore it on {dest.name} from that checkpoint, with {after.text()}",
            after_standby=len(stops) > 1, size=size,
        ),
    ]  # fmt: skip
    undo = [
        step(
            "restart-source",
            "start",
            StartArgs(
                workload=rec.name,
                node=rec.node,
                restore_from=None,
                cpus=before.cpus,
                memory_mb=before.memory_mb,
            ),
            f"restart it on {rec.node} from its newest good checkpoint, with {before.text()}",
        )
    ]
    return sizing.resize_draft(
        rec.to_info(), before, after, source=source, target=dest, steps=steps,
        pause_s=estimate_pause(ctx, rec.name, move=stops) or 0.0, undo=undo,
        scope=move_scope(ctx, rec, dest.name), how="checkpoint, restore with new cgroup limits",
    )  # fmt: skip


def used_by_others(ctx: LocalContext, rec: WorkloadRecord) -> dict[str, sizing.Size]:
    """What the other live workloads of each node hold (their recorded sizes)."""
    by_node: dict[str, list[sizing.Size]] = {}
    for other in ctx.registry.list():
        if other.name == rec.name or other.state not in _LIVE or other.node is None:
            continue
        by_node.setdefault(other.node, []).append(sizing.Size(other.cpus, other.memory_mb))
    return {node: sizing.total(sizes) for node, sizes in by_node.items()}


def usage_bytes(ctx: LocalContext, rec: WorkloadRecord) -> int | None:
    """The memory the running workload uses now: its cgroup's charge, else its tree's
    resident memory (None: it has no process)."""
    if rec.pid is None or not _pid_alive(rec.pid):
        return None
    group = cgroup_limits.of_process(ctx.settings, rec.pid)
    used = group.usage_bytes() if group is not None else None
    return used if used is not None else cgroup_limits.tree_rss_bytes(engine.tree(rec.pid))


def refuse_below_usage(ctx: LocalContext, rec: WorkloadRecord, after: sizing.Size) -> None:
    """Conflict (nothing changed) when the new memory limit is below what it uses now: the
    kernel would reclaim, then OOM-kill it (or the restore would fail)."""
    if after.memory_mb is None or after.memory_mb == rec.memory_mb:
        return
    used = usage_bytes(ctx, rec)
    if used is not None and used > after.memory_mb * cgroup_limits.MIB:
        used_text = memory_text(-(-used // cgroup_limits.MIB))
        raise errors.Conflict(
            f"{NAME}:{rec.name} uses {used_text} now: a {memory_text(after.memory_mb)} limit "
            "would have it killed for lack of memory; nothing was changed",
            hint=f"ask for at least {used_text} ({errors.arg('memory')})",
            code="memory-below-usage",
            details={"usage_bytes": used, "asked_mb": after.memory_mb},
        )


def set_limits(ctx: LocalStepContext, args: Obj, progress: ProgressFn) -> Obj:
    """Give the workload its new limits: write them to its cgroup when it runs (making one
    and moving its tree there if it ran without a size), then record them (what every later
    start reads). Safe to run again: it sets, never adds."""
    a = LimitsArgs.model_validate(args)
    rec = ctx.registry.require(a.workload)
    now = (rec.cpus, rec.memory_mb)
    if now not in ((a.was_cpus, a.was_memory_mb), (a.cpus, a.memory_mb)):  # latter: ran before
        raise errors.Conflict(
            f"the size of {NAME}:{rec.name} changed since the plan was made; nothing was changed",
            hint="plan the resize again: its risk depends on the size in force",
        )
    held: tuple[float | None, int | None] = (a.cpus, a.memory_mb)
    where = ""
    if rec.state in _LIVE and rec.pid is not None and _pid_alive(rec.pid):
        group = cgroup_limits.of_process(ctx.settings, rec.pid)
        if group is None:  # it ran without a size: a cgroup of its wrapper's, the tree moved in
            group = cgroup_limits.for_wrapper(ctx.settings, rec.name, rec.wrapper_pid).create()
            group.apply(a.cpus, a.memory_mb)
            group.adopt(engine.tree(rec.pid))
        else:
            group.apply(a.cpus, a.memory_mb)
        held, where = group.limits(), str(Path(group.rel))
    said = sizing.Size(a.cpus, a.memory_mb).text()
    ctx.registry.update(rec.name, cpus=a.cpus, memory_mb=a.memory_mb,
                        message=f"resized to {said}" + ("" if where else " (on its resume)"))  # fmt: skip
    return {"cpus": held[0], "memory_mb": held[1], "cgroup": where}
