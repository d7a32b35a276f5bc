"""The Kubernetes backend's node pools: list them, and plan ``scale_pool`` through the
autoscaler that owns them (``[k8s.pools.NAME]``; the rules are ``autoscalers``').

- **cluster-api**: a MachineDeployment that cluster-autoscaler scales. Its size is
  ``spec.replicas`` within the autoscaler's min/max annotations. Growing raises the replicas
  through the ``scale`` subresource and waits until that many of its nodes are Ready.
  Shrinking does what cluster-autoscaler does, after clawpoint has saved the work: the nodes
  that lose least (``capacity.victims``) are cordoned, each is drained with save (every
  wrapped bare or Job pod checkpointed and restored on a node that stays, the other pods
  evicted through the Eviction API, ``node_plans.drain_body``), then each node's Machine is
  annotated ``cluster.x-k8s.io/delete-machine`` and the replicas lowered by one, so the
  MachineSet controller removes exactly those Machines; the plan waits until their nodes are
  gone.
- **karpenter**: a NodePool. Its size is how many of its nodes are up; its max is
  ``spec.limits.nodes`` (else the configured ``max_size``, else its size: cpu or memory
  limits say nothing about a node count). Shrinking cordons and drains the victims the same
  way, then deletes their NodeClaims (Karpenter's way to remove a node), refused at plan time
  when the NodePool's disruption budget allows fewer. Growing is refused: Karpenter adds
  nodes for pending pods, a NodePool has no size to raise.

A shrink whose moved pods fit on no node that stays is refused by the drain's pre-flight
(nothing is stopped). Every step is a plan step (``steps``): cordons, moves and evictions as
a drain makes them, ``patch_object`` / ``delete_object`` on the autoscaler's objects (only
those of ``mutations.POOL_OBJECTS``), ``wait_pool_nodes``. Limits: a pool is one
MachineDeployment or NodePool; MachinePools are not handled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core import errors
from core.action_params import PoolSizeParams
from core.backends import capacity
from core.backends.base import PlanDraft, ProgressFn
from core.backends.kubernetes import autoscalers as rules
from core.backends.kubernetes import ids, node_plans
from core.backends.kubernetes.builders import REASON_ANNOTATION, patch_step, step
from core.backends.kubernetes.config import KubePoolConfig
from core.backends.kubernetes.connection import Op
from core.backends.kubernetes.context import KubeContext
from core.backends.kubernetes.lineages import lineage_of
from core.backends.kubernetes.nodes import left_alone
from core.backends.kubernetes.pods import live, meta
from core.backends.kubernetes.step_args import PatchObjectArgs, WaitPoolNodesArgs, read
from core.model import NodeInfo, PlanScope, PlanStep, PoolInfo, utcnow

Obj = dict[str, Any]
BACKEND = ids.BACKEND


@dataclass
class PoolView:
    """A pool as read now: what ``pools`` lists, the autoscaler's object, and the object
    that backs each node (its Machine or NodeClaim)."""

    info: PoolInfo
    cfg: KubePoolConfig
    obj: Obj
    backing: dict[str, str] = field(default_factory=dict)  # node -> Machine / NodeClaim


def _custom(b: KubeContext) -> Any:
    return b.conn.api("CustomObjectsApi")


def _list(b: KubeContext, group: str, version: str, plural: str, ns: str | None,
          **sel: str) -> list[Obj]:  # fmt: skip
    custom = _custom(b)
    if ns:
        return list(b.conn.list_all(Op("list", plural, group, ns),
                                    custom.list_namespaced_custom_object, group, version, ns,
                                    plural, **sel))  # fmt: skip
    return list(b.conn.list_all(Op("list", plural, group), custom.list_cluster_custom_object,
                                group, version, plural, **sel))  # fmt: skip


def _get(b: KubeContext, group: str, version: str, plural: str, ns: str | None,
         name: str) -> Obj:  # fmt: skip
    custom = _custom(b)
    op = Op("get", plural, group, ns, name)
    if ns:
        return b.conn.call_json(op, custom.get_namespaced_custom_object, group, version, ns,
                                plural, name)  # fmt: skip
    return b.conn.call_json(op, custom.get_cluster_custom_object, group, version, plural, name)


def _object_name(name: str, cfg: KubePoolConfig) -> str:
    return cfg.object or ids.check_name(name, what="pool name")


def _read(b: KubeContext, name: str, cfg: KubePoolConfig, raw_nodes: list[Obj]) -> PoolView:
    obj_name = _object_name(name, cfg)
    try:
        if cfg.kind == "cluster-api":
            obj = _get(b, rules.CAPI_GROUP, rules.CAPI_VERSION, "machinedeployments",
                       cfg.namespace, obj_name)  # fmt: skip
        else:
            obj = _get(b, rules.KARPENTER_GROUP, rules.KARPENTER_VERSION, "nodepools", None,
                       obj_name)  # fmt: skip
    except errors.NotFound:
        what = (f"MachineDeployment {cfg.namespace}/{obj_name}" if cfg.kind == "cluster-api"
                else f"NodePool {obj_name}")  # fmt: skip
        raise errors.NotFound(
            f"pool {BACKEND}:{name}: no {what} in the cluster",
            hint=f"check [k8s.pools.{name}] (kind, object, namespace) and that "
            f"{'Cluster API' if cfg.kind == 'cluster-api' else 'Karpenter'} is installed",
        ) from None
    if cfg.kind == "cluster-api":
        return _capi_view(b, name, cfg, obj, raw_nodes)
    return _karpenter_view(b, name, cfg, obj, raw_nodes)


def _info(name: str, cfg: KubePoolConfig, *, low: int, high: int, size: int,
          nodes: list[str], idle: set[str]) -> PoolInfo:  # fmt: skip
    low = max(low, cfg.min_size or 0)
    high = min(high, cfg.max_size) if cfg.max_size is not None else high
    return PoolInfo(
        id=f"{BACKEND}:{name}", backend=BACKEND, name=name, spot=cfg.spot,
        price_per_hour=cfg.price_per_hour, min_size=min(low, max(high, 0)), max_size=high,
        size=size, nodes=sorted(nodes), idle=sorted(n for n in nodes if n in idle),
    )  # fmt: skip


def _capi_view(b: KubeContext, name: str, cfg: KubePoolConfig, md: Obj,
               raw_nodes: list[Obj]) -> PoolView:  # fmt: skip
    low, high = rules.capi_bounds(md)
    machines = _list(b, rules.CAPI_GROUP, rules.CAPI_VERSION, "machines", cfg.namespace,
                     label_selector=f"{rules.DEPLOYMENT_LABEL}={rules.name_of(md)}")  # fmt: skip
    backing: dict[str, str] = {}
    for m in rules.machines_of(md, machines):
        node = rules.node_of_machine(m, raw_nodes)
        if node is not None:
            backing[node] = rules.name_of(m)
    info = _info(name, cfg, low=low, high=high, size=rules.replicas_of(md),
                 nodes=list(backing), idle=_idle(b, list(backing)))  # fmt: skip
    return PoolView(info, cfg, md, backing)


def _karpenter_view(b: KubeContext, name: str, cfg: KubePoolConfig, pool: Obj,
                    raw_nodes: list[Obj]) -> PoolView:  # fmt: skip
    members = [n for n in rules.nodepool_nodes(pool, raw_nodes)
               if not meta(n).get("deletionTimestamp")]  # fmt: skip
    claims = _list(b, rules.KARPENTER_GROUP, rules.KARPENTER_VERSION, "nodeclaims", None,
                   label_selector=f"{rules.NODEPOOL_LABEL}={rules.name_of(pool)}")  # fmt: skip
    backing = {}
    for n in members:
        claim = rules.nodeclaim_of(n, claims)
        if claim is not None:
            backing[rules.name_of(n)] = claim
    names = [rules.name_of(n) for n in members]
    limit = rules.node_limit(pool)
    high = limit if limit is not None else (cfg.max_size if cfg.max_size is not None
                                            else len(names))  # fmt: skip
    info = _info(name, cfg, low=0, high=high, size=len(names), nodes=names,
                 idle=_idle(b, names))  # fmt: skip
    return PoolView(info, cfg, pool, backing)


def _idle(b: KubeContext, names: list[str]) -> set[str]:
    busy = {str((p.get("spec") or {}).get("nodeName")) for p in _pods(b) if left_alone(p) is None}
    return {n for n in names if n not in busy}


def _pods(b: KubeContext) -> list[Obj]:
    return [p for p in b.inventory.raw_pods(
        field_selector="status.phase!=Succeeded,status.phase!=Failed") if live(p)]  # fmt: skip


def pools(b: KubeContext) -> list[PoolInfo]:
    """Every configured pool (none configured: no request at all)."""
    if not b.cfg.pools:
        return []
    raw_nodes = b.inventory.raw_nodes()
    return [_read(b, n, c, raw_nodes).info for n, c in sorted(b.cfg.pools.items())]


def view(b: KubeContext, name: str) -> PoolView:
    """The pool ``name`` (``k8s:NAME`` or ``NAME``) as read now; NotFound naming the others."""
    name = name.removeprefix(ids.PREFIX)
    if name not in b.cfg.pools:
        capacity.find_pool(pools(b), name, backend=BACKEND)  # NotFound naming the pools
    return _read(b, name, b.cfg.pools[name], b.inventory.raw_nodes())


# ----- plans -----------------------------------------------------------------------------
def plan_scale_pool(b: KubeContext, name: str, params: PoolSizeParams) -> PlanDraft:
    """Grow a Cluster API pool, or save the work on the nodes that lose least and remove
    them through the pool's autoscaler."""
    v = view(b, name)
    pool = v.info
    if v.cfg.kind == "karpenter" and params.size > pool.size:
        raise errors.NotSupported(
            f"{pool.id} is a Karpenter NodePool: Karpenter adds nodes itself, for pods that "
            "are pending, and has no size to raise",
            hint="let pending pods drive it (submit or resume the work), or raise the "
            f"NodePool's spec.limits if they hold it back (now: {_limits(v.obj)})",
        )
    capacity.check_size(pool, params.size)
    if params.size > pool.size:
        return _grow(b, v, params.size)
    return _shrink(b, v, params.size)


