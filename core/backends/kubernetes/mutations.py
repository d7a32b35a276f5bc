"""The mutating requests of the Kubernetes steps (``patch``, ``create_pod``, ``delete_pod``,
``evict``), sent for real or with ``dryRun=All`` (``preview``).

While planning each mutating step is sent once with ``dryRun=All``: the server validates and
authorizes it and answers the object as it would be, which the plan carries in
``scope.dry_run``; so a preview shows exactly what would change, and a missing RBAC
permission is reported before anything runs. A step the server would refuse in the state
the plan starts from (a Job's template change while it runs, see ``jobs``) carries
``deferred`` and is shown as validated when reached. Every name is validated again before
it reaches a URL (a journal could be edited).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from core import errors
from core.backends.kubernetes import ids
from core.backends.kubernetes.connection import Op
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.pods import meta
from core.model import PlanStep

Obj = dict[str, Any]

MUTATING = frozenset(
    {"patch", "create_pod", "delete_pod", "evict", "patch_object", "delete_object"}
)

# The custom objects a pool's steps may change (``pools``): nothing else, whatever a journal
# says. (group, plural) -> namespaced.
POOL_OBJECTS: dict[tuple[str, str], bool] = {
    ("cluster.x-k8s.io", "machines"): True,
    ("cluster.x-k8s.io", "machinedeployments"): True,
    ("karpenter.sh", "nodeclaims"): False,
}


def _pool_object(args: Obj) -> tuple[str, str, str, str, str]:
    """(group, version, plural, namespace, name) of a pool step's object, checked."""
    group, plural = str(args["group"]), str(args["plural"])
    namespaced = POOL_OBJECTS.get((group, plural))
    if namespaced is None:
        raise errors.InvalidInput(f"a pool step cannot change {plural}.{group}")
    ns = ids.check_namespace(str(args["namespace"])) if namespaced else ""
    version = ids.check_name(str(args["version"]), what="API version")
    return group, version, plural, ns, ids.check_name(str(args["name"]))


def _mutate_object(b: KubeContext, op: str, args: Obj, extra: Obj) -> Obj:
    """A pool's custom object patched (a Machine's annotation, a MachineDeployment's
    ``scale``) or deleted (a NodeClaim)."""
    group, version, plural, ns, name = _pool_object(args)
    custom = b.conn.api("CustomObjectsApi")
    if op == "delete_object":
        opn = Op("delete", plural, group, ns or None, name)
        if ns:
            return b.conn.call_json(opn, custom.delete_namespaced_custom_object, group, version,
                                    ns, plural, name, **extra)  # fmt: skip
        return b.conn.call_json(opn, custom.delete_cluster_custom_object, group, version,
                                plural, name, **extra)  # fmt: skip
    sub = str(args.get("subresource") or "")
    if sub not in ("", "scale") or not isinstance(args.get("patch"), dict):
        raise errors.InvalidInput("a pool patch is a JSON object, on the object or its scale")
    opn = Op("patch", f"{plural}/{sub}" if sub else plural, group, ns or None, name)
    method = "patch_namespaced_custom_object" + ("_scale" if sub else "")
    kw = {**extra, "_content_type": "application/merge-patch+json"}
    return b.conn.call_json(opn, getattr(custom, method), group, version, ns, plural, name,
                            args["patch"], **kw)  # fmt: skip


