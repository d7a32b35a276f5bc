"""Slurm inventory: nodes, jobs, partitions and queue depth, from either data source.

slurmrestd and the commands' ``--json`` print the same objects, but their shape changed
across releases: 22.05 (v0.0.38) writes ``"job_state": "PENDING"`` and plain integers;
23.02+ (v0.0.39-42) writes ``"job_state": ["PENDING"]`` and numbers as
``{"set": true, "infinite": false, "number": N}``; ``features`` is a string or a list;
partitions' nodes are a string or ``{"configured": ...}``. The helpers here accept both, so
nothing above this module sees a version. Sizes: a job's allocation (``cpus``, ``--mem``,
``gres/gpu[:TYPE]``), a node's (``cpus``, ``real_memory``, ``Gres=gpu:TYPE:N``) and what
its jobs hold (``allocated``). Limits: fields Slurm leaves out become None/0.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import Field

from core.checkpoint.engine import DEFAULT_ENGINE, ENGINES
from core.model import NodeCondition, NodeConditionType, NodeInfo, WorkloadInfo, WorkloadState
from core.schema_base import Model
from core.signals.nodes import judge

BACKEND = "slurm"
_GPU_RE = re.compile(r"gpu(?::[A-Za-z0-9_.-]+)?[:=](\d+)")
# The model in ``gpu:a100:2``, ``gres/gpu:a100=2``, ``gres:gpu:a100:1(IDX:0)``: a name that
# starts with a letter (``gpu:2`` has none).
_GPU_CLASS_RE = re.compile(r"gpu:([A-Za-z][A-Za-z0-9_.-]*)[:=]\d")

_JOB_STATES: dict[str, WorkloadState] = {
    "PENDING": WorkloadState.PENDING,
    "REQUEUED": WorkloadState.PENDING,
    "REQUEUE_HOLD": WorkloadState.STOPPED,
    "REQUEUE_FED": WorkloadState.PENDING,
    "CONFIGURING": WorkloadState.PENDING,
    "RUNNING": WorkloadState.RUNNING,
    "COMPLETING": WorkloadState.RUNNING,
    "SIGNALING": WorkloadState.RUNNING,
    "STAGE_OUT": WorkloadState.RUNNING,
    "SUSPENDED": WorkloadState.STOPPED,
    "STOPPED": WorkloadState.STOPPED,
    "PREEMPTED": WorkloadState.STOPPED,
    "COMPLETED": WorkloadState.COMPLETED,
    "CANCELLED": WorkloadState.COMPLETED,
    "FAILED": WorkloadState.FAILED,
    "NODE_FAIL": WorkloadState.FAILED,
    "TIMEOUT": WorkloadState.FAILED,
    "OUT_OF_MEMORY": WorkloadState.FAILED,
    "BOOT_FAIL": WorkloadState.FAILED,
    "DEADLINE": WorkloadState.FAILED,
}
_HELD_REASONS = {"JobHeldUser", "JobHeldAdmin"}
_DOWN_FLAGS = {"DOWN", "NOT_RESPONDING", "FAIL", "POWERED_DOWN", "POWER_DOWN", "INVALID"}
# A node powered down by Slurm's power saving, or on its way there: capacity given back
# (a pool's released node), not a failure; the backend does not list it as a node.
RELEASED_FLAGS = frozenset({"POWERED_DOWN", "POWERING_DOWN"})


def num(value: Any) -> int | None:
    """An integer from a plain number or a v0.0.39+ ``{"set","infinite","number"}`` object."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value)
    return None


def words(value: Any) -> list[str]:
    """A list of upper-case words from a string (``"idle"``, ``"a,b"``) or a list."""
    if value is None:
        return []
    items = value if isinstance(value, list) else re.split(r"[,+ ]", str(value))
    return [str(i).strip().upper() for i in items if str(i).strip()]


def text(value: Any) -> str:
    if isinstance(value, dict):  # v0.0.40 partitions: {"configured": "n[1-3]"}
        value = value.get("configured") or value.get("nodes") or ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


