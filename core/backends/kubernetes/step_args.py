"""The Kubernetes backend's step arguments: one model per step op, and ``ARGS``, op -> model.

Plans build every step through ``builders.step``, which fits its arguments to the op's model
here (a misspelt or missing argument fails when the plan is drafted); ``dispatch.plan``
checks every step of a draft against ``ARGS`` once more, including the notes plans add
afterwards (``deferred``, ``reason`` on a patch). The recorded JSON is what plans recorded
before the models: the fields that were given. Timeouts keep the type they were given
(``int | float``) so the JSON, and each plan hash, is unchanged.
``OUTPUTS`` (op -> model) says what each step reports: ``$checkpoint.seq`` is checked
against it when the plan is made, each answer when it comes. A request's answer has either
the object's name and resourceVersion or, for a repeat that had already taken effect, what
was found (``already_*``): those fields are optional.
Limits: shapes only; names, namespaces and lineages are checked by the steps (``ids``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from core.backends.step_models import Later, StepArgs, StepOutput, build, read
from core.model import PlanStep

__all__ = ["ARGS", "OUTPUTS", "read", "step_of"]

Seconds = int | float


class PatchArgs(StepArgs):
    """A merge patch of ``kind`` ``namespace``/``name`` (``subresource``: e.g. ``status``)."""

    kind: str
    namespace: str
    name: str
    patch: dict[str, Any]
    subresource: str = ""
    deferred: str | None = None  # why its dry run is skipped (shown in the preview)
    reason: str | None = None  # a cordon's reason, also written as an annotation


class CreatePodArgs(StepArgs):
    namespace: str
    body: dict[str, Any]


class DeletePodArgs(StepArgs):
    """Delete a pod; ``grace_s`` None: its own grace period."""

    namespace: str
    name: str
    grace_s: int | None = None


class EvictArgs(StepArgs):
    """Evict a pod; a PodDisruptionBudget refusal is waited on for ``wait_s``."""

    namespace: str
    name: str
    wait_s: Seconds | None = None


class ExecCheckpointArgs(StepArgs):
    """The wrapper in ``pod``'s ``container`` checkpoints ``lineage`` (then stops: ``stop``)."""

    namespace: str
    pod: str
    container: str
    lineage: str
    stop: bool = False
    hand_over: str | None = None  # a live move: the standby's token (``standby``)
    timeout_s: Seconds = 600


class WaitStandbyArgs(StepArgs):
    """Wait until the standby ``pod`` listens for ``lineage``'s order (``handoff``)."""

    namespace: str
    pod: str
    lineage: str
    token: str
    timeout_s: Seconds


class TakeoverArgs(StepArgs):
    """The standby ``pod``'s takeover confirmed, else ``body`` created (``handoff``)."""

    namespace: str
    pod: str
    lineage: str
    token: str
    body: dict[str, Any]
    min_seq: int | Later = 0
    timeout_s: Seconds


class WaitPodsGoneArgs(StepArgs):
    namespace: str
    selector: str
    timeout_s: Seconds


class WaitPodEndedArgs(StepArgs):
    namespace: str
    name: str
    timeout_s: Seconds


class WaitRestoredArgs(StepArgs):
    """A pod matching ``selector`` runs, restored from a checkpoint with seq >= ``min_seq``
    (a number, or ``$checkpoint.seq``)."""

    namespace: str
    selector: str
    lineage: str
    min_seq: int | Later | None = None
    timeout_s: Seconds


class WaitResizedArgs(StepArgs):
    """The kubelet reports ``container`` of pod ``name`` running with ``resources`` (an
    in-place resize, ``resize``)."""

    namespace: str
    name: str
    container: str
    resources: dict[str, Any]
    timeout_s: Seconds


class CheckNodeDrainedArgs(StepArgs):
    node: str


class WaitLeaseExpiredArgs(StepArgs):
    """``node``'s heartbeat lease, last renewed at ``renewed`` (ISO time), expires."""

    node: str
    renewed: str | None = None
    timeout_s: Seconds


class PatchObjectArgs(StepArgs):
    """A merge patch of a pool's custom object (``mutations.POOL_OBJECTS``), or of its
    ``scale`` subresource; ``namespace`` empty for a cluster-scoped one."""

    group: str
    version: str
    plural: str
    namespace: str
    name: str
    patch: dict[str, Any]
    subresource: str = ""
    # A size change: the replicas the plan saw; another size found first refuses the step
    # (someone else scaled the group meanwhile: the plan's victims may no longer be right).
    expect_replicas: int | None = None


