"""The domain model: nodes, workloads, checkpoints, plans and executions.

Pure data and pure functions (no I/O). Every boundary (CLI, MCP, backends, state) speaks
these pydantic models. Ids are validated here, once: a name that could escape a directory
or reach a shell (``../x``, ``1;rm -rf /``) never gets past ``parse_workload_id``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_serializer,
    model_serializer,
)

from core import errors
from core.schema_base import Model

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
BACKEND_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")


def utcnow() -> datetime:
    return datetime.now(UTC)


ProgressFn = Callable[[float, float | None, str], None]
"""progress(done, total, message): called during long steps; must be cheap and never raise."""


def no_progress(done: float, total: float | None, message: str) -> None:
    return None


def validate_name(value: str, *, what: str = "name", new: bool = False) -> str:
    """Accept a plain name (letters, digits, ``_ . -``; no ``..``); raise InvalidInput otherwise.
    ``new``: the caller names something new (a workload to start), so the hint says how to
    spell one rather than to pick an existing one."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or ".." in value:
        raise errors.InvalidInput(
            f"invalid {what} {value!r}: use 1-63 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit, without '..'",
            hint=f"choose a {what} of those characters, e.g. train-1"
            if new
            else f"list the existing ones and pass one of those as the {what}",
        )
    return value


# Free text people and agents attach to actions (a reason, a label value) ends up in the
# audit log, in webhooks and on the approval page: every interface caps it the same way.
MAX_REASON_CHARS = 500
MAX_LABEL_VALUE_CHARS = 200
MAX_LABELS = 32
LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,62}$")
# Periodic checkpoint interval: more than 0, at most 30 days (beyond that it never fires;
# a huge or infinite one would overflow the timers).
MAX_CHECKPOINT_INTERVAL_S = 30 * 86400.0


def validate_reason(value: str, *, what: str = "reason") -> str:
    """A reason or note of at most ``MAX_REASON_CHARS`` characters; InvalidInput otherwise."""
    if len(value) > MAX_REASON_CHARS:
        raise errors.InvalidInput(
            f"{what} is {len(value)} characters long; at most {MAX_REASON_CHARS} are allowed",
            hint=f"shorten the {what} to {MAX_REASON_CHARS} characters or fewer",
        )
    return value


def parse_labels(items: list[str], *, what: str = "label") -> dict[str, str]:
    """``KEY=VALUE`` strings to a dict: ASCII keys, bounded values and count."""
    if len(items) > MAX_LABELS:
        raise errors.InvalidInput(
            f"{len(items)} {what}s given; at most {MAX_LABELS} are allowed",
            hint=f"keep the {what}s that policy rules or people need",
        )
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not LABEL_KEY_RE.fullmatch(key):
            raise errors.InvalidInput(
                f"{what} {item[:80]!r} is not KEY=VALUE with a key of 1-63 ASCII letters, "
                "digits, '_', '.', '/' or '-'",
                hint="e.g. --label team=ml",
            )
        if len(value) > MAX_LABEL_VALUE_CHARS or not value.isprintable():
            raise errors.InvalidInput(
                f"{what} {key}: the value must be printable and at most "
                f"{MAX_LABEL_VALUE_CHARS} characters",
                hint="shorten the value; put long text in --reason or the audit log",
            )
        labels[key] = value
    return labels


def validate_interval_s(value: float, *, what: str = "checkpoint interval") -> float:
    """Seconds, more than 0 and at most ``MAX_CHECKPOINT_INTERVAL_S`` (NaN and inf refused)."""
    if not 0 < value <= MAX_CHECKPOINT_INTERVAL_S:  # NaN fails every comparison
        raise errors.InvalidInput(
            f"{what} {value!r} s must be more than 0 and at most "
            f"{MAX_CHECKPOINT_INTERVAL_S:.0f} s (30 days)",
            hint="give a number of seconds, e.g. 300 for every five minutes",
        )
    return value


class ObjectRef(Model):
    """A ``BACKEND:NAME`` reference (workload, node or checkpoint)."""

    model_config = ConfigDict(frozen=True)

    backend: str
    name: str

    def __str__(self) -> str:
        return f"{self.backend}:{self.name}"