def gpus_in(*specs: Any) -> int:
    """GPUs named in TRES/GRES strings such as ``gres:gpu:2``, ``gres/gpu=2``, ``gpu:a100:1``."""
    total = 0
    for spec in specs:
        for m in _GPU_RE.finditer(text(spec)):
            total += int(m.group(1))
        if total:
            return total
    return total


def gpu_class_in(*specs: Any) -> str | None:
    """The GPU model the first spec that names one names (``gpu:a100:2`` -> ``a100``)."""
    for spec in specs:
        m = _GPU_CLASS_RE.search(text(spec))
        if m:
            return m.group(1).lower()
    return None


def job_memory_mb(raw: dict[str, Any]) -> int | None:
    """A job's memory in MiB: ``--mem`` (memory_per_node), else ``--mem-per-cpu`` times its
    CPUs; None when it asked for none (its TRES then shows the node's whole memory, which
    is Slurm's default, not a size it chose)."""
    per_node = num(raw.get("memory_per_node"))
    if per_node:
        return per_node
    per_cpu, cpus = num(raw.get("memory_per_cpu")), num(raw.get("cpus"))
    return per_cpu * cpus if per_cpu and cpus else None


class Allocated(Model):
    """What a node's jobs hold, as slurmctld counts it (``alloc_cpus``, ``alloc_memory``:
    0 where memory is not a consumable resource; GPUs from ``gres_used``)."""

    cpus: int = 0
    memory_mb: int = 0
    gpus: int = 0


def allocated(raw: dict[str, Any]) -> Allocated:
    return Allocated(
        cpus=num(raw.get("alloc_cpus")) or 0,
        memory_mb=num(raw.get("alloc_memory")) or 0,
        gpus=gpus_in(raw.get("gres_used")),
    )


def ts(value: Any) -> datetime | None:
    n = num(value)
    return datetime.fromtimestamp(n, UTC) if n else None


def node_states(raw: dict[str, Any]) -> list[str]:
    """Base state and flags together, e.g. ``["IDLE", "DRAIN"]`` (22.05 keeps flags apart)."""
    return words(raw.get("state")) + words(raw.get("state_flags"))


# sinfo appends one of these to a state name; see sinfo(1) "NODE STATE CODES".
_SUFFIX = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "%": "POWERING_DOWN",
           "!": "POWER_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED",
           "-": "PLANNED"}  # fmt: skip
# sinfo's short state names.
_SHORT = {"ALLOC": "ALLOCATED", "MIX": "MIXED", "DRNG": "DRAINING", "COMP": "COMPLETING",
          "RESV": "RESERVED", "UNK": "UNKNOWN", "NO_RESPOND": "NOT_RESPONDING", "MAINT": "MAINTENANCE",
          "INVAL": "INVALID", "NPC": "PERFCTRS"}  # fmt: skip
# Each flag that says something is wrong, as a condition: (about what, why).
_CONDITION = {
    **dict.fromkeys(_DOWN_FLAGS, (NodeConditionType.READY, "down, failed or powered off")),
    "DRAIN": (NodeConditionType.DRAINING, "drained"),
    "DRAINED": (NodeConditionType.DRAINING, "drained"),
    "RESERVED": (NodeConditionType.SCHEDULABLE, "reserved"),
    "DRAINING": (NodeConditionType.DRAINING, "draining"),
    "FAILING": (NodeConditionType.DRAINING, "failing: being drained"),
    "MAINTENANCE": (NodeConditionType.MAINTENANCE, "in a maintenance reservation"),
    "REBOOT_REQUESTED": (NodeConditionType.MAINTENANCE, "reboot requested"),
    "REBOOT_ISSUED": (NodeConditionType.MAINTENANCE, "rebooting"),
    "UNKNOWN": (NodeConditionType.OTHER, "state unknown to slurmctld"),
}


def flags_of(states: list[str]) -> list[str]:
    """Slurm's state words and sinfo's short forms and suffixes (``down*``, ``drng``) as
    full flag names (``DOWN``, ``NOT_RESPONDING``, ``DRAINING``), in order, once each."""
    flags: list[str] = []
    for word in states:
        name = word.upper()
        while name and name[-1] in _SUFFIX:
            flags.append(_SUFFIX[name[-1]])
            name = name[:-1]
        if name:
            flags.append(_SHORT.get(name, name))
    return list(dict.fromkeys(flags))


