"""What the local backend's plans share: target choice, scope, pause estimate, refusals.

Free functions over a ``LocalContext`` (the backend as plans see it), used by ``plans`` and
``node_plans``. Read-only: planning never changes a workload (``workload_record`` records a
death it finds, as every read does).
"""

from __future__ import annotations

from core import errors, timings
from core.backends.local import moves
from core.backends.local.common import NAME, _resident_bytes
from core.backends.local.context import LocalContext
from core.backends.local.step_args import CheckpointArgs, StandbyArgs, StartArgs, step
from core.checkpoint import engine, files
from core.model import (
    Action,
    CheckpointInfo,
    CheckpointStatus,
    NodeHealth,
    PlanScope,
    PlanStep,
    WorkloadState,
    utcnow,
    validate_name,
)
from core.state.workloads import WorkloadRecord
from core.store import retention
from core.store.disk import parse_checkpoint_id


def start_step(
    workload: str,
    node: str | None,
    restore_from: str | None,
    description: str,
    *,
    fresh: bool = False,
    after_standby: bool = False,
    size: tuple[float | None, int | None] | None = None,
) -> PlanStep:
    """Start the workload's wrapper on ``node``, restoring ``restore_from`` (None = newest
    good; a start step never falls back to a fresh start), or from scratch when ``fresh``;
    ``after_standby``: the standby step's wrapper took the workload over, await it.
    ``size``: (cpus, memory MiB) it has from then on (a resize; None: as recorded)."""
    if after_standby:
        args = StartArgs(workload=workload, node=node, restore_from=restore_from,
                         standby_pid="$standby.pid", standby="$standby.socket")  # fmt: skip
    elif fresh:
        args = StartArgs(workload=workload, node=node, restore_from=restore_from, fresh=True)
    else:
        args = StartArgs(workload=workload, node=node, restore_from=restore_from)
    if size is not None:
        args = args.model_copy(update={"cpus": size[0], "memory_mb": size[1]})
    return step("start", "start", args, description)


def _hands_off(name: str) -> bool:
    """Can a live move of a workload of engine ``name`` hand it to a standby (``moves``)?"""
    return name in engine.ENGINES and engine.get(name).supports_handoff


def refuse_unsupported(rec: WorkloadRecord, action: Action) -> None:
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


def workload_record(ctx: LocalContext, target: str) -> WorkloadRecord:
    """The workload named ``target`` (a plain name), as it is now."""
    validate_name(target, what="workload name")
    return ctx.refresh(ctx.registry.require(target))


def subject(
    ctx: LocalContext,
    target: str,
    action: Action,
    states: set[WorkloadState],
    *,
    probe: bool = False,
) -> WorkloadRecord:
    """The workload a plan acts on, as it is now: Conflict unless it is in one of ``states``;
    with ``probe``, refused too when it holds what its engine cannot carry (nothing paused)."""
    rec = workload_record(ctx, target)
    require_state(rec, states, action)
    if probe:
        refuse_unsupported(rec, action)
    return rec


def pick_target(ctx: LocalContext, *, exclude: set[str], requested: str | None) -> str:
    """The node a workload goes to: ``requested`` checked (it exists, is not excluded, takes
    workloads), else the best healthy schedulable node outside ``exclude``."""
    nodes = ctx.nodes()
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


def move_scope(ctx: LocalContext, rec: WorkloadRecord, dest: str) -> PlanScope:
    """The scope of a plan that moves ``rec`` onto ``dest`` (policies match both ends)."""
    moved = scope(ctx, rec)
    moved.target_node = dest
    moved.target_node_labels = labels_of(ctx, dest)
    return moved


def labels_of(ctx: LocalContext, node: str) -> dict[str, str]:
    cfg = ctx.node_config.get(node)
    return dict(cfg.labels) if cfg else {}


def estimate_pause(
    ctx: LocalContext, name: str, move: list[PlanStep] | None = None
) -> float | None:
    """Seconds the workload is paused by a move: dump + restore of its state
    (``core.timings.estimate_pause``, which the service's insights use too).

    From the last checkpoint's own timings when there is one, else from the payload's
    resident memory. A handoff (``move`` has a standby step) pauses for the dump, the
    restore (a tenth of a second for post-copy) and little else (docs/migration.md)."""
    ckpts = ctx.store.list(name)
    mode = next((str(s.args.get("mode")) for s in move or [] if s.args.get("handoff")), None)
    if ckpts:
        return timings.estimate_pause(ckpts[0], handoff_mode=mode)
    rec = ctx.registry.get(name)
    rss = _resident_bytes(rec.pid) if rec and rec.pid else None
    return timings.estimate_pause(None, resident_bytes=rss)


def scope(ctx: LocalContext, rec: WorkloadRecord) -> PlanScope:
    node = ctx.node_config.get(rec.node or "")
    return PlanScope(
        backend=NAME,
        pool=(node.labels.get("pool") if node else None) or f"{NAME}:{rec.node}",
        node=rec.node,
        labels=rec.labels,
        node_labels=node.labels if node else {},
        spot=node.spot if node else False,
        gpus=node.gpus if node else 0,
    )