def parse_ref(
    value: str, *, what: str = "workload", default_backend: str | None = None
) -> ObjectRef:
    """Parse ``BACKEND:NAME``. Without a backend prefix, ``default_backend`` is used if given."""
    if not isinstance(value, str) or not value:
        raise errors.InvalidInput(f"empty {what} id", hint=f"pass a {what} id like local:train-1")
    if not value.isascii():  # ids are ASCII only: no look-alike letters or other scripts' digits
        raise errors.InvalidInput(
            f"malformed {what} id {value!r}: ids are ASCII letters, digits, '_', '.', '-'",
            hint=f"copy the {what} id from the list command",
        )
    backend, sep, name = value.partition(":")
    if not sep:
        if default_backend is None:
            raise errors.InvalidInput(
                f"malformed {what} id {value!r}: expected BACKEND:NAME",
                hint=f"pass a {what} id like local:train-1 (see the list command for ids)",
            )
        backend, name = default_backend, value
    if not BACKEND_RE.fullmatch(backend):
        raise errors.InvalidInput(
            f"malformed {what} id {value!r}: backend {backend!r} is not a backend name",
            hint="backends are lowercase names such as local, slurm, k8s",
        )
    # A name may be a path of up to three plain names (Kubernetes: KIND/NAMESPACE/NAME);
    # each part is a plain name, so no empty part, "..", or other character gets through.
    parts = name.split("/") if isinstance(name, str) else [name]
    if len(parts) > 3:
        validate_name(name, what=f"{what} name")
    for part in parts:
        try:
            validate_name(part, what=f"{what} name")
        except errors.InvalidInput:
            # Quote what the caller wrote, not a fragment of it: the whole name holds the
            # same bad character (or an empty part, i.e. a stray "/"), so this raises too.
            validate_name(name, what=f"{what} name")
            raise
    return ObjectRef(backend=backend, name=name)


class RiskClass(StrEnum):
    READ = "read"
    SAFE = "safe"
    DISRUPTIVE = "disruptive"
    DESTRUCTIVE = "destructive"


# Every trigger clawpoint itself observes, so every one a trigger-scoped standing approval
# can rest on: the sightings of a node's signals (core.watch.evidence.SIGNAL_TRIGGERS) and
# the triggers of the planner's proposals (core.planner.planner); a test pins both to this
# set (tests/guardrails/test_trigger_vocabulary.py). A grant naming another trigger would
# never apply, so it is refused when made (core.guardrails.grants.check_scope).
TRIGGERS = frozenset({
    "spot-interruption", "maintenance", "gpu-failure", "node-down", "sla-risk",
    "memory-pressure", "capacity-grow", "queue-backlog", "cost", "capacity-shrink",
    "checkpoint-interval",
})  # fmt: skip


class Action(StrEnum):
    """Every action; what each takes, risks and is called lives in ``core.actions``."""

    CHECKPOINT = "checkpoint"
    RESTORE = "restore"
    MIGRATE = "migrate"
    PREEMPT = "preempt"
    RESUME = "resume"
    FAILOVER = "failover"
    REQUEUE = "requeue"
    DRAIN_NODE = "drain_node"
    UNDRAIN_NODE = "undrain_node"
    CORDON_NODE = "cordon_node"
    SCALE = "scale"
    KILL = "kill"
    DELETE_CHECKPOINT = "delete_checkpoint"
    SUSPEND_GPU = "suspend_gpu"
    RESUME_GPU = "resume_gpu"
    SET_CHECKPOINT_INTERVAL = "set_checkpoint_interval"
    SCALE_POOL = "scale_pool"
    RESIZE = "resize"