def node_conditions(states: list[str]) -> list[NodeCondition]:
    """The conditions a node's state flags report; flags that mean nothing wrong give none.
    A node powering up does not answer yet: that is its boot, said as such."""
    flags = flags_of(states)
    if "POWERING_UP" in flags:
        flags = [f for f in flags if f != "NOT_RESPONDING"]
    found = [
        NodeCondition(type=_CONDITION[f][0], ok=False, reason=_CONDITION[f][1], source=f)
        for f in flags
        if f in _CONDITION
    ]
    if "POWERING_UP" in flags:
        found.append(NodeCondition(type=NodeConditionType.SCHEDULABLE, ok=False,
                                   reason="powering up", source="POWERING_UP"))  # fmt: skip
    return found


def to_node(raw: dict[str, Any], jobs: list[WorkloadInfo]) -> NodeInfo:
    name = str(raw.get("name", ""))
    states = node_states(raw)
    conditions = node_conditions(states)
    health, schedulable, _ = judge(conditions)
    features = words(raw.get("active_features") or raw.get("features"))
    return NodeInfo(
        id=f"{BACKEND}:{name}",
        backend=BACKEND,
        name=name,
        health=health,
        schedulable=schedulable,
        conditions=conditions,
        state="+".join(states).lower() or "unknown",
        reason=text(raw.get("reason")),
        cpus=num(raw.get("cpus")),
        memory_mb=num(raw.get("real_memory")),
        gpus=gpus_in(raw.get("gres")),
        gpu_class=gpu_class_in(raw.get("gres")),
        labels={"features": ",".join(f.lower() for f in features)} if features else {},
        partitions=[str(p) for p in raw.get("partitions") or []],
        workloads=[w.id for w in jobs if w.node and name in w.node.split(",")],
    )


def job_lineage(raw: dict[str, Any], marker: str) -> str | None:
    """The lineage the sbatch helper wrote into the comment (``MARKER:LINEAGE[,engine=E]``)."""
    comment = text(raw.get("comment"))
    prefix = f"{marker}:"
    if comment.startswith(prefix):
        rest = comment[len(prefix) :].split(",")[0]
        return rest.split()[0] if rest.strip() else None
    return None


def comment_fields(raw: dict[str, Any]) -> dict[str, str]:
    """The ``KEY=VALUE`` fields after the lineage in a wrapped job's comment: ``engine``,
    and for a job continued by a live move ``home`` (the home path id it keeps) and, while
    it only stands by, ``standby`` (``core.backends.slurm.handoff``)."""
    out: dict[str, str] = {}
    for word in text(raw.get("comment")).split(",")[1:]:
        key, sep, value = word.strip().partition("=")
        if sep and key:
            out[key] = value
    return out


def job_engine(raw: dict[str, Any]) -> str:
    """The engine the sbatch helper recorded in the comment (``engine=NAME``), else the
    default engine (jobs submitted before it was recorded, or left to the node's default)."""
    for word in text(raw.get("comment")).replace(",", " ").split()[1:]:
        if word.startswith("engine=") and word[len("engine=") :] in ENGINES:
            return word[len("engine=") :]
    return DEFAULT_ENGINE


