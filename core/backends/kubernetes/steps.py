"""Steps of the Kubernetes plans, and ``STEPS``, the table ``run_step`` dispatches on.

Each step is one API request (``mutations``) or one wait. Checkpoints go through
``pods/exec`` into the wrapped container (``python -m core.backends.kubernetes.incontainer
checkpoint LINEAGE``), which asks the wrapper (the container's entrypoint) over its control
socket and prints the manifest of the checkpoint it published on the checkpoint volume.
``recover_step`` reads from the cluster whether a step that had started took effect.
Steps take ``KubeContext`` (``context``), not the backend; every name is validated again
before it reaches a URL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from core import errors, logs
from core.backends.base import ProgressFn
from core.backends.kubernetes import disruption, ids, nodes, pools
from core.backends.kubernetes.connection import Op, translate
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.lineages import lineage_of
from core.backends.kubernetes.mutations import mutate
from core.backends.kubernetes.pods import TERMINAL, container_of, live, meta, owner_kind
from core.backends.kubernetes.resize import run_wait_resized
from core.specs import check_standby_token

log = logs.get_logger("clawpoint.kubernetes")
Obj = dict[str, Any]
# How many times a conditional size change is read again and retried after a 409 on its
# resourceVersion (client-go's retry.DefaultRetry allows 5 steps).
CONFLICT_RETRIES = 4


def _request(b: KubeContext, args: Obj, op: str) -> Obj:
    """A mutating request for real; a repeat of one that already took effect (the pod is
    already gone, already created) answers as done."""
    try:
        result = mutate(b, op, args, dry_run=False)
    except errors.NotFound:
        if op == "delete_pod":
            return {"deleted": args["name"], "already_gone": True}
        raise
    except errors.Conflict as exc:
        if op == "create_pod" and exc.code == "kubernetes-alreadyexists":
            return {"pod": meta(args["body"]).get("name"), "already_created": True}
        raise
    return {
        "name": meta(result).get("name"),
        "resourceVersion": meta(result).get("resourceVersion"),
    }


def _patch(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    return _request(b, args, "patch")


def _create_pod(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    return _request(b, args, "create_pod")


def _delete_pod(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    return _request(b, args, "delete_pod")


def _patch_object(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    """A patch; a size change is conditional on the object it read (``pools.guarded_scale``).

    A 409 on that condition means the object changed between the read and the patch, most
    often a controller writing its status (the MachineSet controller does as the group
    scales), which bumps ``resourceVersion`` without changing the size: read again and
    retry, as client-go's ``retry.RetryOnConflict`` does, a few times. A change of the size
    itself is the guard's own Conflict (``pool-size-changed``), never retried."""
    for attempt in range(CONFLICT_RETRIES + 1):
        fresh = dict(args)
        done = pools.guarded_scale(b, fresh)
        if done is not None:
            return done
        try:
            return _request(b, fresh, "patch_object")
        except errors.Conflict as exc:
            conditional = "resourceVersion" in (fresh.get("patch") or {}).get("metadata", {})
            if not conditional or exc.code != "kubernetes-conflict" or attempt == CONFLICT_RETRIES:
                raise
            log.info("patch_object.conflict_retry", name=args.get("name"), attempt=attempt + 1)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _delete_object(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    try:
        return _request(b, args, "delete_object")
    except errors.NotFound:
        return {"deleted": args["name"], "already_gone": True}


def _wait_pods_gone(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    ns, sel = ids.check_namespace(str(args["namespace"])), str(args["selector"])
    b.wait_until(
        f"the pods {sel} to stop",
        float(args["timeout_s"]),
        lambda: not b.list_pods(ns, label_selector=sel),
    )
    return {"stopped": True}


def _wait_pod_ended(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    ns, name = ids.check_namespace(str(args["namespace"])), ids.check_name(str(args["name"]))

    def ended() -> bool:
        pods = b.list_pods(ns, field_selector=f"metadata.name={name}")
        return not pods or (pods[0].get("status") or {}).get("phase") in TERMINAL

    b.wait_until(f"pod {ns}/{name} to stop", float(args["timeout_s"]), ended)
    return {"ended": True}


def exec_in(
    b: KubeContext, ns: str, pod: str, container: str, argv: list[str], timeout_s: float
) -> tuple[int, str, str]:
    """Run ``argv`` in a container through ``pods/exec``; (exit code, stdout, stderr)."""
    from kubernetes.stream import stream

    core = b.conn.api("CoreV1Api")
    op = Op("create", "pods/exec", "", ns, pod)

    def run() -> tuple[int, str, str]:
        resp = stream(
            core.connect_get_namespaced_pod_exec, pod, ns, command=argv, container=container,
            stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False,
        )  # fmt: skip
        try:
            resp.run_forever(timeout=timeout_s)
            out, err = resp.read_stdout() or "", resp.read_stderr() or ""
            code = resp.returncode
        finally:
            resp.close()
        return (1 if code is None else int(code)), out, err

    return _call_exec(b, op, run)


def _call_exec(b: KubeContext, op: Op, fn: Any) -> tuple[int, str, str]:
    try:
        result: tuple[int, str, str] = fn()
        return result
    except Exception as exc:
        mapped = translate(exc, op, where=b.conn.host)
        if isinstance(mapped, errors.ClawpointError):
            raise mapped from exc
        raise errors.BackendUnavailable(
            f"exec into the pod failed ({op.describe()}): {mapped}",
            hint="check that the API server is reachable, then retry",
        ) from exc


def _wrapper_error(out: str, err: str, code: int, what: str) -> errors.ClawpointError:
    try:
        data = json.loads(err.strip().splitlines()[-1])
    except (ValueError, IndexError):
        data = {}
    if isinstance(data, dict) and data.get("error"):
        from core.wrapper.control import error_from

        return error_from(data)
    return errors.OperationFailed(
        f"{what} failed (exit {code}): {(err or out).strip()[-500:]}",
        hint="check that the container runs clawpoint's wrapper as its entrypoint and that "
        "k8s.exec_python names its interpreter",
    )


def _exec_checkpoint(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    ns, pod = ids.check_namespace(str(args["namespace"])), ids.check_name(str(args["pod"]))
    container = ids.check_name(str(args["container"]), what="container name")
    lineage = ids.check_name(str(args["lineage"]), what="lineage")
    argv = [*b.cfg.exec_python, "-m", "core.backends.kubernetes.incontainer", "checkpoint", lineage]
    if args.get("stop"):
        argv.append("--stop")
    if args.get("stop") and args.get("hand_over"):  # a live move (``standby``, ``handoff``)
        argv += ["--hand-over", check_standby_token(str(args["hand_over"]))]
    code, out, err = exec_in(b, ns, pod, container, argv, float(args.get("timeout_s", 600)))
    if code != 0:
        raise _wrapper_error(out, err, code, f"the checkpoint of {lineage} in pod {ns}/{pod}")
    info = json.loads(out.strip().splitlines()[-1])
    done: Obj = {
        "checkpoint": f"{ids.BACKEND}:{lineage}@{info['seq']}",
        "seq": int(info["seq"]),
        "lineage": lineage,
    }
    if info.get("handoff") is not None:
        done["handoff"] = str(info["handoff"])
    # The work is saved: the pod needs no protection from Karpenter's consolidation any more
    # (only what clawpoint set is removed). The checkpoint stands whatever happens here.
    try:
        cleared = disruption.clear_after_checkpoint(b, ns, pod, done["checkpoint"])
    except errors.ClawpointError as exc:
        log.warning("do-not-disrupt not cleared", pod=f"{ns}/{pod}", error=exc.message)
        done["do_not_disrupt_error"] = exc.message
    else:
        if cleared is not None:
            done["do_not_disrupt"] = cleared.change
    return done


def _seq_of(checkpoint_id: str) -> int:
    """``LINEAGE@SEQ`` (or ``LINEAGE/SEQ``) -> SEQ; -1 when there is none."""
    for sep in ("@", "/"):
        head, found, tail = checkpoint_id.rpartition(sep)
        if found and head and tail.isdigit():
            return int(tail)
    return -1


def _pod_lineage(pod: Obj) -> str | None:
    try:
        return lineage_of(pod)
    except errors.InvalidInput:
        return None  # an index the wrapper refuses too: that pod restores nothing


def _wait_restored(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    ns, sel, lineage = (
        ids.check_namespace(str(args["namespace"])),
        str(args["selector"]),
        ids.check_name(str(args["lineage"])),
    )
    min_seq = int(args.get("min_seq") or 0)
    found: Obj = {}

    def restored() -> bool:
        field = sel if sel.startswith("metadata.name=") else None
        pods = (
            b.list_pods(ns, field_selector=field) if field else b.list_pods(ns, label_selector=sel)
        )
        for pod in pods:
            if (pod.get("status") or {}).get("phase") != "Running" or not live(pod):
                continue
            if _pod_lineage(pod) != lineage:
                continue  # another pod of the workload: its wrapper serves its own lineage
            code, out, _err = exec_in(
                b, ns, meta(pod)["name"], container_of(pod),
                [*b.cfg.exec_python, "-m", "core.backends.kubernetes.incontainer", "status", lineage], 120,
            )  # fmt: skip
            if code != 0:
                continue
            status = json.loads(out.strip().splitlines()[-1])
            if not status.get("running") or not status.get("pid"):
                continue  # the wrapper serves its socket before it has restored: not yet
            seq = _seq_of(str((status.get("restore") or {}).get("from") or ""))
            source = str((status.get("restore") or {}).get("from") or "")
            if seq < 0 and min_seq > 0:
                raise errors.OperationFailed(
                    f"pod {ns}/{meta(pod)['name']} started without restoring {lineage}",
                    hint="check that it mounts the checkpoint volume and its wrapper's log",
                )
            if seq >= min_seq:
                found.update(
                    pod=meta(pod)["name"],
                    node=(pod.get("spec") or {}).get("nodeName"),
                    restored_from=source,
                )
                if owner_kind(pod) is None:  # a bare pod's copy: the workload's id now
                    found["workload"] = ids.format_workload_id("Pod", ns, meta(pod)["name"])
                return True
        return False

    b.wait_until(
        f"a pod of {lineage} to run restored from its checkpoint",
        float(args["timeout_s"]),
        restored,
    )
    progress(1, 1, f"{lineage} runs on {found.get('node')} from {found.get('restored_from')}")
    return found


def _evict(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    """Evict through the API; a PodDisruptionBudget refusal is waited on for ``wait_s``, then
    reported (Conflict naming the budget). Never a plain delete instead."""
    deadline = time.monotonic() + float(args.get("wait_s") or 0)
    while True:
        try:
            mutate(b, "evict", args, dry_run=False)
            return {"evicted": args["name"]}
        except errors.NotFound:
            return {"evicted": args["name"], "already_gone": True}
        except errors.Conflict as exc:
            if exc.code != "kubernetes-disruption-budget" or time.monotonic() >= deadline:
                raise
            progress(0, None, f"waiting on a PodDisruptionBudget: {exc.details.get('budget', '')}")
            time.sleep(b.cfg.poll_interval_s)


StepFn = Callable[[KubeContext, Obj, ProgressFn], Obj]

STEPS: dict[str, StepFn] = {
    "patch": _patch,
    "create_pod": _create_pod,
    "delete_pod": _delete_pod,
    "evict": _evict,
    "exec_checkpoint": _exec_checkpoint,
    "wait_pods_gone": _wait_pods_gone,
    "wait_pod_ended": _wait_pod_ended,
    "wait_restored": _wait_restored,
    "wait_resized": run_wait_resized,
    "check_node_drained": lambda b, args, progress: nodes.run_check_drained(b, args),
    "wait_lease_expired": lambda b, args, progress: nodes.run_wait_lease_expired(b, args),
    "patch_object": _patch_object,
    "delete_object": _delete_object,
    "wait_pool_nodes": pools.run_wait_pool_nodes,
}


def _contains(current: Any, patch: Any) -> bool:
    """Whether a merge patch's values are already in ``current`` (None = absent)."""
    if isinstance(patch, dict):
        cur = current if isinstance(current, dict) else {}
        return all(
            (k not in cur or cur[k] in (None, False)) if v is None else _contains(cur.get(k), v)
            for k, v in patch.items()
        )
    return bool(current == patch)


def _read_for_patch(b: KubeContext, args: Obj) -> Obj:
    kind, name = str(args["kind"]), ids.check_name(str(args["name"]))
    if kind == "Node":
        core = b.conn.api("CoreV1Api")
        return b.conn.call_json(Op("get", "nodes", "", None, name), core.read_node, name)
    return b.read_raw(
        ids.WorkloadRef(ids.kind_named(kind), ids.check_namespace(str(args["namespace"])), name)
    )


def _patched(b: KubeContext, args: Obj) -> Obj | None:
    if not isinstance(args.get("patch"), dict):
        return None
    if _contains(_read_for_patch(b, args), args["patch"]):
        return {"name": args["name"], "already_applied": True}
    return None


def _created(b: KubeContext, args: Obj) -> Obj | None:
    name = str(meta(args.get("body") or {}).get("name", ""))
    ns = ids.check_namespace(str(args["namespace"]))
    if b.list_pods(ns, field_selector=f"metadata.name={ids.check_name(name)}"):
        return {"pod": name, "already_created": True}
    return None


def _deleted(b: KubeContext, args: Obj) -> Obj | None:
    ns = ids.check_namespace(str(args["namespace"]))
    name = ids.check_name(str(args["name"]))
    if not b.list_pods(ns, field_selector=f"metadata.name={name}"):
        return {"deleted": name, "already_gone": True}
    return None


# Steps whose effect can be read back from the cluster; the others (waits, the exec, an
# eviction) are run again.
RECOVER: dict[str, Callable[[KubeContext, Obj], Obj | None]] = {
    "patch": _patched,
    "create_pod": _created,
    "delete_pod": _deleted,
    "patch_object": pools.recover_patch_object,
    "delete_object": pools.recover_delete_object,
}


def recover_step(b: KubeContext, op: str, args: Obj) -> Obj | None:
    """After a crash: the output of a step that took effect, read from the cluster, else None."""
    fn = RECOVER.get(op)
    return fn(b, args) if fn is not None else None