class NodeHealth(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"


class NodeConditionType(StrEnum):
    """What a condition is about. A condition that is not ``ok`` makes the node degraded,
    or down for ``ready`` and ``network``; ``ready``, ``network``, ``schedulable``,
    ``draining`` and ``maintenance`` also keep new work off it (``core.signals.nodes``)."""

    READY = "ready"  # the node answers and runs work
    NETWORK = "network"  # its network is up
    SCHEDULABLE = "schedulable"  # new work may be placed on it (not cordoned or drained)
    DRAINING = "draining"  # not being emptied
    MAINTENANCE = "maintenance"  # no maintenance or reboot pending
    GPU = "gpu"  # its GPUs are healthy
    MEMORY = "memory"  # no memory pressure
    DISK = "disk"  # no disk pressure
    PROCESSES = "processes"  # no process-id pressure
    OTHER = "other"  # anything else the backend reports as wrong


class NodeCondition(Model):
    """One fact about a node's health, as its backend observed it."""

    model_config = ConfigDict(frozen=True)

    type: NodeConditionType
    ok: bool
    reason: str = ""  # why, in words
    source: str = ""  # the backend's own term: a Slurm state flag, a Kubernetes condition


class NodeInfo(Model):
    id: str
    backend: str
    name: str
    price_per_hour: float = 0.0
    spot: bool = False
    labels: dict[str, str] = Field(default_factory=dict)
    health: NodeHealth = NodeHealth.HEALTHY
    schedulable: bool = True
    state: str = "up"
    reason: str = ""
    cpus: int | None = None
    memory_mb: int | None = None
    gpus: int = 0
    gpu_class: str | None = None  # the GPU model its GPUs are (a100, h100); None: unknown
    partitions: list[str] = Field(default_factory=list)
    workloads: list[str] = Field(default_factory=list)
    # Structured health (``NodeCondition``); ``state`` is the backend's text for people only.
    conditions: list[NodeCondition] = Field(default_factory=list)


class PoolInfo(Model):
    """A node pool (node group): nodes of one kind that capacity grows and shrinks by.

    ``size`` counts the nodes up now (``nodes``); ``min_size``/``max_size`` are the bounds a
    person configured; ``released`` names the pool's nodes that are down to save money and
    can come back (``scale_pool`` up)."""

    id: str
    backend: str
    name: str
    spot: bool = False
    price_per_hour: float = Field(0.0, description="per node")
    min_size: int = 0
    max_size: int
    size: int
    nodes: list[str] = Field(default_factory=list)
    idle: list[str] = Field(default_factory=list, description="nodes up with no live workload")
    released: list[str] = Field(default_factory=list)
    # The queue whose pending work the pool's nodes serve (Slurm: its partition); None: the
    # backend's whole queue. The planner grows a pool for the work waiting there.
    partition: str | None = None


class WorkloadState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    CHECKPOINTING = "checkpointing"
    STOPPED = "stopped"  # checkpointed and stopped (preempted, migrated away): resumable
    COMPLETED = "completed"
    FAILED = "failed"  # died (signal, node loss): failover restores its newest checkpoint
    UNKNOWN = "unknown"


class WorkloadInfo(Model):
    id: str
    backend: str
    name: str
    state: WorkloadState
    node: str | None = None
    engine: str = "criu"
    pid: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    namespace: str | None = None
    partition: str | None = None
    gpus: int = 0
    # What the workload may use (its limits or allocation); None: not limited / not known.
    cpus: float | None = None
    memory_mb: int | None = None
    gpu_class: str | None = None
    # Memory in use now, MiB, where the backend measures it (the planner's resize rule).
    memory_used_mb: int | None = None
    started_at: datetime | None = None
    last_checkpoint: str | None = None
    checkpoint_every: float | None = None
    checkpoint_auto: bool = False  # the wrapper re-times checkpoint_every itself
    exit_status: str | None = None
    message: str = ""

    def died(self) -> bool:
        """Failed on its own (signal, node loss), so a failover is what it needs. A workload a
        person killed (``exit_status`` "killed") is failed too, but nothing restores it on
        its own: only a person's explicit failover does."""
        return self.state is WorkloadState.FAILED and self.exit_status != KILLED


KILLED = "killed"  # exit_status of a workload stopped on purpose without saving (``kill``)


class CheckpointFile(Model):
    name: str
    size: int
    digest: str  # "sha256:<hex>"


class CheckpointStatus(StrEnum):
    """``good``: authenticated by its owner's key and not known to be damaged; ``corrupt``:
    its bytes failed verification; ``untrusted``: its manifest is not authentic (unsigned,
    signed with another key, altered, or in a directory another user owns), never restored;
    ``unverified``: read by someone who cannot authenticate it (not its owner)."""

    GOOD = "good"
    CORRUPT = "corrupt"
    UNTRUSTED = "untrusted"
    UNVERIFIED = "unverified"


class CheckpointInfo(Model):
    """A published checkpoint, as its manifest describes it."""

    id: str  # BACKEND:LINEAGE/SEQ form is built by backends; store ids are LINEAGE/SEQ
    lineage: str
    seq: int
    parent: str | None = None
    engine: str
    node: str | None = None
    created_at: datetime
    size_bytes: int
    files: list[CheckpointFile] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)  # seconds
    leave_running: bool = True
    status: CheckpointStatus = CheckpointStatus.UNVERIFIED
    extra: dict[str, Any] = Field(default_factory=dict)

    def reason(self) -> str | None:
        """Why it is not good (untrusted, corrupt, unverified), as the store recorded it."""
        for key in ("untrusted_reason", "corrupt_reason", "unverified_reason"):
            if self.extra.get(key):
                return str(self.extra[key])
        return None


