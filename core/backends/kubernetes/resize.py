"""``resize`` on Kubernetes: a wrapped bare Pod's CPU, memory, GPUs or GPU class changed, in
place when the cluster and the change allow it, else through a checkpoint.

The rules of ``core.backends.sizing`` pick the size after (``wanted``) and the node
(``pick_node``: its own when the new size fits beside the requests of the node's other pods,
``placement.requests_of``). Then, read from kubernetes/kubernetes:

- **In place** through the ``pods/resize`` subresource (pkg/registry/core/pod/storage
  ``ResizeREST``; served with InPlacePodVerticalScaling on by default from 1.33, so only a
  server of 1.33 or later that lists ``pods/resize`` in discovery is asked; before 1.33 the
  gate was off by default and an alpha cluster took a patch of the pod spec itself, which
  clawpoint does not send: those servers take the move). Only when all of these hold, each
  a rule of pkg/apis/core/validation/validation.go ``ValidatePodResize`` or the kubelet:
  the pod stays on its node; only cpu and memory change ("only cpu and memory resources are
  mutable"); the QoS class stays ("Pod QOS Class may not change as a result of resizing",
  ``pod_size.qos_class``); no pod-level resources ("pods with pod-level resources cannot be
  resized"); the running container reports ``status.containerStatuses[].resources``
  (``isPodResizeRequestSupported``: else "Pod running on node without support for resize");
  a memory limit is neither lowered nor added under resizePolicy NotRequired
  (``validateContainerResize``: "memory limits cannot be decreased unless resizePolicy is
  RestartContainer"); and the container's resizePolicy for each changed resource is
  NotRequired: a RestartContainer policy makes the kubelet restart the container, which
  loses the process's state, so that change takes the checkpointed path instead.
  The plan then waits until the kubelet reports the new resources applied in
  ``status.containerStatuses[].resources`` with no ``PodResizePending`` or
  ``PodResizeInProgress`` condition left (staging/src/k8s.io/api/core/v1/types.go, 1.33+);
  a ``PodResizePending`` condition with reason ``Infeasible`` or ``Deferred`` (or, before
  1.33, ``status.resize`` saying so) fails the plan, and its undo step resizes the pod back
  to what it had: the process never stopped, nothing is lost.
- **Otherwise, a move** (``moves.move_pod_steps``, the migrate path): checkpoint, a
  replacement pod with the new requests and limits (and a ``nodeSelector`` on the GPU class
  label for a GPU class) pinned to the node ``pick_node`` chose, restored from the
  checkpoint; disruptive even on the same node.

Limits: bare Pods only (a Job's or a controller's pods come from their template: resize
that); the wrapped container only; no packing of several pods.
"""

from __future__ import annotations

import copy
import re
from decimal import Decimal
from typing import Any

from core import errors
from core.action_params import ResizeParams
from core.backends.base import PlanDraft, ProgressFn
from core.backends.kubernetes import ids, placement
from core.backends.kubernetes.builders import patch_step, step
from core.backends.kubernetes.connection import Op
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.moves import move_pod_steps
from core.backends.kubernetes.node_info import node_detail, to_node_info
from core.backends.kubernetes.objects import GPU_RESOURCES, conditions, quantity
from core.backends.kubernetes.pod_size import (
    NO_RESTART,
    container_named,
    qos_class,
    resize_policy,
    resized,
)
from core.backends.kubernetes.pods import container_of, meta, require_wrapped
from core.backends.kubernetes.workload_info import to_workload
from core.backends.sizing import Size, pick_node, resize_draft, size_of, wanted
from core.model import PlanScope, PlanStep
from core.sizes import MIB
from core.timings import estimate_pause

Obj = dict[str, Any]

IN_PLACE_SINCE = (1, 33)  # InPlacePodVerticalScaling beta, on by default; pods/resize served
PENDING, IN_PROGRESS = "PodResizePending", "PodResizeInProgress"
REFUSED = ("Infeasible", "Deferred")


