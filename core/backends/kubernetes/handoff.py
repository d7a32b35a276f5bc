"""The steps of a live pod move (planned by ``standby``): ``wait_standby`` and ``takeover``.

``wait_standby`` waits until the standby pod's wrapper announces itself in the checkpoint
volume (its rendezvous, ``core.wrapper.handoff_remote``), then sets its readiness gate's
condition False (``lineages.READY_GATE``: it proves clawpoint may write ``pods/status``
before any order depends on it); a standby that cannot be scheduled, ends, does not
announce itself in time or whose condition cannot be set is cancelled and deleted, and the
move goes on the ordinary way (the source's exec then finds no standby: a plain stop).
``takeover`` runs once the source has ended: the standby's word ("taken") is confirmed by
its wrapper's status (it runs, restored from the move's checkpoint or a newer one), its
gate's condition is set True (the kubelet reports it Ready: Services route to it) and its
standby annotation is removed, so that listings show it as the workload; otherwise the
standby is cancelled and deleted and the ordinary copy is created, which restores the
checkpoint the source published. A standby is cancelled only by winning the rendezvous's
rename (``handoff_remote.move``), so one that took the order is never deleted: if it is
still restoring when the wait ends, the step fails and says so, rather than start a
second copy.

Limits: the rendezvous is read through ``[k8s] checkpoint_dir`` (the volume mounted where
clawpoint runs); the standby's liveness is the pod's phase, read every poll interval.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from core import errors, logs
from core.backends.base import ProgressFn
from core.backends.kubernetes import ids
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.inventory import is_standby
from core.backends.kubernetes.lineages import READY_GATE, STANDBY_ANNOTATION
from core.backends.kubernetes.objects import conditions
from core.backends.kubernetes.pods import live, meta
from core.backends.kubernetes.step_args import TakeoverArgs, WaitStandbyArgs, read
from core.backends.kubernetes.steps import STEPS as BASE
from core.specs import check_standby_token
from core.wrapper import handoff_remote

Obj = dict[str, Any]
log = logs.get_logger("clawpoint.kubernetes")


def wait_standby(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    """The standby listens (``pod``), else it is gone and ``why`` says why."""
    a = read(WaitStandbyArgs, args)
    ns, name = ids.check_namespace(a.namespace), ids.check_name(a.pod)
    lineage, token = ids.check_name(a.lineage, what="lineage"), check_standby_token(a.token)
    root = _root(b)

    def listening() -> Obj | None:
        state = handoff_remote.state_of(root, lineage, token)
        if state == "waiting":
            pod = _pod(b, ns, name)
            return {"pod": name, "node": ((pod or {}).get("spec") or {}).get("nodeName")}
        if state is not None:
            return {"pod": "", "why": f"the standby is {state}"}
        pod = _pod(b, ns, name)
        if pod is None or not live(pod):
            return {"pod": "", "why": f"the standby pod {ns}/{name} ended before it listened"}
        scheduled = conditions(pod).get("PodScheduled") or {}
        if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
            # Beside the running source it may not fit (a move onto its own node): no wait
            # for room that only the source's end would make.
            why = str(scheduled.get("message") or "no node has room for it")
            return {"pod": "", "why": f"the standby does not fit: {why}"}
        return None

    try:
        out: Obj = b.wait_until(f"the standby {ns}/{name} to listen", a.timeout_s, listening)
    except errors.OperationFailed:
        out = {"pod": "", "why": f"the standby pod {ns}/{name} did not listen in time (it "
               "may not fit on the target)"}  # fmt: skip
    if out["pod"]:
        try:
            _set_gate(b, ns, name, took_over=False)
        except errors.ClawpointError as exc:
            # Without it the standby could never be reported Ready once it runs the workload.
            out = {"pod": "", "why": f"its readiness condition could not be set, which needs "
                   f"patch on pods/status ({exc.message})"}  # fmt: skip
    if not out["pod"]:
        log.info("kubernetes.no_standby", pod=f"{ns}/{name}", why=out["why"])
        _drop(b, root, ns, name, lineage, token)
    return out


def takeover(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    """Where the workload runs now: the standby (``how`` handoff) or the ordinary copy
    (``how`` restart, ``why`` says why)."""
    a = read(TakeoverArgs, args)
    ns, name = ids.check_namespace(a.namespace), ids.check_name(a.pod)
    lineage, token = ids.check_name(a.lineage, what="lineage"), check_standby_token(a.token)
    root = _root(b)
    why = _await_takeover(b, root, ns, name, lineage, token, float(a.timeout_s))
    if not why:
        found = _restored(b, ns, name, lineage, int(a.min_seq or 0), float(a.timeout_s), progress)
        if _become_workload(b, ns, name):  # else kept "taken": a repeat of this step
            handoff_remote.remove(root, lineage, token)
        log.info("kubernetes.handed_over", pod=f"{ns}/{name}", lineage=lineage)
        return {**found, "how": "handoff", "why": ""}
    if handoff_remote.state_of(root, lineage, token) == "ordered" and _alive(b, ns, name):
        raise errors.OperationFailed(
            f"the standby pod {ns}/{name} is still restoring {lineage}: {why}; no other copy "
            "was created, so that it never runs twice",
            hint=f"watch pod {ns}/{name}: it runs the workload once its restore ends; if it "
            f"fails instead, resume {lineage} from its newest checkpoint",
        )
    _drop(b, root, ns, name, lineage, token)
    handoff_remote.remove(root, lineage, token)
    log.info("kubernetes.handoff_fallback", pod=f"{ns}/{name}", why=why)
    copy_name = ids.check_name(str(meta(a.body).get("name", "")))
    progress(0, None, f"creating {ns}/{copy_name}, which restores {lineage}: {why}")
    BASE["create_pod"](b, {"namespace": ns, "body": a.body}, progress)
    found = _restored(b, ns, copy_name, lineage, int(a.min_seq or 0), float(a.timeout_s),
                      progress)  # fmt: skip
    return {**found, "how": "restart", "why": why}


STEPS = {"wait_standby": wait_standby, "takeover": takeover}


# ----- helpers ---------------------------------------------------------------------------
def _await_takeover(
    b: KubeContext, root: Any, ns: str, name: str, lineage: str, token: str, timeout_s: float
) -> str:
    """ "" once the standby says it runs the workload; else why not."""
    watch = handoff_remote.TakeoverWatch(
        root, lineage, token, alive=lambda: _alive(b, ns, name),
        done_before=lambda: _took_over(b, ns, name), what=f"the standby pod {ns}/{name}",
    )  # fmt: skip
    try:
        said: str = b.wait_until("the standby's takeover", timeout_s, watch.settled)
    except errors.OperationFailed:
        return f"the standby did not finish its restore within {timeout_s:g} s"
    return "" if said == "taken" else said


def _restored(
    b: KubeContext, ns: str, name: str, lineage: str, min_seq: int, timeout_s: float,
    progress: ProgressFn,
) -> Obj:  # fmt: skip
    """``wait_restored`` on the one pod ``name``: it runs, restored at ``min_seq`` or later."""
    args = {"namespace": ns, "selector": f"metadata.name={name}", "lineage": lineage,
            "min_seq": min_seq, "timeout_s": timeout_s}  # fmt: skip
    return dict(BASE["wait_restored"](b, args, progress))


def _drop(b: KubeContext, root: Any, ns: str, name: str, lineage: str, token: str) -> None:
    """Cancel and delete a standby that has not taken the workload (never one that has:
    it won the rename, or a takeover confirmed earlier removed its rendezvous)."""
    if not handoff_remote.cancel(root, lineage, token, alive=lambda: _alive(b, ns, name)):
        return
    if _took_over(b, ns, name):
        return
    try:
        BASE["delete_pod"](b, {"namespace": ns, "name": name, "grace_s": 0}, lambda *_: None)
    except errors.ClawpointError as exc:  # its wrapper exits by itself at its timeout
        log.warning("kubernetes.standby_not_deleted", pod=f"{ns}/{name}", error=exc.message)
    # It may have announced itself meanwhile: no source may hand over to it now.
    handoff_remote.move(root, lineage, token, "waiting", "cancelled")


def _set_gate(b: KubeContext, ns: str, name: str, *, took_over: bool) -> None:
    """The standby's readiness gate condition, through ``pods/status``. A strategic merge
    patch: the condition list merges by ``type`` (the kubelet's own conditions stay), as
    ``kubectl patch --subresource=status`` does."""
    condition = {
        "type": READY_GATE,
        "status": "True" if took_over else "False",
        "reason": "TookOver" if took_over else "StandingBy",
        "message": "runs the workload" if took_over else "waits for the workload's handoff",
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    patch = {"status": {"conditions": [condition]}}
    BASE["patch"](b, {"kind": "Pod", "namespace": ns, "name": name, "patch": patch,
                      "subresource": "status"}, lambda *_: None)  # fmt: skip


def _become_workload(b: KubeContext, ns: str, name: str) -> bool:
    """The standby is the workload now: its gate's condition True (the kubelet reports it
    Ready: Services route to it), then its annotation removed (listings show it), in that
    order, so that an unmarked standby is one that took over in full (``_took_over``).
    False when a request failed: it runs the workload and only Services or listings lag;
    a repeat of the step finishes it."""
    unmark = {"metadata": {"annotations": {STANDBY_ANNOTATION: None}}}
    try:
        _set_gate(b, ns, name, took_over=True)
        BASE["patch"](b, {"kind": "Pod", "namespace": ns, "name": name, "patch": unmark},
                      lambda *_: None)  # fmt: skip
    except errors.ClawpointError as exc:
        log.warning("kubernetes.takeover_unfinished", pod=f"{ns}/{name}", error=exc.message)
        return False
    return True


def _took_over(b: KubeContext, ns: str, name: str) -> bool:
    """The standby runs as the workload (unmarked): a takeover that already happened."""
    pod = _pod(b, ns, name)
    return pod is not None and live(pod) and not is_standby(pod)


def _pod(b: KubeContext, ns: str, name: str) -> Obj | None:
    pods = b.list_pods(ns, field_selector=f"metadata.name={name}")
    return pods[0] if pods else None


def _alive(b: KubeContext, ns: str, name: str) -> bool:
    pod = _pod(b, ns, name)
    return pod is not None and live(pod)


def _root(b: KubeContext) -> Any:
    store = b.store()
    if store is None:
        raise errors.Conflict(
            "a live move reads the standby's rendezvous in the checkpoint volume, which is "
            "not mounted here",
            hint="set [k8s] checkpoint_dir to the volume as mounted here, or live_handoff = false",
        )
    return store.root