class PlanStep(Model):
    """One journaled step. ``args`` values of the form ``$STEP.FIELD`` take a prior step's output."""

    name: str
    op: str
    args: dict[str, Any] = Field(default_factory=dict)
    description: str


class Preconditions(Model):
    """What a plan's steps assume about the world, recorded when it is made.

    Execution re-reads the world right before the first step and refuses the plan when any
    no longer holds (``Conflict``: re-plan), so a plan approved a while ago never stops and
    restarts a workload a person already moved, preempts it on another node than the plan
    says it frees, or restores over a workload that runs again. Empty fields assume nothing.
    """

    model_config = ConfigDict(extra="forbid")

    workload: str | None = None  # the workload (BACKEND:NAME) whose state the steps assume
    state: WorkloadState | None = None  # its state then (checkpointing counts as running)
    node: str | None = None  # the node it was on
    checkpoint: str | None = None  # a checkpoint (BACKEND:NAME@SEQ) that must still be there
    # A person stopped the workload without saving (``kill``): bringing it back is a person's
    # decision, never an agent's or a grant's (core.guardrails.policy).
    killed: bool | None = None

    def is_empty(self) -> bool:
        return not self.model_dump(exclude_none=True)


class PlanScope(Model):
    """What a plan touches, as a backend states it and policy, grants, views and audit read it.

    A backend fills the fields that apply to it; a field it leaves out is absent, not
    "unknown", and serialises as absent: the model dumps to exactly the keys that were set
    (the dict plans have always recorded, so journals and audit records keep their shape).
    Unknown keys are refused, so a misspelt one fails the plan instead of silently switching
    a rule off. The last group are facts a backend reports on a plan for people to read
    (nothing decides on them)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # Where the work is: policy rules, grants and the blast-radius pool match these.
    backend: str | None = None
    pool: str | None = None
    namespace: str | None = None
    kind: str | None = None  # a Kubernetes workload's kind
    partition: str | None = None
    partitions: list[str] | None = None  # a Slurm node's partitions
    node: str | None = None
    labels: dict[str, str] | None = None  # the workload's
    node_labels: dict[str, str] | None = None
    spot: bool | None = None
    gpus: int | None = None
    # Where a move puts it (policies match both ends).
    target_node: str | None = None
    target_node_labels: dict[str, str] | None = None
    # What a node plan moves, and where.
    workloads: list[str] | None = None
    targets: list[str] | None = None
    # Facts only a person may decide on (core.guardrails.policy).
    newest_of_live_workload: bool | None = None
    drained_by: str | None = None
    node_down: bool | None = None
    # Reported for people: placement, what a drain leaves, fencing, the API's previews.
    fits: list[str] | None = None
    warnings: list[str] | None = None
    not_handled: list[str] | None = None
    other_namespaces_visible: bool | None = None
    left: list[str] | None = None
    forced: list[str] | None = None
    fencing: dict[str, Any] | None = None
    dry_run: list[dict[str, Any]] | None = None

    @model_serializer(mode="wrap")
    def _set_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if k in self.model_fields_set}


# Serialization context of a record written to the state database: next steps stay neutral.
STORED = "stored"
STORED_CONTEXT = {STORED: True}


class Plan(Model):
    action: Action
    target: str
    backend: str
    params: dict[str, Any] = Field(default_factory=dict)
    steps: list[PlanStep]
    # Run best-effort when a step fails after the workload was stopped (e.g. restart it on
    # its source node from the checkpoint just taken), so a failed move never strands work.
    on_failure: list[PlanStep] = Field(default_factory=list)
    risk: RiskClass
    summary: str
    expected_pause_s: float | None = None
    saves: str = ""
    rollback: str = ""
    cost_effect: str = ""
    reason: str = ""
    scope: PlanScope = Field(default_factory=PlanScope)
    preconditions: Preconditions = Field(default_factory=Preconditions)
    created_at: datetime = Field(default_factory=utcnow)
    hash: str = ""

    def compute_hash(self) -> str:
        """Stable over what the plan does and assumes: action, target, params, steps,
        preconditions (not time or prose)."""
        body = {
            "action": self.action.value,
            "target": self.target,
            "backend": self.backend,
            "params": self.params,
            "steps": [s.model_dump(mode="json", exclude={"description"}) for s in self.steps],
            "on_failure": [
                s.model_dump(mode="json", exclude={"description"}) for s in self.on_failure
            ],
            "risk": self.risk.value,
        }
        if not self.preconditions.is_empty():  # absent before they existed: old hashes hold
            body["preconditions"] = self.preconditions.model_dump(mode="json", exclude_none=True)
        raw = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(raw.encode()).hexdigest()

    def sealed(self) -> Plan:
        return self.model_copy(update={"hash": self.compute_hash()})

    def undo(self, renderer: errors.StepRenderer = errors.as_tool_call) -> str:
        """``rollback`` as an interface shows it: its next step (``core.errors.step``) as a
        tool call (MCP, runbooks, approval messages) or, with the CLI's renderer, the
        command a person types. The stored text stays neutral, so every reader gets its own."""
        return errors.render(self.rollback, renderer)

    @field_serializer("rollback")
    def _rollback_said(self, rollback: str, info: SerializationInfo) -> str:
        # What leaves the process (MCP, runbooks, the audit) reads one text with the tool
        # call; the state database keeps the neutral form (``STORED``) for the CLI's words.
        return rollback if (info.context or {}).get(STORED) else errors.render(rollback)


class ExecutionStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"


class StepRecord(Model):
    name: str
    status: str  # started | done | failed | skipped
    started_at: datetime | None = None
    finished_at: datetime | None = None
    output: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None  # next steps named as tools (MCP, runbooks)
    # The same with next steps neutral (``core.errors``), for an interface that names them
    # its own way (the command line); never serialized: one text per record goes out.
    error_neutral: str | None = Field(default=None, exclude=True, repr=False)


class Execution(Model):
    id: str
    plan_hash: str
    action: Action
    target: str
    status: ExecutionStatus
    principal: str
    started_at: datetime
    finished_at: datetime | None = None
    steps: list[StepRecord] = Field(default_factory=list)
    result: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None  # as StepRecord's
    error_neutral: str | None = Field(default=None, exclude=True, repr=False)
    # ``result["error"]`` (the failed step's error as data) with next steps neutral.
    result_error_neutral: dict[str, Any] | None = Field(default=None, exclude=True, repr=False)


class PrincipalKind(StrEnum):
    AGENT = "agent"  # an MCP session (any client): may plan and request, never approve
    PERSON = "person"  # a human at the CLI, the approval page, or the webhook's chat code
    SCHEDULER = "scheduler"  # the watch loop acting under standing approvals
    # Whoever answered an elicitation in the agent's own client: the server cannot tell a
    # person from the client answering for itself, so this is never a named person and can
    # confirm only plans whose rule accepts it (``[mcp] elicitation_approval``).
    CLIENT_USER = "client-user"


class Principal(Model):
    """Who asks or approves. Approvals require a PERSON different from the requester."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: PrincipalKind
    scopes: frozenset[str] = frozenset()

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.id}"