def _size_of_requests(requests: dict[str, Decimal]) -> Size:
    cpu, mem = requests.get("cpu"), requests.get("memory")
    return Size(
        cpus=float(cpu) if cpu is not None else 0.0,
        memory_mb=int(mem // MIB) if mem is not None else 0,
        gpus=int(sum(requests.get(r, Decimal(0)) for r in GPU_RESOURCES)),
    )


def server_refusal(b: KubeContext) -> str | None:
    """Why this API server takes no in-place resize (its version, or no ``pods/resize`` in
    its discovery); None when it does."""
    version = b.conn.call_json(Op("get", "version"), b.conn.api("VersionApi").get_code)
    digits = [re.sub(r"\D", "", str(version.get(k) or "")) for k in ("major", "minor")]
    have = tuple(int(d) for d in digits if d)
    text = str(version.get("gitVersion") or ".".join(digits))
    if len(have) != 2 or have < IN_PLACE_SINCE:
        return f"the API server is {text}; in-place resize needs 1.33 or later"
    core = b.conn.api("CoreV1Api")
    found = b.conn.call_json(Op("get", "api/v1"), core.get_api_resources)
    if "pods/resize" not in {str(r.get("name")) for r in found.get("resources") or []}:
        return f"the API server ({text}) does not serve pods/resize"
    return None


def in_place_refusal(
    b: KubeContext, pod: Obj, before: Size, after: Size, *, moves_to: str | None
) -> str | None:
    """Why the resize cannot be made in place (the first reason), None when it can.
    ``moves_to``: the other node the resized pod goes to (None: its own)."""
    spec = pod.get("spec") or {}
    container = container_named(spec, container_of(pod))
    if moves_to is not None:
        return f"it goes to {moves_to}"
    if (after.gpus, after.gpu_class) != (before.gpus, before.gpu_class):
        return "only cpu and memory resize in place"
    pod_level = spec.get("resources") or {}
    if pod_level.get("requests") or pod_level.get("limits"):
        return "pods with pod-level resources cannot be resized in place"
    for name, changed in (("cpu", after.cpus != before.cpus), ("memory", after.memory_mb != before.memory_mb)):  # fmt: skip
        if changed and resize_policy(container, name) not in NO_RESTART:
            return (
                f"its resizePolicy for {name} is {resize_policy(container, name)}: the kubelet "
                "would restart the container and lose its process state"
            )
    new = _new_resources(container, before, after)
    old_mem = quantity(((container.get("resources") or {}).get("limits") or {}).get("memory"))
    new_mem = quantity((new.get("limits") or {}).get("memory"))
    if new_mem is not None and (old_mem is None or new_mem < old_mem):
        return "a memory limit is not lowered or added in place under resizePolicy NotRequired"
    if qos_class(_with_resources(spec, container, new)) != qos_class(spec):
        return f"its QoS class ({qos_class(spec)}) would change"
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    running = [s for s in statuses if "running" in (s.get("state") or {})]
    if running and any(s.get("resources") is None for s in running):
        return "its node's kubelet does not report container resources (no in-place resize)"
    return server_refusal(b)


def _new_resources(container: Obj, before: Size, after: Size) -> Obj:
    return resized(
        container,
        cpus=after.cpus if after.cpus != before.cpus else None,
        memory_mb=after.memory_mb if after.memory_mb != before.memory_mb else None,
    )


def _with_resources(spec: Obj, container: Obj, resources: Obj) -> Obj:
    out = copy.deepcopy(spec)
    for c in out.get("containers") or []:
        if c.get("name") == container.get("name"):
            c["resources"] = copy.deepcopy(resources)
    return out


def _replacement_spec(
    spec: Obj, container: Obj, before: Size, after: Size, gpu_label: str, gpu_class: str | None
) -> Obj:
    """The pod spec of the replacement: new requests and limits, GPUs and GPU class."""
    resources = _new_resources(container, before, after)
    if after.gpus != before.gpus:
        for part in ("limits", "requests"):
            values = resources.setdefault(part, {})
            for name in GPU_RESOURCES[1:]:
                values.pop(name, None)
            if after.gpus:
                values[GPU_RESOURCES[0]] = str(after.gpus)
            else:
                values.pop(GPU_RESOURCES[0], None)
        resources = {k: v for k, v in resources.items() if v}
    out = _with_resources(spec, container, resources)
    selector = dict(out.get("nodeSelector") or {})
    selector.pop(gpu_label, None)
    if after.gpus and after.gpu_class and gpu_class:
        selector[gpu_label] = gpu_class  # the label's own spelling on the chosen node
    if selector:
        out["nodeSelector"] = selector
    else:
        out.pop("nodeSelector", None)
    return out


def plan_resize(b: KubeContext, ref: ids.WorkloadRef, raw: Obj, params: ResizeParams) -> PlanDraft:
    if ref.kind.kind != "Pod":
        raise errors.NotSupported(
            f"resize changes wrapped bare Pods, not a {ref.kind.kind}",
            hint="change its pod template's resources (its controller recreates the pods)",
        )
    if (raw.get("status") or {}).get("phase") != "Running" or meta(raw).get("deletionTimestamp"):
        raise errors.Conflict(f"{ref} is not running", hint="resize a running pod")
    lineage = require_wrapped(raw)
    ns, name = meta(raw)["namespace"], meta(raw)["name"]
    label = b.cfg.gpu_class_label
    nodes_raw = b.inventory.raw_nodes()
    labels = {
        str(n["metadata"]["name"]): dict(n["metadata"].get("labels") or {}) for n in nodes_raw
    }
    workload = to_workload(ref.kind, raw, labels, label)
    before = size_of(workload)
    after = wanted(workload, params)
    live = b.inventory.raw_pods(field_selector="status.phase!=Succeeded,status.phase!=Failed")
    by_node = placement.pods_by_node(live, skip_pod=(ns, name))
    nodes = [
        to_node_info(node_detail(n, by_node.get(str(n["metadata"]["name"]), []), label))
        for n in nodes_raw
    ]
    used = {n: _size_of_requests(placement.requests_of(ps)) for n, ps in by_node.items()}
    to = ids.parse_node_id(str(params.to)) if params.to else None
    target = pick_node(nodes, after, used, workload=workload, to=to)
    source_name = str((raw.get("spec") or {}).get("nodeName") or "")
    source = next((n for n in nodes if n.name == source_name), None)
    moves_to = target.name if target.name != source_name else None
    why = in_place_refusal(b, raw, before, after, moves_to=moves_to)
    container = container_named(raw.get("spec") or {}, container_of(raw))
    scope = PlanScope(namespace=ns, kind="Pod", node=source_name or None)
    if why is None:
        new = _new_resources(container, before, after)
        old = copy.deepcopy(container.get("resources") or {})
        steps = [
            _resize_step("resize", ns, name, container, new, f"resize pod {ns}/{name} in place"),
            step("wait_resized", "wait_resized",
                 f"wait until the kubelet has applied the new resources of {ns}/{name} "
                 "(fails if it reports the resize Infeasible or Deferred)",
                 namespace=ns, name=name, container=str(container.get("name")),
                 resources=new, timeout_s=b.cfg.start_timeout_s),
        ]  # fmt: skip
        undo = [_resize_step("resize_back", ns, name, container, old, "resize it back")]
        return resize_draft(
            workload, before, after, source=source, target=target, steps=steps, pause_s=0.0,
            scope=scope, undo=undo, how="in place: pods/resize",
        )  # fmt: skip
    spec = _replacement_spec(
        raw.get("spec") or {}, container, before, after, label, target.gpu_class
    )
    b.preflight(spec, to=target.name, away=[], what=str(ref), pod=(ns, name))
    steps = move_pod_steps(b, raw, to=target.name, away=[], prefix="", spec=spec)
    pause = estimate_pause(b.newest_good(lineage)) or estimate_pause(
        None, resident_bytes=(before.memory_mb or 0) * MIB
    )
    scope.fits = [target.name]
    # A replacement on the same node still stops the process: a move, not a change in place.
    return resize_draft(
        workload, before, after, source=source, target=target, steps=steps,
        pause_s=pause or 0.0, scope=scope, how=f"checkpointed and restored: {why}",
        restarts=True,
    )  # fmt: skip


def _resize_step(
    step_name: str, ns: str, name: str, container: Obj, resources: Obj, what: str
) -> PlanStep:
    patch = {"spec": {"containers": [{"name": container.get("name"), "resources": resources}]}}
    return patch_step(step_name, "Pod", ns, name, patch, what, subresource="resize")


# ----- the wait --------------------------------------------------------------------------
def _applied(actual: Obj, wanted_res: Obj) -> bool:
    """Whether the reported ``resources`` hold the wanted cpu and memory values."""
    for part in ("limits", "requests"):
        for res in ("cpu", "memory"):
            want = quantity((wanted_res.get(part) or {}).get(res))
            if want is not None and quantity((actual.get(part) or {}).get(res)) != want:
                return False
    return True


def run_wait_resized(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    """Until the kubelet reports the resize applied; OperationFailed when it reports it
    Infeasible or Deferred (``PodResizePending``, or ``status.resize`` before 1.33)."""
    ns, name = ids.check_namespace(str(args["namespace"])), ids.check_name(str(args["name"]))
    cname, want = str(args["container"]), dict(args["resources"])
    ref = ids.WorkloadRef(ids.kind_named("Pod"), ns, name)

    def done() -> Obj | None:
        pod = b.read_raw(ref)
        st = pod.get("status") or {}
        conds = conditions(pod)
        pending = conds.get(PENDING) or {}
        reason = str(pending.get("reason") or "") if pending.get("status") == "True" else ""
        reason = reason or (str(st.get("resize")) if st.get("resize") in REFUSED else "")
        if reason in REFUSED:
            raise errors.OperationFailed(
                f"the kubelet on {(pod.get('spec') or {}).get('nodeName')} reports the resize "
                f"of {ns}/{name} {reason}: {pending.get('message') or 'no room there'}",
                code=f"kubernetes-resize-{reason.lower()}",
                hint="the pod keeps running with its old resources (the resize is undone); "
                "resize it with --to another node, or free room on this one",
            )
        if (conds.get(IN_PROGRESS) or {}).get("status") == "True" or pending:
            return None
        for s in st.get("containerStatuses") or []:
            if s.get("name") == cname and _applied(s.get("resources") or {}, want):
                return {"pod": name, "resources": s.get("resources") or {}}
        return None

    found: Obj = b.wait_until(f"the resize of {ns}/{name}", float(args["timeout_s"]), done)
    progress(1, 1, f"{ns}/{name} runs with its new resources")
    return found