class DeleteObjectArgs(StepArgs):
    """Delete a pool's custom object (a NodeClaim: Karpenter's way to remove its node)."""

    group: str
    version: str
    plural: str
    namespace: str
    name: str


class WaitPoolNodesArgs(StepArgs):
    """The pool's nodes settle: each of ``gone`` has left the cluster and ``ready`` of the
    pool's nodes are Ready (None: not waited on)."""

    pool: str
    gone: list[str] = Field(default_factory=list)
    ready: int | None = None
    timeout_s: Seconds


ARGS: dict[str, type[StepArgs]] = {
    "patch_object": PatchObjectArgs,
    "delete_object": DeleteObjectArgs,
    "wait_pool_nodes": WaitPoolNodesArgs,
    "patch": PatchArgs,
    "create_pod": CreatePodArgs,
    "delete_pod": DeletePodArgs,
    "evict": EvictArgs,
    "exec_checkpoint": ExecCheckpointArgs,
    "wait_standby": WaitStandbyArgs,
    "takeover": TakeoverArgs,
    "wait_pods_gone": WaitPodsGoneArgs,
    "wait_pod_ended": WaitPodEndedArgs,
    "wait_restored": WaitRestoredArgs,
    "wait_resized": WaitResizedArgs,
    "check_node_drained": CheckNodeDrainedArgs,
    "wait_lease_expired": WaitLeaseExpiredArgs,
}


# ----- outputs ---------------------------------------------------------------------------
class RequestOutput(StepOutput):
    """``patch``, ``create_pod``, ``delete_pod``: the API server's answer, or what a repeat
    found (the pod already created or gone, the patch already applied)."""

    name: str | None = None
    resourceVersion: str | None = None  # noqa: N815 (the API's own field name)
    pod: str | None = None
    deleted: str | None = None
    already_created: bool = False
    already_gone: bool = False
    already_applied: bool = False


class EvictOutput(StepOutput):
    evicted: str
    already_gone: bool = False


class ExecCheckpointOutput(StepOutput):
    """The checkpoint the wrapper in the container took (``$checkpoint.seq``)."""

    checkpoint: str
    seq: int
    lineage: str
    # "cleared": the karpenter.sh/do-not-disrupt clawpoint had set on the pod was removed
    # (core.backends.kubernetes.disruption); audited with the execution's steps.
    do_not_disrupt: str | None = None
    # A live move's: "sent", or why not (None: no standby was waiting, a plain stop).
    handoff: str | None = None


class StandbyOutput(StepOutput):
    """``pod``: the standby that listens ("" when there is none, ``why`` says why)."""

    pod: str
    node: str | None = None
    why: str = ""


class TakeoverOutput(StepOutput):
    """Where the workload runs now: the standby (``how`` "handoff") or a copy restored the
    ordinary way (``how`` "restart", ``why`` says why)."""

    pod: str
    node: str | None
    restored_from: str
    how: str
    why: str = ""
    workload: str | None = None  # the workload's id now (the pod's copy)


class StoppedOutput(StepOutput):
    stopped: bool


class EndedOutput(StepOutput):
    ended: bool


class RestoredOutput(StepOutput):
    pod: str
    node: str | None
    restored_from: str
    workload: str | None = None  # a bare pod's copy: the workload's id now


class ResizedOutput(StepOutput):
    pod: str
    resources: dict[str, Any]


class DrainedOutput(StepOutput):
    node: str
    drained: bool


class LeaseOutput(StepOutput):
    node: str
    lease_expired: bool


class PoolNodesOutput(StepOutput):
    pool: str
    nodes: list[str]


OUTPUTS: dict[str, type[StepOutput]] = {
    "patch_object": RequestOutput,
    "delete_object": RequestOutput,
    "wait_pool_nodes": PoolNodesOutput,
    "patch": RequestOutput,
    "create_pod": RequestOutput,
    "delete_pod": RequestOutput,
    "evict": EvictOutput,
    "exec_checkpoint": ExecCheckpointOutput,
    "wait_standby": StandbyOutput,
    "takeover": TakeoverOutput,
    "wait_pods_gone": StoppedOutput,
    "wait_pod_ended": EndedOutput,
    "wait_restored": RestoredOutput,
    "wait_resized": ResizedOutput,
    "check_node_drained": DrainedOutput,
    "wait_lease_expired": LeaseOutput,
}


def step_of(name: str, op: str, description: str, args: dict[str, Any]) -> PlanStep:
    """A plan step running ``op``, its ``args`` fitted to the op's model first."""
    return build(ARGS, name, op, ARGS[op](**args), description)
