"""``SlurmBackend``: the Backend protocol on a Slurm cluster.

Inventory comes from ``transport`` (slurmrestd, else the commands' JSON). Actions are plans
of small named steps, each one Slurm command or one wait, so an execution can resume after
a crash (``recover_step`` answers whether a started step took effect). Two dispatch tables
route them: ``plans.PLANS`` by action (``capabilities()`` is its keys) and ``steps.STEPS``
by step; both take ``context.SlurmContext``, not this class:

- checkpoint: ``scancel --signal=USR1|USR2 --batch JOB`` to the wrapper (the batch shell),
  then wait until a newer checkpoint of the job's lineage is published in the shared store.
- preempt: checkpoint-and-stop, wait for the job to end, ``scontrol requeuehold``: the node
  is free, the job pends held. resume: ``scontrol release`` + ``StartTime=now``.
- migrate: checkpoint-and-stop, requeue held, ``ExcNodeList=SOURCE`` (or ``NodeList=TO``),
  release, ``StartTime=now`` (requeued jobs otherwise pend with reason BeginTime); the
  wrapper of the new run restores the checkpoint, so the restored payload is the new job's.
- drain_node: drain the node (nothing new lands), then move every wrapped job off as above.
- undrain_node: ``scontrol update nodename=NODE state=RESUME`` (a drained or DOWN node).
- ``to`` (migrate, resume, failover, drain): ``NodeList=TARGET`` instead of excluding the
  source; the node must exist and take jobs. Unknown parameters are refused.
- failover: mark the dead node DOWN, requeue the job, exclude the node, start it now.
- resize: checkpoint-and-stop, requeue held, the new allocation (CPUs, memory, GRES) and
  the node that fits it, release, start now (``resize``): Slurm never resizes a running job.
- scale: not supported (a Slurm job has a fixed allocation).

Ids and every value that reaches an argv are validated first: a hostile id runs nothing.
Limits: jobs not started by the sbatch helper (no lineage) cannot be checkpointed; a drain
leaves such jobs running until they end (Slurm's own DRAIN semantics).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from core import errors, logs
from core.actions import ActionParams
from core.backends import dispatch
from core.backends.base import PlanDraft, ProgressFn, poll_until
from core.backends.slurm import handoff, plans, pools, sbatch, step_args, steps
from core.backends.slurm.config import SlurmConfig
from core.backends.slurm.context import PowerState
from core.backends.slurm.ids import job_id, node_name
from core.backends.slurm.inventory import (
    RELEASED_FLAGS,
    Partition,
    QueueDepth,
    flags_of,
    is_standby,
    node_states,
    partitions_of,
    queue_depth,
    to_node,
    to_workload,
)
from core.backends.slurm.transport import SlurmTransport
from core.model import (
    NAME_RE,
    Action,
    CheckpointInfo,
    NodeInfo,
    PoolInfo,
    WorkloadInfo,
    WorkloadState,
    validate_name,
)
from core.specs import BatchSpec
from core.store.store import CheckpointStore

log = logs.get_logger(__name__)
# A wait's first look comes this soon, then backs off to [slurm] poll_interval_s.
FIRST_POLL_S = 0.05
_WAIT_HINT = "look at the job's output and the wrapper log, then retry the plan"


def _sbatch_spec(spec: BatchSpec) -> sbatch.SbatchSpec:
    try:
        return sbatch.SbatchSpec.model_validate(spec.model_dump(exclude_none=True))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise errors.InvalidInput(
            f"the batch job cannot go to Slurm: {problems}",
            hint="fix these fields (see 'clawpoint slurm submit --help')",
        ) from exc


def _qualified(ckpt: CheckpointInfo) -> CheckpointInfo:
    """A store checkpoint with full ids (``slurm:LINEAGE@SEQ``), as every output gives them."""
    parent = f"slurm:{ckpt.parent}" if ckpt.parent else None
    return ckpt.model_copy(update={"id": f"slurm:{ckpt.id}", "parent": parent})


class SlurmBackend:
    """The Backend protocol for Slurm (name ``slurm``)."""

    name = "slurm"

    def __init__(self, config: SlurmConfig | None = None) -> None:
        self.cfg = (config or SlurmConfig()).resolved()
        self.transport = SlurmTransport(self.cfg)

    # ----- inventory ------------------------------------------------------------------
    def capabilities(self) -> frozenset[Action]:
        return dispatch.capabilities(plans.PLANS)

    def raw_jobs(self) -> list[dict[str, Any]]:
        data = self.transport.rest("jobs")
        if data is None:
            data = self.transport.run_json("squeue", ["--json"])
        jobs = data.get("jobs") or []
        return [j for j in jobs if isinstance(j, dict)]

    def raw_nodes(self) -> list[dict[str, Any]]:
        data = self.transport.rest("nodes")
        if data is None:
            if self.transport.slurm_version() >= (23, 2):
                data = self.transport.run_json("scontrol", ["--json", "show", "nodes"])
            else:
                data = self.transport.run_json("sinfo", ["--json"])
        nodes = data.get("nodes") or []
        return [n for n in nodes if isinstance(n, dict)]

    def all_jobs(self) -> list[WorkloadInfo]:
        """Every job in the queue, a live move's standby too (``get_workload`` finds it)."""
        return [to_workload(j, self.cfg.marker) for j in self.raw_jobs()]

    def workloads(self) -> list[WorkloadInfo]:
        """The workloads: every job but a live move's standby, which is none yet."""
        return [w for w in self.all_jobs() if not is_standby(w)]

    def nodes(self) -> list[NodeInfo]:
        """The nodes up: one Slurm powered down (or is powering down) is a pool's released
        capacity (``pools``), not a node that failed."""
        jobs = self.workloads()
        return [to_node(n, jobs) for n in self.raw_nodes() if not pools.is_released(n)]

    def pools(self) -> list[PoolInfo]:
        """``PoolSource``: the ``[slurm.pools]`` partitions under power saving."""
        return pools.pools(self, self.raw_nodes(), self.nodes())

    def node_name(self, name: str) -> str:
        return node_name(name)

    def power_state(self, node: str) -> PowerState:
        raw = next((n for n in self.raw_nodes() if n.get("name") == node), None)
        if raw is None:
            raise errors.NotFound(f"no Slurm node {node}", hint=errors.step("list_pools"))
        flags = set(flags_of(node_states(raw)))
        jobs = [
            w.name
            for w in self.all_jobs()
            if w.state is WorkloadState.RUNNING and w.node and node in w.node.split(",")
        ]
        return PowerState(
            released=bool(flags & RELEASED_FLAGS),
            powered_down="POWERED_DOWN" in flags and "POWERING_DOWN" not in flags,
            answers=not flags & {"POWERED_DOWN", "POWERING_DOWN", "POWERING_UP",
                                 "NOT_RESPONDING", "DOWN"},
            jobs=tuple(jobs),
        )  # fmt: skip

    def partitions(self) -> list[Partition]:
        return partitions_of(self.nodes())

    def queue_depth(self) -> list[QueueDepth]:
        parts = [p.name for p in partitions_of([to_node(n, []) for n in self.raw_nodes()])]
        return queue_depth(self.raw_jobs(), parts, datetime.now(UTC))

    def get_workload(self, name: str) -> WorkloadInfo:
        jid = job_id(name)
        for w in self.all_jobs():
            if w.name == jid:
                return w
        raise errors.NotFound(
            f"no Slurm job {jid}", hint="list the jobs; finished jobs leave squeue after a while"
        )

    def get_node(self, name: str) -> NodeInfo:
        node = node_name(name)
        for n in self.nodes():
            if n.name == node:
                return n
        raise errors.NotFound(f"no Slurm node {node}", hint="list the nodes (sinfo -N)")

    def store(self, owner: str | None = None) -> CheckpointStore:
        """The shared store of one job owner: ``checkpoint_dir/OWNER`` (each user's own
        private directory, docs/slurm.md "Many users"); None: the top level, the layout of
        stores from before per-user directories."""
        if not self.cfg.checkpoint_dir:
            raise errors.InvalidInput(
                "slurm.checkpoint_dir is not set",
                hint="set [slurm] checkpoint_dir to a directory every node sees",
            )
        root = Path(self.cfg.checkpoint_dir)
        if not owner:
            return CheckpointStore(root)
        # Our own jobs' checkpoints are authenticated with the key their wrappers sign with
        # (sbatch.USER_STORE_KEY); another user's can only be listed, as unverified.
        mine = owner == sbatch.submitting_user()
        key = Path(sbatch.USER_STORE_KEY).expanduser() if mine else None
        return CheckpointStore(root / validate_name(owner, what="user"), key=key)

    def owner(self, w: WorkloadInfo) -> str | None:
        """The user a job runs as (whose store directory holds its checkpoints)."""
        user = w.labels.get("user")
        return validate_name(user, what="user") if user else None

    def checkpoints(self, workload: str | None = None) -> list[CheckpointInfo]:
        if not self.cfg.checkpoint_dir:
            return []
        if workload is not None:
            w = self.get_workload(workload)
            return [_qualified(c) for c in self.store(self.owner(w)).list(self.lineage(w))]
        found: list[CheckpointInfo] = []
        for owner in self._owners():
            try:
                found += self.store(owner).list()
            except (OSError, errors.ClawpointError) as exc:  # another user's, unreadable to us
                log.info("slurm.store_unreadable", owner=owner, error=str(exc))
        found.sort(key=lambda i: (i.created_at, i.seq), reverse=True)
        return [_qualified(c) for c in found]

    def _owners(self) -> list[str]:
        """Users with a directory in the shared store that we may look into."""
        root = Path(self.cfg.checkpoint_dir or "/nonexistent")
        try:
            names = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            return []
        return [n for n in names if NAME_RE.fullmatch(n)]

    def lineage(self, w: WorkloadInfo) -> str:
        lineage = w.labels.get("lineage")
        if not lineage:
            raise errors.NotSupported(
                f"Slurm job {w.name} does not run under the clawpoint wrapper",
                hint="submit it with the sbatch helper (clawpoint slurm submit) so it can be "
                "checkpointed and restored",
            )
        return validate_name(lineage, what="lineage")

    # ----- plans ----------------------------------------------------------------------
    def plan(self, action: Action, target: str, params: ActionParams) -> PlanDraft:
        """The draft from the plan table, every step's arguments and references checked
        against their models (``step_args``)."""
        return dispatch.plan(
            plans.PLANS,
            self,
            action,
            target,
            params,
            backend=self.name,
            why_not=plans.WHY_NOT,
            args=step_args.ARGS,
            outputs=step_args.OUTPUTS,
        )

    def run_step(self, op: str, args: dict[str, Any], progress: ProgressFn) -> dict[str, Any]:
        return dispatch.run_step(
            STEPS, self, op, args, progress, backend="Slurm", outputs=step_args.OUTPUTS
        )

    # ``BatchSubmitter``: the sbatch pattern (``core.backends.slurm.sbatch``).
    def render_batch(self, spec: BatchSpec) -> str:
        return sbatch.render_sbatch(_sbatch_spec(spec), self.cfg)

    def submit_batch(self, spec: BatchSpec) -> str:
        return sbatch.submit(_sbatch_spec(spec), self.cfg, self.transport).workload

    def recover_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        if op in handoff.RECOVER:
            return handoff.RECOVER[op](self, args, started_at)
        return steps.recover_step(self, op, args, started_at)

    def reconcile_step(
        self, op: str, args: dict[str, Any], started_at: datetime
    ) -> dict[str, Any] | None:
        return steps.reconcile_step(self, op, args, started_at)

    # ----- small helpers used by actions ----------------------------------------------
    def newest_checkpoint(self, lineage: str, owner: str | None = None) -> CheckpointInfo | None:
        """The newest published checkpoint of a lineage (good or not yet verified)."""
        if not self.cfg.checkpoint_dir:
            return None
        infos = self.store(owner).list(lineage)
        return max(infos, key=lambda c: c.seq, default=None)

    def newest_seq(self, lineage: str, owner: str | None = None) -> int:
        newest = self.newest_checkpoint(lineage, owner)
        return newest.seq if newest else 0

    def wait_until(
        self, what: str, timeout_s: float, check: Callable[[], Any], *, every_s: float | None = None
    ) -> Any:
        """Poll ``check()`` until it returns a truthy value; OperationFailed on timeout.

        A check that queries slurmctld starts at 50 ms and backs off to ``poll_interval_s``
        (a move's waits mostly end within a second, and each tick past the event is pause;
        a long wait must not ask a busy controller more often than configured); ``every_s``
        fixes the interval, for checks that read only the checkpoint store."""
        if every_s is not None:
            return poll_until(what, timeout_s, check, every_s=every_s, hint=_WAIT_HINT)
        slowest = self.cfg.poll_interval_s
        return poll_until(
            what,
            timeout_s,
            check,
            every_s=min(FIRST_POLL_S, slowest),
            max_every_s=slowest,
            hint=_WAIT_HINT,
        )


# Every step the plans use: one Slurm command or wait each (``steps``), and a live move's
# (``handoff``), which builds on them.
STEPS = steps.STEPS | handoff.STEPS
