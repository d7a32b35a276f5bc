"""Karpenter's ``karpenter.sh/do-not-disrupt`` on wrapped pods whose work is not saved.

Karpenter (kubernetes-sigs/karpenter) will not voluntarily disrupt a node while an active pod
on it carries ``karpenter.sh/do-not-disrupt: "true"``: ``pkg/utils/pod/scheduling.go``
(``IsDisruptable`` = not active, or ``IsDoNotDisruptActive`` false; the value ``"true"``, or
a positive duration after the pod's start) is checked for every pod of a candidate node in
``pkg/controllers/state/statenode.go`` (``ValidatePodsDisruptable``). That blocks the graceful
methods (consolidation, emptiness) and drift unless the NodeClaim sets a
``terminationGracePeriod`` (``pkg/controllers/disruption/types.go``, ``NewCandidate``); it
does not block expiration, interruption (a spot reclaim) or a forceful node deletion
(karpenter.sh "Well-Known Annotations" and "Disruption").

So for each running wrapped pod (``clawpoint.io/lineage``) in scope, ``reconcile`` sets
``karpenter.sh/do-not-disrupt: "true"`` while its work is unsaved for longer than the limit,
and removes it once a fresh checkpoint exists; ``clear_after_checkpoint`` removes it right
after a checkpoint step. Unsaved work runs from the newest checkpoint of the pod's lineage
that passes the store's cheap checks (authentic manifest, every file there at its size:
``verify(digests=False)``; re-hashing every image file each pass would cost a full read of
every checkpoint, and a restore re-hashes anyway), or from the wrapped container's start when
that is later (a pod restored from a checkpoint, or one that never had any, has unsaved
only what it did since it started). The limit is ``k8s.unsaved_after_s``; unset, twice the
pod's ``clawpoint run --checkpoint-every`` (one missed periodic checkpoint is tolerated),
else ``DEFAULT_UNSAVED_AFTER_S``.

Ownership: clawpoint marks what it set with ``clawpoint.io/set-do-not-disrupt: "true"`` in
the same patch, and only ever removes an annotation carrying that mark. A person's own
``karpenter.sh/do-not-disrupt`` (any value, no mark) is never changed; a value a person
changed after clawpoint set it is left, only the mark removed. Pods without the lineage
annotation (not clawpoint's) are never patched. Every patch carries the pod's
``resourceVersion`` read in the same pass, so a concurrent change by someone else is a 409,
not overwritten (the pod is looked at again next pass).

Limits: needs ``checkpoint_dir`` (without the volume freshness cannot be judged, and nothing
is changed); an interval changed at run time through the wrapper (``set_interval``) is not
seen, only the one in the pod's command; a pod that is not Running is left as it is
(Karpenter ignores terminal and terminating pods).
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from core import errors, logs
from core.backends.disruption_guard import ChangeSink, GuardChange, GuardPass
from core.backends.kubernetes import ids
from core.backends.kubernetes.connection import Op
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.lineages import lineage_of, wrapped_container
from core.backends.kubernetes.objects import ts
from core.backends.kubernetes.pods import live, meta
from core.model import CheckpointInfo
from core.store.store import CheckpointStore

log = logs.get_logger("clawpoint.kubernetes")
Obj = dict[str, Any]

DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"  # kubernetes-sigs/karpenter pkg/apis/v1/labels.go
BLOCKS = "true"  # the value IsDoNotDisruptActive treats as always active
SET_BY_CLAWPOINT = "clawpoint.io/set-do-not-disrupt"
DEFAULT_UNSAVED_AFTER_S = 900.0
INTERVALS_TOLERATED = 2.0


def checkpoint_every(pod: Obj) -> float | None:
    """The wrapper's ``--checkpoint-every`` in the wrapped container's command (None: none)."""
    c = wrapped_container(pod)
    argv = [str(a) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        value = None
        if arg == "--checkpoint-every" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--checkpoint-every="):
            value = arg.partition("=")[2]
        if value is not None:
            try:
                every = float(value)
            except ValueError:
                return None
            return every if math.isfinite(every) and every > 0 else None
    return None


def limit_s(pod: Obj, configured: float | None) -> float:
    """How long work may stay unsaved before the pod is protected."""
    if configured is not None:
        return configured
    every = checkpoint_every(pod)
    return INTERVALS_TOLERATED * every if every else DEFAULT_UNSAVED_AFTER_S


def started_at(pod: Obj) -> datetime | None:
    """When the wrapped container started running (else the pod's ``status.startTime``)."""
    name = wrapped_container(pod).get("name")
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == name:
            started = ts(((cs.get("state") or {}).get("running") or {}).get("startedAt"))
            if started is not None:
                return started
    return ts((pod.get("status") or {}).get("startTime"))


def newest_saved(store: CheckpointStore, lineage: str) -> CheckpointInfo | None:
    """The newest checkpoint of ``lineage`` with an authentic manifest and all its files."""
    for info in store.candidates(lineage):
        try:
            return store.verify(info.id, digests=False)
        except (errors.CorruptCheckpoint, errors.UntrustedCheckpoint):
            continue
    return None


def without_ours(annotations: Obj | None) -> Obj:
    """A pod's annotations for a copy of it (a move): the protection clawpoint set is not
    carried over (the copy restores a fresh checkpoint); a person's is."""
    notes = dict(annotations or {})
    if notes.pop(SET_BY_CLAWPOINT, None) == BLOCKS and notes.get(DO_NOT_DISRUPT) == BLOCKS:
        del notes[DO_NOT_DISRUPT]
    return notes


def _workload_of(pod: Obj) -> str:
    m = meta(pod)
    ns, name = str(m.get("namespace")), str(m.get("name"))
    for ref in m.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") in ("Job", "StatefulSet"):
            return ids.format_workload_id(str(ref["kind"]), ns, str(ref["name"]))
    return ids.format_workload_id("Pod", ns, name)


def _change(pod: Obj, change: str, reason: str, **kw: Any) -> GuardChange:
    m = meta(pod)
    return GuardChange(
        workload=_workload_of(pod),
        pod=f"{m.get('namespace')}/{m.get('name')}",
        node=(pod.get("spec") or {}).get("nodeName"),
        change=change,
        reason=reason,
        **kw,
    )


def decide(
    pod: Obj, newest: CheckpointInfo | None, now: datetime, limit: float
) -> tuple[Obj, GuardChange] | None:
    """The annotation patch ``pod`` needs now and the change it makes (None: none)."""
    notes = meta(pod).get("annotations") or {}
    ours = notes.get(SET_BY_CLAWPOINT) == BLOCKS
    value = notes.get(DO_NOT_DISRUPT)
    starts = [t for t in (newest.created_at if newest else None, started_at(pod)) if t]
    since = max(starts) if starts else None
    unsaved = round((now - since).total_seconds(), 1) if since else None
    facts: dict[str, Any] = {
        "checkpoint": f"{ids.PREFIX}{newest.id}" if newest else None,
        "unsaved_s": unsaved,
        "limit_s": limit,
    }
    if unsaved is None or unsaved > limit:
        if value is not None:
            return None  # ours already, or a person's: theirs to keep or remove
        why = (
            f"no checkpoint for {unsaved:.0f} s (limit {limit:.0f} s)"
            if unsaved is not None
            else "no checkpoint and no start time"
        )
        return {DO_NOT_DISRUPT: BLOCKS, SET_BY_CLAWPOINT: BLOCKS}, _change(pod, "set", why, **facts)
    if not ours:
        return None
    # Fresh: take back what clawpoint set; a value a person changed since stays theirs.
    patch: Obj = {SET_BY_CLAWPOINT: None}
    if value == BLOCKS:
        patch[DO_NOT_DISRUPT] = None
    why = f"checkpoint {unsaved:.0f} s old (limit {limit:.0f} s)"
    return patch, _change(pod, "cleared", why, **facts)


def _apply(b: KubeContext, pod: Obj, annotations: Obj) -> None:
    """PATCH the pod's annotations, conditional on the ``resourceVersion`` read."""
    m = meta(pod)
    ns, name = ids.check_namespace(str(m.get("namespace"))), ids.check_name(str(m.get("name")))
    body: Obj = {"metadata": {"annotations": annotations}}
    if m.get("resourceVersion"):
        body["metadata"]["resourceVersion"] = m["resourceVersion"]
    core = b.conn.api("CoreV1Api")
    b.conn.call_json(Op("patch", "pods", "", ns, name), core.patch_namespaced_pod, name, ns, body)


def _running(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and live(pod)


def reconcile(b: KubeContext, now: datetime, on_change: ChangeSink) -> GuardPass:
    """One pass over the running wrapped pods in scope (see the module docstring)."""
    out = GuardPass()
    store = b.store()
    if store is None:
        return out
    newest: dict[str, CheckpointInfo | None] = {}
    for pod in b.list_pods(None):
        where = f"pod {meta(pod).get('namespace')}/{meta(pod).get('name')}"
        try:
            lineage = lineage_of(pod)
        except errors.InvalidInput:
            continue  # an index the wrapper refuses too: it writes no lineage
        if lineage is None or not _running(pod):
            continue
        try:
            if lineage not in newest:
                newest[lineage] = newest_saved(store, lineage)
            wanted = decide(pod, newest[lineage], now, limit_s(pod, b.cfg.unsaved_after_s))
            if wanted is None:
                continue
            _apply(b, pod, wanted[0])
        except errors.Conflict as exc:  # changed meanwhile (by a person?): look again next pass
            log.info("do-not-disrupt not changed", pod=where, error=exc.message)
            continue
        except errors.ClawpointError as exc:
            out.errors.append(f"{DO_NOT_DISRUPT} on {where}: {exc.message}")
            continue
        out.changes.append(wanted[1])
        on_change(wanted[1])
    return out


def clear_after_checkpoint(
    b: KubeContext, namespace: str, name: str, checkpoint: str
) -> GuardChange | None:
    """Right after ``checkpoint`` of the pod: remove the annotation clawpoint set on it."""
    core = b.conn.api("CoreV1Api")
    try:
        pod = b.conn.call_json(
            Op("get", "pods", "", namespace, name), core.read_namespaced_pod, name, namespace
        )
    except errors.NotFound:
        return None  # stopped with the checkpoint (preempt, migrate): nothing left to protect
    notes = meta(pod).get("annotations") or {}
    if notes.get(SET_BY_CLAWPOINT) != BLOCKS:
        return None
    patch: Obj = {SET_BY_CLAWPOINT: None}
    if notes.get(DO_NOT_DISRUPT) == BLOCKS:
        patch[DO_NOT_DISRUPT] = None
    try:
        _apply(b, pod, patch)
    except errors.NotFound:
        return None
    return _change(pod, "cleared", f"checkpoint {checkpoint} taken", checkpoint=checkpoint)
