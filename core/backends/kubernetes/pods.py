"""Reading pods: what a pod is, what it runs, where it may be placed. No requests are sent
here except ``pods_of``'s list (through the context). Limits: one wrapped container per pod
(``clawpoint.io/container`` names it, else the first).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from core import errors
from core.backends.kubernetes import ids
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.lineages import LINEAGE_ANNOTATION, lineage_of
from core.backends.kubernetes.pod_size import wrapped_name

Obj = dict[str, Any]

TERMINAL = ("Succeeded", "Failed")
SCALED = ("Deployment", "StatefulSet")


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def container_of(pod: Obj) -> str:
    name = wrapped_name(pod)
    if name is None:
        raise errors.InvalidInput(f"pod {meta(pod).get('name')} has no containers")
    return name


def live(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINAL and not meta(pod).get(
        "deletionTimestamp"
    )


def owner_kind(pod: Obj) -> str | None:
    for o in meta(pod).get("ownerReferences") or []:
        if o.get("controller"):
            return str(o.get("kind"))
    return None


def selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def pods_of(b: KubeContext, ref: ids.WorkloadRef, raw: Obj) -> list[Obj]:
    """The live pods of a workload (itself for a Pod)."""
    kind = ref.kind.kind
    if kind == "Pod":
        return [raw] if live(raw) else []
    if kind == "Job":
        sel = f"batch.kubernetes.io/job-name={ref.name}"
    elif kind in SCALED:
        labels = ((raw.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if not labels:
            return []
        sel = selector({str(k): str(v) for k, v in labels.items()})
    else:
        return []
    return [p for p in b.list_pods(ref.namespace, label_selector=sel) if live(p)]


_WRAPPER_ARGV = re.compile(r"(^|[\s/])clawpoint\s+run(\s|$)|-m\s+core\.cli\s+run(\s|$)")


def runs_wrapper(pod: Obj) -> bool | None:
    """Whether the wrapped container's ``command``/``args`` start clawpoint's wrapper
    (``clawpoint run`` or ``python -m core.cli run``, also inside a shell line); None when
    the spec sets neither, so the image's entrypoint decides and only the container knows."""
    spec = pod.get("spec") or {}
    name = container_of(pod) if spec.get("containers") else ""
    container: Obj = next((c for c in spec.get("containers") or [] if c.get("name") == name), {})
    argv = [str(a) for a in [*(container.get("command") or []), *(container.get("args") or [])]]
    if not container.get("command"):
        return None  # the image's ENTRYPOINT runs (args, if any, are its arguments)
    return bool(_WRAPPER_ARGV.search(" ".join(argv)))


def require_wrapped(pod: Obj) -> str:
    lineage = lineage_of(pod)
    where = f"pod {meta(pod).get('namespace')}/{meta(pod).get('name')}"
    if not lineage:
        raise errors.NotSupported(
            f"{where} does not run under the clawpoint wrapper (no clawpoint.io/lineage "
            "annotation)",
            hint="run its container with the wrapper as entrypoint and a checkpoint volume "
            "(deploy/kubernetes/example-job.yaml), or make it a cooperative app",
        )
    if runs_wrapper(pod) is False:
        # Annotated as wrapped, but the command shown is something else: the exec into it
        # would find no wrapper to ask. Refused here instead of failing after the wait.
        raise errors.NotSupported(
            f"{where} is annotated {LINEAGE_ANNOTATION}={lineage} but its container "
            f"{container_of(pod)!r} does not run the wrapper (its command is not "
            "`clawpoint run ...` or `python -m core.cli run ...`)",
            code="kubernetes-wrapper-missing",
            hint="start the container with `clawpoint run --name LINEAGE -- <your command>` "
            "(spec.containers[].command), or remove the annotation",
        )
    return lineage


def image_warnings(spec: Obj) -> list[str]:
    """A warning per container whose image is not pinned by digest: the target node may
    pull another image, and CRIU restores files by path and checks them."""
    return [
        f"container {c.get('name')!r} runs image {c.get('image')!r}, not pinned by digest "
        "(name@sha256:...): the target node may pull a different image than the one "
        "checkpointed, and the restore fails if files the process had open differ"
        for c in spec.get("containers") or []
        if "@sha256:" not in str(c.get("image") or "")
    ]


def restarts(pod: Obj) -> bool:
    """Whether the kubelet starts the pod's containers again after they exit: restartPolicy
    Always (the API default of a pod) or OnFailure (the wrapper's exit code after a stop is
    not promised to be 0)."""
    return ((pod.get("spec") or {}).get("restartPolicy") or "Always") != "Never"


# ----- affinity -----------------------------------------------------------------------------
def with_placement(spec: Obj, *, to: str | None, away_from: list[str]) -> Obj:
    """A pod spec pinned to ``to`` or kept off ``away_from`` (required node affinity on
    ``kubernetes.io/hostname``); ``nodeName`` and a hostname ``nodeSelector`` cleared so the
    scheduler places it."""
    out = copy.deepcopy(spec)
    out.pop("nodeName", None)
    # A pin to the old node by hostname would contradict the new placement.
    selector = dict(out.get("nodeSelector") or {})
    if (to or away_from) and selector.pop("kubernetes.io/hostname", None) is not None:
        if selector:
            out["nodeSelector"] = selector
        else:
            out.pop("nodeSelector", None)
    if to:
        expr = {"key": "kubernetes.io/hostname", "operator": "In", "values": [to]}
    elif away_from:
        expr = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": sorted(away_from)}
    else:
        return out
    affinity = out.setdefault("affinity", {})
    node_aff = affinity.setdefault("nodeAffinity", {})
    # The pod's own required terms stay (terms are ORed, a term's expressions ANDed: the
    # placement is ANDed into each); only their hostname expressions are replaced.
    own = (node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    ) or [{}]
    terms = []
    for term in own:
        kept = [
            e
            for e in term.get("matchExpressions") or []
            if e.get("key") != "kubernetes.io/hostname"
        ]
        terms.append({**term, "matchExpressions": [*kept, expr]})
    node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    return out