def _limits(pool: Obj) -> str:
    limits = (pool.get("spec") or {}).get("limits") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(limits.items())) or "none"


def _scope(pool: PoolInfo, **kw: Any) -> PlanScope:
    return PlanScope(backend=BACKEND, pool=pool.name, **kw)


def _scale_step(v: PoolView, replicas: int, expect: int, name: str, what: str) -> PlanStep:
    m = meta(v.obj)
    return step(name, "patch_object", what, group=rules.CAPI_GROUP, version=rules.CAPI_VERSION,
                plural="machinedeployments", namespace=m["namespace"], name=m["name"],
                patch={"spec": {"replicas": replicas}}, subresource="scale",
                expect_replicas=expect)  # fmt: skip


def _wait_step(b: KubeContext, pool: PoolInfo, *, gone: list[str], ready: int | None) -> PlanStep:
    what = (f"wait until {', '.join(gone)} left the cluster" if gone
            else f"wait until {ready} node(s) of the pool are Ready")  # fmt: skip
    return step("wait_pool_nodes", "wait_pool_nodes", what, pool=pool.name, gone=gone,
                ready=ready, timeout_s=b.cfg.start_timeout_s)  # fmt: skip


def _grow(b: KubeContext, v: PoolView, size: int) -> PlanDraft:
    pool, m = v.info, meta(v.obj)
    more = size - pool.size
    steps = [
        _scale_step(v, size, pool.size, "scale", f"set MachineDeployment {m['namespace']}/{m['name']} "
                    f"replicas {pool.size} -> {size} (its scale subresource)"),
        _wait_step(b, pool, gone=[], ready=size),
    ]  # fmt: skip
    added = [f"{more} new Machine(s) of MachineDeployment {m['namespace']}/{m['name']}"]
    return capacity.grow_draft(pool, size, added, steps, per_hour=pool.price_per_hour * more,
                               scope=_scope(pool, targets=[]))  # fmt: skip