def move_steps(
    ctx: LocalContext,
    rec: WorkloadRecord,
    dest: str,
    *,
    limits: tuple[float | None, int | None] | None = None,
) -> list[PlanStep]:
    """The steps that stop ``rec`` for a move to ``dest``: a standby wrapper started on
    ``dest`` first and the workload handed to it (``moves``), or a plain stop. ``limits``:
    the limits the standby restores it with (a resize; None: as recorded)."""
    ref = f"{NAME}:{rec.name}"
    if not (ctx.settings.migration.handoff and _hands_off(rec.engine)):
        return [
            step(
                "checkpoint",
                "checkpoint",
                CheckpointArgs(workload=rec.name, stop=True),
                f"checkpoint {ref} and stop it on {rec.node}",
            )
        ]
    last = next(iter(ctx.store.list(rec.name)), None)
    size = last.size_bytes if last else (_resident_bytes(rec.pid) if rec.pid else None)
    mode, why = moves.choose_mode(ctx.settings, rec.engine, size, user_namespace=rec.user_namespace)
    handoff = CheckpointArgs(workload=rec.name, stop=True, handoff="$standby.socket", mode=mode)
    return [
        step(
            "standby",
            "standby",
            StandbyArgs(workload=rec.name, node=dest, **_sized(limits)),
            f"start a standby wrapper for {ref} on {dest} (nothing paused yet)",
        ),
        step(
            "checkpoint",
            "checkpoint",
            handoff,
            f"checkpoint {ref} and stop it on {rec.node}, then hand it to the "
            f"standby ({mode}: {why})",
        ),
    ]


def _sized(size: tuple[float | None, int | None] | None) -> dict[str, float | int | None]:
    return {} if size is None else {"cpus": size[0], "memory_mb": size[1]}


def require_restorable(ctx: LocalContext, name: str) -> None:
    """Refuse to plan a restore when no checkpoint of ``name`` can possibly verify.

    Cheap (sizes only); the wrapper still verifies every byte before it resumes one and
    fails rather than start from scratch."""
    ref = f"{NAME}:{name}"
    published = ctx.store.published_ids(name)
    if not published:
        raise errors.NotFound(
            f"{ref} has no checkpoint to restore",
            hint="a person can start it from scratch: "
            + errors.step("resume_workload", workload=ref, fresh=True)
            + " (for a failed one: "
            + errors.step("failover_workload", workload=ref, fresh=True)
            + ")",
        )
    for info in ctx.store.candidates(name):
        try:
            ctx.store.verify(info.id, digests=False)
            return
        except errors.CorruptCheckpoint:
            continue
    untrusted = [i.id for i in ctx.store.list(name) if i.status is CheckpointStatus.UNTRUSTED]
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


def with_files(ctx: LocalContext, saves: str, ckpt: CheckpointInfo) -> str:
    """``saves`` plus what the restore will do to the files the workload wrote."""
    note = files.plan_note(ckpt, ctx.settings.checkpoint.file_policy)
    return f"{saves}; {note}" if note else saves


def protects(ctx: LocalContext, lineage: str) -> bool:
    """Whether the newest good checkpoint of ``lineage`` is protected from deletion: its
    workload is not gone (running, stopped or failed: it may need it to come back)."""
    rec = ctx.registry.get(lineage)
    return rec is not None and rec.state in (
        WorkloadState.RUNNING,
        WorkloadState.CHECKPOINTING,
        WorkloadState.STOPPED,
        WorkloadState.FAILED,
    )


def last_good(ctx: LocalContext, checkpoint_id: str) -> errors.Conflict | None:
    """Why ``checkpoint_id`` may not be deleted now (the newest good checkpoint of a
    workload that is not gone), or None."""
    live = protects(ctx, parse_checkpoint_id(checkpoint_id)[0])
    return retention.last_good_problem(ctx.store, checkpoint_id, live=live, label=f"{NAME}:")


def check_deletable(ctx: LocalContext, checkpoint_id: str) -> None:
    """Refuse (Conflict ``last-good-checkpoint``) the deletion of the newest good
    checkpoint of a workload that is not gone, as its newer checkpoints verify now."""
    problem = last_good(ctx, checkpoint_id)
    if problem is not None:
        raise problem


def require_state(rec: WorkloadRecord, allowed: set[WorkloadState], action: Action) -> None:
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


def size_hint(ctx: LocalContext, name: str) -> str:
    ckpts = ctx.store.list(name)
    return f" (last image {ckpts[0].size_bytes / 2**20:.0f} MiB)" if ckpts else ""


def price_note(ctx: LocalContext, node: str | None) -> str:
    cfg = ctx.node_config.get(node or "")
    return f" (${cfg.price_per_hour:.2f}/h)" if cfg else ""


def cost_effect(ctx: LocalContext, src: str | None, dst: str) -> str:
    a = ctx.node_config.get(src or "")
    b = ctx.node_config.get(dst)
    if not a or not b:
        return ""
    return f"${a.price_per_hour:.2f}/h on {src} -> ${b.price_per_hour:.2f}/h on {dst}"


def work_lost_note(ctx: LocalContext, ckpt: CheckpointInfo) -> str:
    age = (utcnow() - ckpt.created_at).total_seconds()
    return f"work since that checkpoint ({age:.0f} s ago) is redone"
