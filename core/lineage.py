"""Per-pod lineages: which checkpoint lineage one pod of a multi-pod workload writes.

Every pod of a Kubernetes workload runs the same container command
(``clawpoint run --name BASE -- CMD``), so the name alone cannot tell the pods apart: two pods
of one Job writing one lineage would restore each other's state. A pod with a stable index
gets its own lineage ``BASE-INDEX``; the index comes from what Kubernetes gives the
container, read from its environment:

- ``CLAWPOINT_POD_INDEX``: set by the manifest, e.g. a StatefulSet's ordinal through the
  downward API (``valueFrom.fieldRef.fieldPath:
  metadata.labels['apps.kubernetes.io/pod-index']``); it wins when both are set;
- ``JOB_COMPLETION_INDEX``: injected by the Job controller into every container of an
  ``Indexed`` Job's pods.

Without either (a bare pod, a non-Indexed Job, a single-replica Deployment), or with an
empty value (a downward API label the pod lacks), the lineage is ``BASE`` unchanged, so
single-pod workloads keep the names they always had. An index that is not a whole number
>= 0 is refused (it would make a lineage no other pod can predict).

This module is the one place the rule lives: the wrapper (``clawpoint run``) applies it to
its own environment, the Kubernetes backend to the environment a pod's container gets
(``core.backends.kubernetes.lineages.lineage_of``), so both name the same lineage. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from core import errors
from core.model import validate_name

POD_INDEX_ENV = "CLAWPOINT_POD_INDEX"
JOB_INDEX_ENV = "JOB_COMPLETION_INDEX"
INDEX_ENVS = (POD_INDEX_ENV, JOB_INDEX_ENV)  # first set (non-empty) one wins


def pod_index(env: Mapping[str, str]) -> int | None:
    """The pod's index from ``env`` (see the module docstring), or None when it has none."""
    for name in INDEX_ENVS:
        value = (env.get(name) or "").strip()
        if not value:
            continue
        if not value.isdigit() or len(value) > 9:
            raise errors.InvalidInput(
                f"{name}={value!r} is not a pod index (a whole number >= 0)",
                hint=f"set {name} from the pod's index (a StatefulSet's "
                "apps.kubernetes.io/pod-index label through the downward API) or unset it",
                details={"variable": name, "value": value},
            )
        return int(value)
    return None


def pod_lineage(base: str, env: Mapping[str, str]) -> str:
    """The lineage a pod running ``clawpoint run --name base`` writes: ``base-INDEX`` for a pod
    with an index, else ``base``."""
    index = pod_index(env)
    if index is None:
        return base
    return validate_name(f"{base}-{index}", what="per-pod lineage")