def _unsaved(b: KubeContext, pods: list[Obj]) -> dict[str, float]:
    """Seconds of unsaved work of each wrapped pod (by lineage)."""
    now = utcnow()
    out: dict[str, float] = {}
    for p in pods:
        lineage = lineage_of(p)
        if not lineage:
            continue
        good = b.newest_good(lineage)
        started = (p.get("status") or {}).get("startTime")
        since = _parse_time(started) if started else None
        out[lineage] = capacity.unsaved_s(since, good.created_at if good else None, now)
    return out


def _parse_time(value: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _victims(b: KubeContext, v: PoolView, count: int) -> tuple[list[str], dict[str, list[str]]]:
    """The ``count`` nodes that lose least, among those with a Machine or NodeClaim, and the
    pods (NAMESPACE/NAME) a drain of each handles."""
    pods = [p for p in _pods(b) if left_alone(p) is None]
    on: dict[str, list[Obj]] = {}
    for p in pods:
        on.setdefault(str((p.get("spec") or {}).get("nodeName") or ""), []).append(p)
    eligible = [
        NodeInfo(id=f"{BACKEND}:{n}", backend=BACKEND, name=n,
                 price_per_hour=v.info.price_per_hour,
                 workloads=[lineage_of(p) or f"{meta(p)['namespace']}/{meta(p)['name']}"
                            for p in on.get(n, [])])
        for n in v.info.nodes if n in v.backing
    ]  # fmt: skip
    if len(eligible) < count:
        raise errors.Conflict(
            f"{v.info.id} cannot lose {count} node(s): only {len(eligible)} of its nodes have "
            f"a {'Machine' if v.cfg.kind == 'cluster-api' else 'NodeClaim'} to remove",
            hint="wait until the pool's nodes have joined (list_pools), then plan it again",
        )
    going = capacity.victims(eligible, count, unsaved=_unsaved(b, pods))
    names = sorted(n.name for n in going)
    handled = {n: [f"{meta(p)['namespace']}/{meta(p)['name']}" for p in on.get(n, [])]
               for n in names}  # fmt: skip
    return names, handled


def _shrink(b: KubeContext, v: PoolView, size: int) -> PlanDraft:
    pool = v.info
    gone, handled = _victims(b, v, pool.size - size)
    if v.cfg.kind == "karpenter":
        allowed, why = rules.allowed_disruptions(v.obj, b.inventory.raw_nodes())
        if allowed < len(gone):
            raise errors.Conflict(
                f"{pool.id}: the NodePool's disruption {why} lets {allowed} node(s) go now, "
                f"not {len(gone)}",
                hint=(f"shrink by {allowed} or fewer, " if allowed else "")
                + "wait until the budget allows more (nodes being disrupted gone, a scheduled "
                "budget over), or change the NodePool's spec.disruption.budgets",
                code="karpenter-disruption-budget",
                details={"allowed": allowed, "budget": why},
            )
    reason = f"clawpoint: pool {pool.name} scaling down"
    steps: list[PlanStep] = [
        node_plans.cordon_step(n, reason, f"cordon {n}: nothing new lands there",
                               name=f"{n}-cordon")
        for n in gone
    ]  # fmt: skip
    warnings: list[str] = []
    for n in gone:
        body = node_plans.drain_body(b, n, to=None, away=gone, save=True, force=False,
                                     check=f"{n}-check_drained")  # fmt: skip
        steps += body.steps
        warnings += body.warnings
        if body.not_handled:
            warnings.append(f"{n}: not handled (outside the namespaces in scope): "
                            f"{', '.join(body.not_handled)}")  # fmt: skip
    steps += _release_steps(v, gone)
    steps.append(_wait_step(b, pool, gone=gone, ready=None))
    undo = [
        patch_step(f"{n}-uncordon", "Node", "", n,
                   {"spec": {"unschedulable": None},
                    "metadata": {"annotations": {REASON_ANNOTATION: None}}},
                   f"return {n} to service")
        for n in gone
    ]  # fmt: skip
    moved = [p for n in gone for p in handled[n]]
    draft = capacity.shrink_draft(
        pool, size, gone, steps, undo=undo, moved=moved, held=[],
        per_hour=-pool.price_per_hour * len(gone),
        scope=_scope(pool, workloads=moved, warnings=warnings or None),
        verb="drain and remove", unit="pod",
    )  # fmt: skip
    if v.cfg.kind == "karpenter":
        draft.rollback = ("Karpenter adds nodes again for pending pods (raise the NodePool's "
                          "spec.limits if they hold it back)")  # fmt: skip
        # Karpenter may remove more by itself; pods with unsaved work carry do-not-disrupt.
        draft.summary += f" (the NodePool consolidates {rules.consolidation_policy(v.obj)})"
    return draft


def _release_steps(v: PoolView, gone: list[str]) -> list[PlanStep]:
    """How the autoscaler removes exactly these nodes (``autoscalers``)."""
    steps: list[PlanStep] = []
    if v.cfg.kind == "karpenter":
        for n in gone:
            claim = v.backing[n]
            steps.append(step(f"{n}-delete_nodeclaim", "delete_object",
                              f"delete NodeClaim {claim} of {n}: Karpenter's finalizer drains "
                              "the node and terminates the instance",
                              group=rules.KARPENTER_GROUP, version=rules.KARPENTER_VERSION,
                              plural="nodeclaims", namespace="", name=claim))  # fmt: skip
        return steps
    m = meta(v.obj)
    replicas = v.info.size
    stamp = utcnow().isoformat()
    for n in gone:
        machine = v.backing[n]
        replicas -= 1
        steps += [
            step(f"{n}-mark_machine", "patch_object",
                 f"annotate Machine {m['namespace']}/{machine} of {n} "
                 f"{rules.DELETE_MACHINE_ANNOTATION}: the MachineSet deletes it first",
                 group=rules.CAPI_GROUP, version=rules.CAPI_VERSION, plural="machines",
                 namespace=m["namespace"], name=machine,
                 patch={"metadata": {"annotations": {rules.DELETE_MACHINE_ANNOTATION: stamp}}}),
            _scale_step(v, replicas, replicas + 1, f"{n}-scale",
                        f"set MachineDeployment {m['namespace']}/{m['name']} replicas to "
                        f"{replicas} (its scale subresource)"),
        ]  # fmt: skip
    return steps


# ----- steps -----------------------------------------------------------------------------
def guarded_scale(b: KubeContext, args: Obj) -> Obj | None:
    """Before a size change: the answer when the group already has the size asked (a repeat
    after a crash), else None with the patch made conditional on the object read (its
    ``resourceVersion``: a change in between is a 409). Conflict when another size than the
    plan saw is found: someone scaled the group meanwhile."""
    a = read(PatchObjectArgs, args)
    if a.expect_replicas is None:
        return None
    md = _get(b, a.group, a.version, a.plural, a.namespace or None, ids.check_name(a.name))
    now, want = rules.replicas_of(md), int(a.patch["spec"]["replicas"])
    if now == want:
        return {"name": a.name, "already_applied": True}
    if now != a.expect_replicas:
        raise errors.Conflict(
            f"MachineDeployment {a.namespace}/{a.name} has {now} replicas now, the plan saw "
            f"{a.expect_replicas}: someone else scaled it meanwhile (cluster-autoscaler?)",
            hint=f"plan the change again ({errors.step('scale_pool')}) from its size now",
            code="pool-size-changed",
        )
    args["patch"] = {**a.patch, "metadata": {"resourceVersion": meta(md)["resourceVersion"]}}
    return None


def _ready(node: Obj) -> bool:
    conds = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def run_wait_pool_nodes(b: KubeContext, args: Obj, progress: ProgressFn) -> Obj:
    """Until each of ``gone`` has left the cluster and ``ready`` nodes of the pool are Ready."""
    a = read(WaitPoolNodesArgs, args)
    if a.pool not in b.cfg.pools:
        raise errors.NotFound(f"no pool {BACKEND}:{a.pool} configured", hint="list_pools")

    def settled() -> Obj | None:
        raw = b.inventory.raw_nodes()
        if {rules.name_of(n) for n in raw} & set(a.gone):
            return None
        v = _read(b, a.pool, b.cfg.pools[a.pool], raw)
        up = [n for n in raw if rules.name_of(n) in v.info.nodes and _ready(n)]
        if a.ready is not None and len(up) < a.ready:
            return None
        return {"pool": a.pool, "nodes": sorted(rules.name_of(n) for n in up)}

    done: Obj = b.wait_until(f"the nodes of pool {a.pool} to settle", float(a.timeout_s), settled)
    progress(1, 1, f"pool {a.pool}: {len(done['nodes'])} node(s) Ready")
    return done


def _contains(current: Any, patch: Any) -> bool:
    if isinstance(patch, dict):
        cur = current if isinstance(current, dict) else {}
        return all(
            k not in cur if val is None else _contains(cur.get(k), val) for k, val in patch.items()
        )
    return bool(current == patch)


def recover_patch_object(b: KubeContext, args: Obj) -> Obj | None:
    """After a crash: done when the object already holds the patch (a scale patch is read
    on the object: ``spec.replicas``), or, for a Machine marked for deletion, when it is
    gone (the MachineSet removed it)."""
    ns = str(args.get("namespace") or "") or None
    try:
        obj = _get(b, str(args["group"]), str(args["version"]), str(args["plural"]), ns,
                   ids.check_name(str(args["name"])))  # fmt: skip
    except errors.NotFound:
        if args["plural"] == "machines":
            return {"name": args["name"], "already_gone": True}
        return None
    return (
        {"name": args["name"], "already_applied": True} if _contains(obj, args["patch"]) else None
    )


def recover_delete_object(b: KubeContext, args: Obj) -> Obj | None:
    ns = str(args.get("namespace") or "") or None
    try:
        obj = _get(b, str(args["group"]), str(args["version"]), str(args["plural"]), ns,
                   ids.check_name(str(args["name"])))  # fmt: skip
    except errors.NotFound:
        return {"deleted": args["name"], "already_gone": True}
    if meta(obj).get("deletionTimestamp"):
        return {"deleted": args["name"], "already_gone": True}
    return None
