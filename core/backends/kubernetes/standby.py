"""A live move of a bare pod, planned: its copy starts on the target as a *standby* first.

The ordinary move of a pod (``moves.move_pod_steps``) stops it, waits for the published
checkpoint, and only then creates the copy: the workload's pause holds the scheduler, the
kubelet's start of the container, the wrapper's Python start and its engine check, and the
restore. Here the copy is created first, told by its environment to stand by
(``CLAWPOINT_STANDBY`` and the rest of ``core.specs.STANDBY_ENV``; its address is the pod's
IP, from the downward API); its wrapper announces itself in the checkpoint volume and waits
on TCP (``core.wrapper.handoff_remote``). Then the exec that stops the source names the
standby (``incontainer checkpoint --stop --hand-over TOKEN``): the source dumps, ends its
payload and orders the standby, which restores the staged images at once; the source
publishes the checkpoint after that. The steps run in ``handoff``.

Only where two pods of the workload may exist at once, and a restart cannot bring a second
copy back: a bare pod with ``restartPolicy: Never`` (Always and OnFailure would restart
the source's container after its handover, or the standby's as a standby), with the
checkpoint volume readable here (``[k8s] checkpoint_dir``: the rendezvous is read there),
and ``[k8s] live_handoff`` on. Everything else moves the ordinary way.

The standby carries the pod's labels from its start (NetworkPolicies, PodDisruptionBudgets
and affinity rules see it as the workload, so the source can reach it), and a readiness gate
(``clawpoint.io/took-over``, ``lineages.READY_GATE``) whose condition clawpoint sets False
while it stands by and True at its takeover (``handoff``): until then the kubelet reports it
not Ready, and a Service selecting those labels sends it no traffic. Setting the condition
needs ``patch`` on ``pods/status``; a standby whose condition cannot be set is dropped before
any order and the move goes the ordinary way. It is hidden from the workload listing
(``clawpoint.io/standby-for``) until it took over. A copy made later of a pod that was once a
standby has neither the gate nor the standby's environment (``without_standby``).
"""

from __future__ import annotations

import copy
from typing import Any

from core.backends.kubernetes.builders import step
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.lineages import READY_GATE, STANDBY_ANNOTATION
from core.backends.kubernetes.pods import container_of, meta, require_wrapped
from core.model import PlanStep
from core.specs import STANDBY_ENV
from core.wrapper import handoff

Obj = dict[str, Any]


def why_not_live(b: KubeContext, pod: Obj) -> str | None:
    """Why a move of ``pod`` cannot hand over to a standby (None: it can)."""
    if not b.cfg.live_handoff:
        return "live handoffs are off ([k8s] live_handoff = false)"
    if b.store() is None:
        return "the checkpoint volume is not mounted here ([k8s] checkpoint_dir)"
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    if policy != "Never":
        return f"restartPolicy {policy} would restart a container after the handover"
    return None


def without_standby(body: Obj) -> Obj:
    """A pod body with no trace of a standby: a copy made of a pod that once was one (a
    second move) must start as the workload, not wait for an order."""
    out = copy.deepcopy(body)
    (out.get("metadata") or {}).get("annotations", {}).pop(STANDBY_ANNOTATION, None)
    spec = out.get("spec") or {}
    for c in spec.get("containers") or []:
        if c.get("env"):
            c["env"] = [e for e in c["env"] if e.get("name") not in STANDBY_ENV]
    # Nobody would set the gate's condition on an ordinary copy: it would never be Ready.
    gates = [g for g in spec.get("readinessGates") or [] if g.get("conditionType") != READY_GATE]
    if gates:
        spec["readinessGates"] = gates
    else:
        spec.pop("readinessGates", None)
    return out


def standby_body(body: Obj, *, name: str, token: str, source: str, wait_s: float) -> Obj:
    """The copy ``body`` of the pod ``source``, named ``name``, as a standby for it."""
    out = without_standby(body)
    out["metadata"]["name"] = name
    out["metadata"].setdefault("annotations", {})[STANDBY_ANNOTATION] = source
    out["spec"]["readinessGates"] = [
        *(out["spec"].get("readinessGates") or []),
        {"conditionType": READY_GATE},
    ]
    wrapped = container_of(out)
    for c in out["spec"]["containers"]:
        if c.get("name") == wrapped:
            c["env"] = [
                *(c.get("env") or []),
                {"name": "CLAWPOINT_STANDBY", "value": token},
                {"name": "CLAWPOINT_STANDBY_FOR", "value": source},
                {"name": "CLAWPOINT_STANDBY_TIMEOUT", "value": f"{wait_s:g}"},
                {"name": "CLAWPOINT_STANDBY_HOST",
                 "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            ]  # fmt: skip
    return out


def live_move_steps(
    b: KubeContext, pod: Obj, body: Obj, *, where: str, prefix: str
) -> list[PlanStep]:
    """Standby, wait for it, stop the source handing over, wait for its end, takeover (the
    standby's restore confirmed, else a copy restored the ordinary way), delete the source.
    ``body``: the ordinary copy (the fallback's; the standby is made from it)."""
    m = meta(pod)
    ns, old, lineage = m["namespace"], m["name"], require_wrapped(pod)
    token = handoff.new_token()
    name = b.next_pod_name(old)
    # The standby waits from its start: its wait, the source's exec, then its dump.
    wait_s = min(3600.0, b.cfg.checkpoint_timeout_s + b.cfg.start_timeout_s + 60.0)
    sb = standby_body(body, name=name, token=token, source=old, wait_s=wait_s)
    container = container_of(pod)
    return [
        step(f"{prefix}standby", "create_pod", f"create pod {ns}/{name} {where} as a standby: its wrapper starts now and waits for {lineage}", namespace=ns, body=sb),
        step(f"{prefix}wait_standby", "wait_standby", f"wait until the standby {ns}/{name} listens (else delete it: the move goes the ordinary way)", namespace=ns, pod=name, lineage=lineage, token=token, timeout_s=b.cfg.start_timeout_s),
        step(f"{prefix}checkpoint", "exec_checkpoint", f"exec into pod {ns}/{old}: the wrapper dumps {lineage}, ends it and hands it to the standby (none listening: checkpoint, then stop)", namespace=ns, pod=old, container=container, lineage=lineage, stop=True, hand_over=token, timeout_s=b.cfg.checkpoint_timeout_s),
        step(f"{prefix}wait_ended", "wait_pod_ended", f"wait until pod {ns}/{old} has stopped", namespace=ns, name=old, timeout_s=b.cfg.checkpoint_timeout_s),
        step(f"{prefix}takeover", "takeover", f"confirm that {ns}/{name} restored {lineage}; else delete it and create {ns}/{body['metadata']['name']} {where}, which restores the checkpoint", namespace=ns, pod=name, lineage=lineage, token=token, body=body, min_seq=f"${prefix}checkpoint.seq", timeout_s=b.cfg.start_timeout_s),
        step(f"{prefix}delete_old", "delete_pod", f"delete the old pod {ns}/{old}", namespace=ns, name=old, grace_s=None),
    ]  # fmt: skip
