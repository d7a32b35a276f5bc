"""The Slurm backend's node pools: partitions under Slurm's power saving, and ``scale_pool``.

A pool is a partition named in ``[slurm.pools.NAME]`` whose nodes Slurm can power down and
up (``SuspendProgram``/``ResumeProgram`` in slurm.conf; on the loopback cluster they stop and
start the node's ``slurmd``). Its size is how many of them are not powered down; the
powered-down ones are its released nodes (and are not listed as nodes: they are capacity,
not failures). Slurm itself powers a node up when a pending job needs one; clawpoint decides
when to power nodes down, and powers them up ahead of demand.

Shrinking releases the nodes that lose least (``core.backends.capacity.victims``): each is
drained first (nothing new starts there); every wrapped job on it moves away from the nodes
going down as a drain moves it (with ``live_handoff``: to a standby job that takes the
workload over, a new job id, else requeued; without: checkpointed, requeued held and
released), or, when no node of the pool stays up for it, is left held with its state saved
(release it later); then the node is powered down. A node
that runs a job not under the wrapper cannot be saved, so it is never chosen. Growing powers
nodes up, waiting until each answers.

Limits: the price of a node is the pool's configured ``price_per_hour`` (Slurm knows none);
a node powered down by hand counts as released like any other.
"""

from __future__ import annotations

from typing import Any

from core import errors
from core.action_params import PoolSizeParams
from core.backends import capacity
from core.backends.base import PlanDraft, ProgressFn
from core.backends.slurm.context import SlurmContext
from core.backends.slurm.ids import check_reason, check_value
from core.backends.slurm.inventory import RELEASED_FLAGS, flags_of, node_states
from core.backends.slurm.moving import live_move, place, restart, save_and_stop
from core.backends.slurm.step_args import NodeStateArgs, PowerArgs, ResumeNodeArgs, step
from core.backends.slurm.step_args import read as read_args
from core.model import NodeInfo, PlanScope, PlanStep, PoolInfo, WorkloadInfo, WorkloadState, utcnow

BACKEND = "slurm"


def is_released(raw: dict[str, Any]) -> bool:
    """A node powered down, or on its way down: capacity given back, not a failure."""
    return bool(RELEASED_FLAGS & set(flags_of(node_states(raw))))


def pools(b: SlurmContext, raw_nodes: list[dict[str, Any]], up: list[NodeInfo]) -> list[PoolInfo]:
    """Every configured pool, from the controller's nodes (``raw_nodes``, powered down ones
    too) and the nodes up (``up``: ``SlurmBackend.nodes``)."""
    by_name = {n.name: n for n in up}
    out = []
    for name, cfg in sorted(b.cfg.pools.items()):
        partition = cfg.partition or name
        members = [r for r in raw_nodes if partition in (r.get("partitions") or [])]
        live = [by_name[str(r["name"])] for r in members if str(r.get("name")) in by_name]
        out.append(
            PoolInfo(
                id=f"{BACKEND}:{name}",
                backend=BACKEND,
                name=name,
                spot=cfg.spot,
                price_per_hour=cfg.price_per_hour,
                min_size=min(cfg.min_size, len(members)),
                max_size=len(members),
                size=len(live),
                nodes=[n.name for n in live],
                idle=[n.name for n in live if not n.workloads],
                released=[str(r["name"]) for r in members if is_released(r)],
                partition=partition,
            )
        )
    return out


def plan_scale_pool(b: SlurmContext, name: str, params: PoolSizeParams) -> PlanDraft:
    """Power nodes up, or save the work on the nodes that lose least and power them down."""
    pool = capacity.find_pool(b.pools(), name, backend=BACKEND)
    capacity.check_size(pool, params.size)
    if params.size > pool.size:
        return _grow(b, pool, params.size)
    return _shrink(b, pool, params.size)


def _grow(b: SlurmContext, pool: PoolInfo, size: int) -> PlanDraft:
    added = sorted(pool.released)[: size - pool.size]
    per_hour = pool.price_per_hour * len(added)
    timeout = b.cfg.power_timeout_s
    steps = [
        step(f"power_up-{n}", "power_up", PowerArgs(node=n, timeout_s=timeout),
             f"power {n} up and wait until it answers")
        for n in added
    ]  # fmt: skip
    scope = PlanScope(backend=BACKEND, pool=pool.name, partition=_partition(b, pool),
                      targets=added)  # fmt: skip
    return capacity.grow_draft(pool, size, added, steps, per_hour=per_hour, scope=scope)


def _partition(b: SlurmContext, pool: PoolInfo) -> str:
    return b.cfg.pools[pool.name].partition or pool.name


def _unsaved(b: SlurmContext, jobs: list[WorkloadInfo]) -> dict[str, float]:
    now = utcnow()
    out: dict[str, float] = {}
    for w in jobs:
        newest = b.newest_checkpoint(b.lineage(w), b.owner(w))
        out[w.id] = capacity.unsaved_s(w.started_at, newest.created_at if newest else None, now)
    return out