def to_workload(raw: dict[str, Any], marker: str) -> WorkloadInfo:
    job_id = str(num(raw.get("job_id")) or raw.get("job_id"))
    states = words(raw.get("job_state"))
    base = states[0] if states else "UNKNOWN"
    reason = text(raw.get("state_reason"))
    state = _JOB_STATES.get(base, WorkloadState.UNKNOWN)
    if state is WorkloadState.PENDING and reason in _HELD_REASONS:
        state = WorkloadState.STOPPED  # held after a preempt: resumable
    lineage = job_lineage(raw, marker)
    node = text(raw.get("nodes")) or None if state is WorkloadState.RUNNING else None
    labels = {
        "job_name": text(raw.get("name")),
        "user": text(raw.get("user_name")),
        "slurm_state": "+".join(states),
        "reason": reason,
        "requeue": str(bool(raw.get("requeue"))).lower(),
        "restarts": str(num(raw.get("restart_cnt")) or 0),
        "wrapped": str(lineage is not None).lower(),
    }
    if lineage:
        labels["lineage"] = lineage
        standby = comment_fields(raw).get("standby")
        if standby:  # a live move's standby: not (yet) the workload (``is_standby``)
            labels["standby"] = standby
    excluded = text(raw.get("excluded_nodes"))
    if excluded:
        labels["excluded_nodes"] = excluded
    gpu_specs = (
        raw.get("tres_per_node"),
        raw.get("tres_per_job"),
        raw.get("tres_per_task"),
        raw.get("tres_req_str"),
    )
    gpus = gpus_in(*gpu_specs)
    return WorkloadInfo(
        id=f"{BACKEND}:{job_id}",
        backend=BACKEND,
        name=job_id,
        state=state,
        node=node,
        engine=job_engine(raw) if lineage else "none",
        partition=text(raw.get("partition")) or None,
        namespace=text(raw.get("partition")) or None,
        gpus=gpus,
        # Its allocation (what it asked for while it pends): CPUs, --mem, the GPU model.
        cpus=num(raw.get("cpus")),
        memory_mb=job_memory_mb(raw),
        gpu_class=gpu_class_in(*gpu_specs, *(raw.get("gres_detail") or [])) if gpus else None,
        started_at=ts(raw.get("start_time")) if state is WorkloadState.RUNNING else None,
        labels=labels,
        # Slurm's longer wording when it has one (what squeue's %r prints), else the reason.
        message=text(raw.get("state_description")) or (reason if reason != "None" else ""),
    )


def is_standby(w: WorkloadInfo) -> bool:
    """A live move's standby job: it holds nothing of the workload until it takes it over,
    so listings leave it out (it is not a second copy) and no plan acts on it."""
    return "standby" in w.labels


class Partition(Model):
    name: str
    nodes: list[str] = Field(default_factory=list)
    cpus: int = 0
    gpus: int = 0
    nodes_up: int = 0


def partitions_of(nodes: list[NodeInfo]) -> list[Partition]:
    """Partitions as the nodes list them (works on every release and source)."""
    parts: dict[str, Partition] = {}
    for n in nodes:
        for p in n.partitions:
            part = parts.setdefault(p, Partition(name=p))
            part.nodes.append(n.name)
            part.cpus += n.cpus or 0
            part.gpus += n.gpus
            part.nodes_up += int(n.schedulable)
    return sorted(parts.values(), key=lambda p: p.name)


class QueueDepth(Model):
    """Pending work of one partition: what a scaler or a preemption policy looks at."""

    partition: str
    pending: int = 0
    running: int = 0
    pending_by_reason: dict[str, int] = Field(default_factory=dict)
    oldest_pending_age_s: float | None = None
    pending_gpus: int = 0
    pending_cpus: int = 0


def queue_depth(
    raws: list[dict[str, Any]], partitions: list[str], now: datetime
) -> list[QueueDepth]:
    """Queue depth per partition from raw job records (a job may list several partitions)."""
    depth = {p: QueueDepth(partition=p) for p in partitions}
    for raw in raws:
        states = words(raw.get("job_state"))
        base = states[0] if states else ""
        for part in text(raw.get("partition")).split(","):
            if not part:
                continue
            q = depth.setdefault(part, QueueDepth(partition=part))
            if base == "RUNNING":
                q.running += 1
            if base != "PENDING":
                continue
            q.pending += 1
            reason = text(raw.get("state_reason")) or "None"
            q.pending_by_reason[reason] = q.pending_by_reason.get(reason, 0) + 1
            nodes = num(raw.get("node_count")) or 1
            q.pending_gpus += gpus_in(raw.get("tres_per_job")) or nodes * gpus_in(
                raw.get("tres_per_node"), raw.get("tres_req_str")
            )
            q.pending_cpus += num(raw.get("cpus")) or 0
            submitted = ts(raw.get("submit_time"))
            if submitted:
                age = max(0.0, (now - submitted).total_seconds())
                if q.oldest_pending_age_s is None or age > q.oldest_pending_age_s:
                    q.oldest_pending_age_s = age
    return sorted(depth.values(), key=lambda q: q.partition)
