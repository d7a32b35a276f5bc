"""Step builders of the Kubernetes plans: each step one API request or one wait, named,
with JSON-able args fitted to the op's model (``step_args``; ``steps`` runs them by op). ``$STEP.FIELD`` values are filled in by
the service from earlier steps' outputs. No requests here.
"""

from __future__ import annotations

from typing import Any

from core.backends.kubernetes import node_info
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.pods import container_of, meta, require_wrapped
from core.backends.kubernetes.step_args import step_of
from core.model import PlanStep

Obj = dict[str, Any]

REASON_ANNOTATION = node_info.CORDON_REASON_ANNOTATION


def step(step_name: str, op: str, description: str, /, **args: Any) -> PlanStep:
    """A step whose ``args`` are fitted to its op's model (``step_args``) first: a misspelt
    or missing argument fails when the plan is drafted; the JSON recorded is unchanged."""
    return step_of(step_name, op, description, args)


def checkpoint_step(b: KubeContext, pod: Obj, *, stop: bool, prefix: str = "") -> PlanStep:
    lineage = require_wrapped(pod)
    m = meta(pod)
    return step(
        f"{prefix}checkpoint",
        "exec_checkpoint",
        f"exec into pod {m['namespace']}/{m['name']}: the wrapper checkpoints {lineage} to the "
        "checkpoint volume" + (", then stops its payload" if stop else ", leaving it running"),
        namespace=m["namespace"],
        pod=m["name"],
        container=container_of(pod),
        lineage=lineage,
        stop=stop,
        timeout_s=b.cfg.checkpoint_timeout_s,
    )


def patch_step(
    name: str, ref_kind: str, namespace: str, obj_name: str, patch: Obj, description: str, *,
    subresource: str = "",
) -> PlanStep:  # fmt: skip
    return step(
        name,
        "patch",
        description,
        kind=ref_kind,
        namespace=namespace,
        name=obj_name,
        patch=patch,
        subresource=subresource,
    )


def wait_pods_gone_step(
    b: KubeContext, name: str, namespace: str, selector: str, what: str
) -> PlanStep:
    return step(
        name,
        "wait_pods_gone",
        f"wait until {what} has no pod left",
        namespace=namespace,
        selector=selector,
        timeout_s=b.cfg.checkpoint_timeout_s,
    )


def wait_restored_step(
    b: KubeContext, name: str, namespace: str, selector: str, lineage: str, after: str | int
) -> PlanStep:
    return step(
        name,
        "wait_restored",
        f"wait until a pod ({selector}) runs and its wrapper restored {lineage} from a "
        "checkpoint at least as new as the one just taken",
        namespace=namespace,
        selector=selector,
        lineage=lineage,
        min_seq=after,
        timeout_s=b.cfg.start_timeout_s,
    )