def _shrink(b: SlurmContext, pool: PoolInfo, size: int) -> PlanDraft:
    up = [b.get_node(n) for n in pool.nodes]
    jobs = {n.name: [b.get_workload(wid) for wid in n.workloads] for n in up}
    unwrapped = {n.name for n in up if any(not w.labels.get("lineage") for w in jobs[n.name])}
    eligible = [n for n in up if n.name not in unwrapped]
    if len(eligible) < pool.size - size:
        raise errors.Conflict(
            f"{pool.id} cannot shrink to {size}: {', '.join(sorted(unwrapped))} run(s) jobs not "
            "under the clawpoint wrapper, which cannot be saved",
            hint="wait until those jobs end, or shrink it less; jobs submitted with "
            "'clawpoint slurm submit' can be moved",
        )
    wrapped = [w for n in eligible for w in jobs[n.name] if w.state is WorkloadState.RUNNING]
    going = capacity.victims(eligible, pool.size - size, unsaved=_unsaved(b, wrapped))
    gone = {n.name for n in going}
    stays = bool(set(pool.nodes) - gone)
    reason = check_reason(f"clawpoint: pool {pool.name} scaling down")
    steps: list[PlanStep] = []
    moved: list[str] = []
    held: list[str] = []
    for node in going:
        steps.append(step(f"drain-{node.name}", "drain", NodeStateArgs(node=node.name,
                          reason=reason), f"drain {node.name}: nothing new starts there"))  # fmt: skip
        for w in jobs[node.name]:
            if w.state is not WorkloadState.RUNNING:
                continue
            # Away from every node going down; with none of the pool left, it stays held.
            if stays or w.partition != _partition(b, pool):
                avoid = check_value(",".join(sorted(gone)))
                if b.cfg.live_handoff:  # as a drain moves it: a standby first, else requeued
                    steps += live_move(b, w, None, avoid, prefix="job")
                else:
                    steps += save_and_stop(b, w, prefix="job")
                    steps += restart(b, w.name, place(None, avoid), prefix="job")
                moved.append(w.id)
            else:
                steps += save_and_stop(b, w, prefix="job")
                held.append(w.id)
        steps.append(step(f"power_down-{node.name}", "power_down",
                          PowerArgs(node=node.name, timeout_s=b.cfg.power_timeout_s),
                          f"power {node.name} down"))  # fmt: skip
    undo = [
        step(f"undrain-{n.name}", "resume_node", ResumeNodeArgs(node=n.name, timeout_s=30),
             f"return {n.name} to service")
        for n in going if n.schedulable
    ]  # fmt: skip
    scope = PlanScope(backend=BACKEND, pool=pool.name, partition=_partition(b, pool),
                      workloads=[*moved, *held])  # fmt: skip
    return capacity.shrink_draft(
        pool, size, sorted(gone), steps, undo=undo, moved=moved, held=held,
        per_hour=-pool.price_per_hour * len(going), scope=scope, verb="power down", unit="job",
    )  # fmt: skip


def power_up(b: SlurmContext, args: dict[str, Any], progress: ProgressFn) -> dict[str, Any]:
    """POWER_UP, then wait until the node answers (Slurm ran its ResumeProgram)."""
    a = read_args(PowerArgs, args)
    node = b.node_name(a.node)
    if not b.power_state(node).released:
        return {"node": node, "state": "up"}  # already up (a job's demand woke it): done
    b.transport.run("scontrol", ["update", f"nodename={node}", "state=POWER_UP"])

    def answers() -> str | None:
        state = b.power_state(node)
        return "up" if state.answers else None

    return {"node": node, "state": b.wait_until(f"{node} to power up", _t(a, b), answers)}


def power_down(b: SlurmContext, args: dict[str, Any], progress: ProgressFn) -> dict[str, Any]:
    """POWER_DOWN a node no job runs on, then wait until Slurm reports it powered down.
    Refuses (Conflict) while a job is still there: one that started after the plan."""
    a = read_args(PowerArgs, args)
    node = b.node_name(a.node)
    state = b.power_state(node)
    if state.jobs:
        raise errors.Conflict(
            f"Slurm node {node} still runs job(s) {', '.join(state.jobs)}: not powered down",
            hint=f"plan the scale-down again ({errors.step('scale_pool')}): the new plan saves "
            "and moves them first",
        )
    if not state.released:
        b.transport.run("scontrol", ["update", f"nodename={node}", "state=POWER_DOWN"])

    def down() -> str | None:
        return "powered_down" if b.power_state(node).powered_down else None

    return {"node": node, "state": b.wait_until(f"{node} to power down", _t(a, b), down)}


def _t(a: PowerArgs, b: SlurmContext) -> float:
    return max(1.0, min(float(a.timeout_s or b.cfg.power_timeout_s), 3600.0))


def recover_power(b: SlurmContext, op: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """After a crash or an error: the step's output if the node is where it was sent."""
    node = b.node_name(read_args(PowerArgs, args).node)
    state = b.power_state(node)
    if op == "power_up" and state.answers:
        return {"node": node, "state": "up"}
    if op == "power_down" and state.powered_down:
        return {"node": node, "state": "powered_down"}
    return None