def mutate(b: KubeContext, op: str, args: Obj, *, dry_run: bool) -> Obj:
    """One mutating request (``dryRun=All`` when asked); the server's answer as JSON."""
    extra: Obj = {"dry_run": "All"} if dry_run else {}
    conn = b.conn
    ns = str(args.get("namespace") or "")
    if ns:
        ids.check_namespace(ns)
    if op in ("patch_object", "delete_object"):
        return _mutate_object(b, op, args, extra)
    if op == "patch":
        kind, name, patch, sub = (
            str(args["kind"]),
            ids.check_name(str(args["name"])),
            args["patch"],
            str(args.get("subresource") or ""),
        )
        if not isinstance(patch, dict):
            raise errors.InvalidInput("a patch must be a JSON object")
        if kind == "Node":
            core = conn.api("CoreV1Api")
            return conn.call_json(
                Op("patch", "nodes", "", None, name), core.patch_node, name, patch, **extra
            )
        wk = ids.kind_named(kind)
        res = f"{wk.plural}/{sub}" if sub else wk.plural
        opn = Op("patch", res, wk.group, ns, name)
        if wk.builtin:
            api_name, method = {
                "Job": ("BatchV1Api", "patch_namespaced_job"),
                "Deployment": ("AppsV1Api", "patch_namespaced_deployment"),
                "StatefulSet": ("AppsV1Api", "patch_namespaced_stateful_set"),
                "Pod": ("CoreV1Api", "patch_namespaced_pod"),
            }[wk.kind]
            if sub in ("scale", "resize"):  # pods/resize: an in-place resize (``resize``)
                method += f"_{sub}"
            kw = dict(extra)
            if sub == "status" and wk.kind == "Pod":
                # pods/status: a standby's readiness condition. A strategic merge patch, so
                # that the condition list merges by type (a JSON merge patch would replace
                # the kubelet's conditions with this one)
                method += "_status"
                kw["_content_type"] = "application/strategic-merge-patch+json"
            elif sub == "status":
                # jobs/status: clearing startTime before a move, as a JSON merge patch
                # (RFC 7386: null removes the field), the same for every client and kind
                method += "_status"
                kw["_content_type"] = "application/merge-patch+json"
            return conn.call_json(opn, getattr(conn.api(api_name), method), name, ns, patch, **kw)
        version = b.inventory.served_versions().get(wk.kind)
        if version is None:
            raise errors.NotFound(
                f"this cluster does not serve {wk.kind}", hint="install its operator"
            )
        custom = conn.api("CustomObjectsApi")
        return conn.call_json(
            opn,
            custom.patch_namespaced_custom_object,
            wk.group,
            version,
            ns,
            wk.plural,
            name,
            patch,
            **extra,
        )
    core = conn.api("CoreV1Api")
    if op == "create_pod":
        body = args["body"]
        ids.check_name(str(meta(body).get("name", "")))
        return conn.call_json(
            Op("create", "pods", "", ns), core.create_namespaced_pod, ns, body, **extra
        )
    if op == "delete_pod":
        name = ids.check_name(str(args["name"]))
        grace = args.get("grace_s")
        kw = dict(extra)
        if grace is not None:
            kw["grace_period_seconds"] = int(grace)
        return conn.call_json(
            Op("delete", "pods", "", ns, name), core.delete_namespaced_pod, name, ns, **kw
        )
    if op == "evict":
        name = ids.check_name(str(args["name"]))
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": ns},
        }
        return conn.call_json(
            Op("create", "pods/eviction", "", ns, name),
            core.create_namespaced_pod_eviction,
            name,
            ns,
            body,
            **extra,
        )
    raise errors.InvalidInput(f"unknown Kubernetes step {op!r}")


def _trim(obj: Obj) -> Obj:
    out = copy.deepcopy(obj)
    (out.get("metadata") or {}).pop("managedFields", None)
    return out


def preview(b: KubeContext, steps: list[PlanStep]) -> list[Obj]:
    """Each mutating step sent with ``dryRun=All``: what the server says would change.

    A 403 raises (the plan cannot run; the error names the permission). A refusal the step
    would wait on (a PodDisruptionBudget) is shown as ``refused`` instead of failing the plan."""
    out: list[Obj] = []
    for s in steps:
        if s.op not in MUTATING:
            continue
        entry: Obj = {"step": s.name, "op": s.op, "request": describe(s)}
        if s.args.get("deferred"):
            # The server would refuse it in the state the plan starts from (a running Job's
            # template); it is validated when the steps before it have run.
            entry["deferred"] = str(s.args["deferred"])
            out.append(entry)
            continue
        try:
            entry["object"] = _trim(mutate(b, s.op, s.args, dry_run=True))
        except errors.Conflict as exc:
            if exc.code != "kubernetes-disruption-budget":
                raise
            entry["refused"] = exc.message
        out.append(entry)
    return out


def describe(s: PlanStep) -> str:
    a = s.args
    if s.op == "patch":
        where = f"{a['namespace']}/" if a.get("namespace") else ""
        sub = f"/{a['subresource']}" if a.get("subresource") else ""
        return f"PATCH {a['kind']} {where}{a['name']}{sub} {json.dumps(a['patch'], sort_keys=True)}"
    if s.op == "create_pod":
        return f"CREATE Pod {a['namespace']}/{meta(a['body']).get('name')}"
    if s.op == "delete_pod":
        return f"DELETE Pod {a['namespace']}/{a['name']}"
    if s.op in ("patch_object", "delete_object"):
        where = f"{a['namespace']}/" if a.get("namespace") else ""
        sub = f"/{a['subresource']}" if a.get("subresource") else ""
        what = f"{a['plural']}.{a['group']} {where}{a['name']}{sub}"
        if s.op == "delete_object":
            return f"DELETE {what}"
        return f"PATCH {what} {json.dumps(a['patch'], sort_keys=True)}"
    return f"EVICT Pod {a['namespace']}/{a['name']}"
