"""The planner: signals + inventory -> ranked proposals, each one call to ``Service.act``.

``plan_actions(PlannerInput, now=..., config=...)`` is a pure function over plain models
(``core.planner.contract``: what it takes and gives; no I/O), fast enough for 10,000
workloads on 2,000 nodes well under a second (``bench/planner.py``). Rules, in score order
(higher = more urgent; one proposal per workload, the highest wins):

==============  =====  ==============================================================
trigger         base   rule
==============  =====  ==============================================================
gpu-failure     1000   a FAILED GPU verdict (Xid 79, fallen off the bus, ...) on a node:
                       migrate its live workloads, fail over its dead ones
spot-interr.     900   an interruption notice that loses the node: checkpoint + migrate
                       each live workload on it (preempt-and-save when no node has room);
                       ranked by the workload's SLA deadline, earliest first
node-down        800   a DOWN node: fail over its dead (FAILED) workloads
sla-risk         500   SLA level high: migrate to a node fast enough to bring the level
                       back to low (or the fastest that still adds slack)
memory-pressure  450   a workload using >= 90 % of its memory limit: resize it to 1.5x its
                       use, in place when its node has room (safe), else on the cheapest
                       node that fits (``resize_advice``); up to 49 more with the share used
capacity-grow    400   a pool with released nodes whose queue has work waiting >= 60 s,
                       or a pending workload due within 6 h: scale_pool up, one node per
                       pending job (``capacity_advice``); up to 49 more, one per minute
                       the oldest job has waited or for an earlier deadline
spot-interr.     200   a rebalance recommendation / drain notice: checkpoint, leave running
queue-backlog    300   a backlogged queue: preempt-and-save lower-priority running work
cost             100   a cheaper node: migrate only if the saving over the remaining run
                       time exceeds the cost of moving
capacity-shrink   75   with ``release_idle`` on: a pool with idle nodes, no work waiting and
                       above its min_size, not scaled in the last 10 minutes, none of its
                       idle nodes a destination this pass: scale_pool down, releasing idle
                       nodes only (safe); up to 24 more, one per unit per hour it saves
checkpoint-int.   50   a running workload whose periodic checkpoint interval is far from
                       the one that pays: set_checkpoint_interval when it saves >= 20 %
                       and >= 5 s per hour of lost work plus pause (``interval_advice``)
==============  =====  ==============================================================

Within a rule, up to 99 points more: for an earlier deadline (``99 / (1 + hours left)``),
a larger SLA deficit, or a larger net saving. No rule moves work unless it removes a risk
(notice, failure, dead node, missed deadline) or its saving exceeds the cost of moving:
changeover = expected pause + lost work, valued at both nodes' prices per hour. The
interval rule moves nothing: it re-times the workload's own checkpoints (shorter, or on
where they were off: safe; longer: disruptive, as the backend's plan says). The capacity
rule moves nothing either; a growth it proposes counts against the backlog rule (nodes
coming back for the pending jobs leave fewer to free by preempting), and one that adds
more per hour than ``PlannerInput.pool_cost_cap`` is proposed as disruptive.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from core.actions import risk_of
from core.backends.sizing import size_of, total
from core.durations import interval_text
from core.model import (
    Action,
    NodeHealth,
    NodeInfo,
    PoolInfo,
    RiskClass,
    WorkloadInfo,
    WorkloadState,
)
from core.planner.capacity_advice import pool_change, queue_for
from core.planner.contract import Effect, PlannerConfig, PlannerInput, Proposal
from core.planner.interval_advice import interval_change
from core.planner.placement import NodeSlot, Placement
from core.planner.resize_advice import memory_change
from core.signals.model import (
    GpuHealth,
    GpuVerdict,
    InterruptionAction,
    InterruptionNotice,
)
from core.signals.sla import RiskLevel, level_of, workload_deadline

# The models live in core.planner.contract; callers keep importing them from here.
__all__ = ["BASE", "Effect", "PlannerConfig", "PlannerInput", "Proposal", "plan_actions"]

PRIORITY_LABEL = "clawpoint.io/priority"
PREEMPTIBLE_LABEL = "clawpoint.io/preemptible"
LIVE = (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING)
BASE = {
    "gpu-failure": 1000.0,
    "spot-interruption": 900.0,
    "node-down": 800.0,
    "sla-risk": 500.0,
    "memory-pressure": 450.0,
    "capacity-grow": 400.0,
    "queue-backlog": 300.0,
    "spot-rebalance": 200.0,
    "cost": 100.0,
    "capacity-shrink": 75.0,
    "checkpoint-interval": 50.0,
}


def _node_ids(nodes: list[NodeInfo]) -> dict[str, str]:
    """Every name a node may be called by (id, bare name) -> its id."""
    out: dict[str, str] = {}
    for n in nodes:
        out.setdefault(n.name, n.id)
        out[n.id] = n.id
    return out


def _urgency(deadline: datetime | None, now: datetime) -> float:
    if deadline is None:
        return 0.0
    hours = max((deadline - now).total_seconds() / 3600, 0.0)
    return 99.0 / (1.0 + hours)


class _Planner:
    def __init__(self, data: PlannerInput, now: datetime, config: PlannerConfig) -> None:
        self.d, self.now, self.cfg = data, now, config
        self.ids = _node_ids(data.nodes)
        self.sla = {s.workload: s for s in data.sla}
        self.on_node: dict[str, list[WorkloadInfo]] = defaultdict(list)
        for w in data.workloads:
            if w.node:
                self.on_node[self.ids.get(f"{w.backend}:{w.node}", f"{w.backend}:{w.node}")].append(
                    w
                )
        self.losing: dict[str, InterruptionNotice] = {}
        self.risky: dict[str, InterruptionNotice] = {}
        for n in data.notices:
            nid = self.ids.get(n.node or n.subject or "")
            if nid is None:
                continue
            (self.losing if n.action.loses_node else self.risky)[nid] = n
        self.gpu_failed: dict[str, GpuHealth] = {}
        for g in data.gpus:
            nid = self.ids.get(g.node or g.subject or "")
            if nid is not None and g.verdict is GpuVerdict.FAILED:
                self.gpu_failed.setdefault(nid, g)
        self.down = {n.id for n in data.nodes if n.health is NodeHealth.DOWN}
        self.down |= {
            self.ids.get(h.node, h.node) for h in data.node_health if h.health is NodeHealth.DOWN
        }
        self.place = Placement(
            data.nodes,
            excluded=set(self.losing) | set(self.gpu_failed) | self.down,
            risky={k for k, v in self.risky.items() if v.action is InterruptionAction.REBALANCE},
            prices=data.prices,
        )
        self.out: dict[str, Proposal] = {}
        # (backend, partition) -> nodes a proposed pool growth brings back for its queue.
        self.adding: dict[tuple[str, str | None], int] = defaultdict(int)

    # -- helpers
    def _pause(self, w: WorkloadInfo) -> float:
        return self.d.pause_s.get(w.id, self.cfg.default_pause_s)

    def _at_risk(self, w: WorkloadInfo) -> tuple[float | None, int | None]:
        since = self.d.last_checkpoint_at.get(w.id) or w.started_at
        if since is None:
            return None, None
        secs = max((self.now - since).total_seconds(), 0.0)
        rate = self.d.rate.get(w.id)
        return secs, (int(secs * rate) if rate else None)

    def _price(self, slot: NodeSlot | None) -> float | None:
        return slot.price if slot else None

    def _add(self, p: Proposal) -> None:
        have = self.out.get(p.target)
        if have is None or p.score > have.score:
            self.out[p.target] = p

    def _propose(
        self, w: WorkloadInfo, action: Action, trigger: str, reason: str, score: float,
        effect: Effect, dest: NodeSlot | None,
    ) -> None:  # fmt: skip
        params: dict[str, Any] = {"to": dest.name} if dest and action is not Action.PREEMPT else {}
        if dest is not None:
            self.place.reserve(dest, self.ids.get(f"{w.backend}:{w.node}"))
        self._add(
            Proposal(
                action=action, target=w.id, params=params, trigger=trigger, reason=reason,
                effect=effect, risk=risk_of(action, params), score=round(score, 3),
                node=f"{w.backend}:{w.node}" if w.node else None, to_node=dest.id if dest else None,
            )
        )  # fmt: skip

    def _evacuate(self, w: WorkloadInfo, trigger: str, why: str, deadline: datetime | None) -> None:
        """Move a workload off a node that is going away (or already gone)."""
        src = self.ids.get(f"{w.backend}:{w.node}")
        dest = self.place.best(backend=w.backend, gpus=w.gpus, exclude=src)
        secs, steps = self._at_risk(w)
        sla = self.sla.get(w.id)
        dead = w.died()
        effect = Effect(
            work_at_risk_s=secs, work_at_risk_steps=steps, pause_s=self._pause(w),
            cost_per_hour_before=self._price(self.place.node(src)), cost_per_hour_after=self._price(dest),
            slack_before_s=sla.slack_s if sla else None, notice_deadline=deadline,
        )  # fmt: skip
        score = BASE[trigger] + _urgency(sla.deadline if sla else None, self.now)
        if dead:
            if dest is None:
                return  # nowhere to restore it; nothing useful to propose
            self._propose(w, Action.FAILOVER, trigger, f"{why}; restore {w.id} from its newest checkpoint on {dest.id}.", score, effect, dest)  # fmt: skip
        elif dest is None:
            effect.cost_per_hour_after = 0.0
            self._propose(w, Action.PREEMPT, trigger, f"{why} and no other node has room; save {w.id} and stop it.", score, effect, None)  # fmt: skip
        else:
            self._propose(w, Action.MIGRATE, trigger, f"{why}; checkpoint {w.id} and move it to {dest.id}.", score, effect, dest)  # fmt: skip

    # -- rules
    def gpu_failures(self) -> None:
        for nid, gpu in self.gpu_failed.items():
            why = f"GPU {gpu.index} on {nid} failed ({'; '.join(gpu.reasons) or 'NVML verdict failed'})"
            for w in self.on_node.get(nid, []):
                if w.state in LIVE or w.died():
                    self._evacuate(w, "gpu-failure", why, None)

    def interruptions(self) -> None:
        for nid, notice in self.losing.items():
            left = notice.seconds_left(self.now)
            when = f" in {left:.0f} s" if left is not None else ""
            why = f"{notice.provider.value} will {notice.action.value} {nid}{when}"
            live = [w for w in self.on_node.get(nid, []) if w.state in LIVE]
            far = datetime.max.replace(tzinfo=self.now.tzinfo)
            live.sort(key=lambda w: self.sla[w.id].deadline if w.id in self.sla else far)
            for w in live:
                self._evacuate(w, "spot-interruption", why, notice.deadline)
        for nid, notice in self.risky.items():
            for w in self.on_node.get(nid, []):
                if w.state is WorkloadState.RUNNING:
                    secs, steps = self._at_risk(w)
                    effect = Effect(
                        work_at_risk_s=secs, work_at_risk_steps=steps, pause_s=self._pause(w) / 2
                    )
                    reason = f"{notice.provider.value} reports {notice.action.value} for {nid}; save {w.id} now, leave it running."
                    self._propose(w, Action.CHECKPOINT, "spot-interruption", reason, BASE["spot-rebalance"], effect, None)  # fmt: skip

    def dead_nodes(self) -> None:
        for nid in self.down:
            for w in self.on_node.get(nid, []):
                if w.died():
                    self._evacuate(
                        w, "node-down", f"node {nid} is down and {w.id} died with it", None
                    )

    def sla_risks(self) -> None:
        for w in self.d.workloads:
            sla = self.sla.get(w.id)
            if sla is None or sla.level is not RiskLevel.HIGH or w.state not in LIVE:
                continue
            if sla.remaining_s is None or sla.slack_s is None or w.id in self.out:
                continue
            src = self.place.node(self.ids.get(f"{w.backend}:{w.node}"))
            speed = src.speed if src else sla.node_speed
            need = sla.needed_speed or float("inf")
            dest = self.place.fastest_enough(
                backend=w.backend, gpus=w.gpus, exclude=src.id if src else None, min_speed=need
            )
            if dest is None or dest.speed <= speed:
                continue
            pause = self._pause(w)
            after_remaining = pause + sla.remaining_s * speed / dest.speed
            slack_after = sla.time_left_s - after_remaining
            # Worth it only if the slack gained is larger than what the pause costs.
            if slack_after <= sla.slack_s:
                continue
            level_after = level_of(slack_after, after_remaining)
            effect = Effect(
                pause_s=pause, slack_before_s=sla.slack_s, slack_after_s=slack_after,
                cost_per_hour_before=self._price(src), cost_per_hour_after=dest.price,
            )  # fmt: skip
            reason = (
                (
                    f"{w.id} is {-sla.slack_s:.0f} s behind its deadline at speed {speed:g}"
                    if sla.slack_s < 0
                    else f"{w.id} has only {sla.slack_s:.0f} s of slack"
                )
                + f"; {dest.id} (speed {dest.speed:g}) gives {slack_after:.0f} s ({level_after.value} risk)."
            )
            deficit = min(99.0, max(0.0, -sla.slack_s) / max(sla.remaining_s, 1.0) * 99)
            self._propose(
                w, Action.MIGRATE, "sla-risk", reason, BASE["sla-risk"] + deficit, effect, dest
            )

    def backlog(self) -> None:
        for q in self.d.queues:
            if not q.backlog:
                continue
            want_gpus, want_jobs = q.pending_gpus, q.pending
            # A job per node coming back (without GPU requests): fewer to free by preempting.
            if not q.pending_gpus:
                want_jobs -= self.adding.get((q.backend, q.partition), 0)
            victims = []
            for w in self.d.workloads:
                if (
                    w.backend != q.backend
                    or w.state is not WorkloadState.RUNNING
                    or w.id in self.out
                ):
                    continue
                if q.partition is not None and w.partition != q.partition:
                    continue
                prio = _priority(w)
                lower = q.max_pending_priority is not None and prio < q.max_pending_priority
                if lower or w.labels.get(PREEMPTIBLE_LABEL) == "true":
                    victims.append((prio, w))
            victims.sort(key=lambda pw: pw[0])
            for prio, w in victims:
                # Free the GPUs the queue asks for; without GPU requests, one job per pending.
                if (want_gpus <= 0) if q.pending_gpus else (want_jobs <= 0):
                    break
                want_jobs -= 1
                want_gpus -= w.gpus
                where = f"partition {q.partition}" if q.partition else q.backend
                reason = (
                    f"{q.pending} jobs have waited up to {q.oldest_pending_age_s or 0:.0f} s in {where}; "
                    f"save low-priority {w.id} (priority {prio}) and stop it to free its capacity."
                )
                effect = Effect(
                    work_at_risk_s=0.0,
                    pause_s=None,
                    cost_per_hour_before=self._price(
                        self.place.node(self.ids.get(f"{w.backend}:{w.node}"))
                    ),
                )
                self._propose(
                    w,
                    Action.PREEMPT,
                    "queue-backlog",
                    reason,
                    BASE["queue-backlog"] - prio,
                    effect,
                    None,
                )

    def cost(self) -> None:
        found: list[tuple[float, WorkloadInfo, NodeSlot, Effect]] = []
        for w in self.d.workloads:
            remaining = self.d.remaining_s.get(w.id)
            if remaining is None or w.state is not WorkloadState.RUNNING or w.id in self.out:
                continue
            src = self.place.node(self.ids.get(f"{w.backend}:{w.node}"))
            if src is None:
                continue
            dest = self.place.cheapest(
                backend=w.backend, gpus=w.gpus, exclude=src.id, below=src.price
            )
            if dest is None:
                continue
            pause = self._pause(w)
            new_remaining = remaining * src.speed / dest.speed
            before = src.price * remaining / 3600
            after = dest.price * new_remaining / 3600
            move_cost = (
                pause / 3600 * (src.price + dest.price) + dest.spot_risk * dest.price * pause / 3600
            )
            net = before - after - move_cost
            if net <= move_cost * self.cfg.move_margin:
                continue
            sla = self.sla.get(w.id)
            slack_after = None
            if sla is not None and sla.slack_s is not None:
                slack_after = sla.time_left_s - pause - new_remaining
                if level_of(slack_after, pause + new_remaining) is RiskLevel.HIGH:
                    continue  # cheaper but would miss the deadline
            effect = Effect(
                pause_s=pause, cost_per_hour_before=src.price, cost_per_hour_after=dest.price,
                net_saving=round(net, 4), move_cost=round(move_cost, 4),
                slack_before_s=sla.slack_s if sla else None, slack_after_s=slack_after,
            )  # fmt: skip
            found.append((net, w, dest, effect))
        found.sort(key=lambda f: -f[0])
        for net, w, dest, effect in found[: self.cfg.max_cost_moves]:
            if not dest.has_room():
                continue
            reason = (
                f"{dest.id} costs {dest.price:.2f}/h instead of {effect.cost_per_hour_before:.2f}/h; "
                f"over the remaining run that saves {net:.2f} net of {effect.move_cost:.2f} for moving."
            )
            self._propose(
                w, Action.MIGRATE, "cost", reason, BASE["cost"] + min(99.0, net), effect, dest
            )

    def capacity(self, *, grow: bool) -> None:
        """Growths (before the backlog rule, which they relieve), or shrinks (last: an idle
        node another proposal moves work to is not released)."""
        dests = [p.to_node.partition(":") for p in self.out.values() if p.to_node]
        for pool in self.d.pools:
            change = pool_change(
                pool, queue_for(pool, self.d.queues), now=self.now,
                scaled_at=self.d.pools_scaled_at.get(pool.id),
                min_wait_s=self.cfg.pool_min_wait_s, settle_s=self.cfg.pool_settle_s,
                shrink=not grow and self.d.release_idle,
                keep={name for backend, _, name in dests if backend == pool.backend},
                due=self._due(pool), deadline_horizon_s=self.cfg.pool_deadline_horizon_s,
            )  # fmt: skip
            if change is None or change.grow is not grow:
                continue
            params = {"size": change.size}
            risk = risk_of(Action.SCALE_POOL, params)
            cap = self.d.pool_cost_cap
            if change.grow:
                self.adding[(pool.backend, pool.partition)] += change.nodes
                trigger = "capacity-grow"
                waited = (change.oldest_wait_s or 0.0) / 60
                score = BASE[trigger] + min(49.0, max(waited, _urgency(change.due, self.now)))
                if cap is not None and change.delta_per_hour > cap:
                    risk = RiskClass.DISRUPTIVE  # as the service will judge it
            else:
                trigger = "capacity-shrink"
                score = BASE[trigger] + min(24.0, -change.delta_per_hour)
            effect = Effect(cost_per_hour_before=change.per_hour_before,
                            cost_per_hour_after=change.per_hour_after,
                            queue_wait_s=change.oldest_wait_s)  # fmt: skip
            self._add(
                Proposal(
                    action=Action.SCALE_POOL, target=pool.id, params=params, trigger=trigger,
                    reason=change.reason, effect=effect, risk=risk, score=round(score, 3),
                )
            )  # fmt: skip

    def _due(self, pool: PoolInfo) -> datetime | None:
        """The earliest deadline of the workloads pending in ``pool``'s queue."""
        found = [
            d
            for w in self.d.workloads
            if w.state is WorkloadState.PENDING and w.backend == pool.backend
            and (pool.partition is None or w.partition == pool.partition)
            and (d := workload_deadline(w)) is not None
        ]  # fmt: skip
        return min(found, default=None)

    def memory_pressure(self) -> None:
        can = set(self.d.resize_backends)
        for w in self.d.workloads:
            if w.backend not in can or w.state is not WorkloadState.RUNNING or w.id in self.out:
                continue
            nodes = [n for n in self.d.nodes if n.backend == w.backend]
            used = {
                n.name: total(
                    size_of(o)
                    for o in self.on_node.get(n.id, [])
                    if o.id != w.id and o.state in LIVE
                )
                for n in nodes
            }
            change = memory_change(
                w, nodes, used, pressure=self.cfg.memory_pressure, growth=self.cfg.memory_growth
            )
            if change is None:
                continue
            since = self.d.last_checkpoint_at.get(w.id) or w.started_at
            at_risk = max((self.now - since).total_seconds(), 0.0) if since else None
            params: dict[str, Any] = {"memory": change.memory}
            if not change.in_place:
                params["to"] = change.to_node
            effect = Effect(
                work_at_risk_s=at_risk,
                pause_s=None if change.in_place else self.d.pause_s.get(w.id, self.cfg.default_pause_s),
                cost_per_hour_before=change.price_before, cost_per_hour_after=change.price_after,
            )  # fmt: skip
            share = change.used_mb / change.limit_mb
            self._add(
                Proposal(
                    action=Action.RESIZE, target=w.id, params=params, trigger="memory-pressure",
                    reason=change.reason, effect=effect,
                    risk=RiskClass.SAFE if change.in_place else RiskClass.DISRUPTIVE,
                    score=round(BASE["memory-pressure"] + min(49.0, 100 * max(0.0, share - 0.5)), 3),
                    node=f"{w.backend}:{w.node}",
                    to_node=None if change.in_place else f"{w.backend}:{change.to_node}",
                )
            )  # fmt: skip

    def intervals(self) -> None:
        for w in self.d.workloads:
            case = self.d.intervals.get(w.id)
            if case is None or w.state is not WorkloadState.RUNNING or w.id in self.out:
                continue
            since = self.d.last_checkpoint_at.get(w.id) or w.started_at
            at_risk = max((self.now - since).total_seconds(), 0.0) if since else 0.0
            change = interval_change(
                case, w.checkpoint_every, at_risk_s=at_risk,
                min_fraction=self.cfg.interval_min_fraction, min_s_per_h=self.cfg.interval_min_s_per_h,
            )  # fmt: skip
            if change is None:
                continue
            was = (
                "off"
                if w.checkpoint_every is None
                else f"every {interval_text(w.checkpoint_every)}"
            )
            reason = (
                f"Checkpoint {w.id} every {change.every} ({was} now): expected lost work + "
                f"pause {change.now_s_per_h:.1f} -> {change.after_s_per_h:.1f} s per hour."
            )
            params = {"every": change.every}
            effect = Effect(checkpoint_s_per_h_before=change.now_s_per_h,
                            checkpoint_s_per_h_after=change.after_s_per_h)  # fmt: skip
            self._add(
                Proposal(
                    action=Action.SET_CHECKPOINT_INTERVAL, target=w.id, params=params,
                    trigger="checkpoint-interval", reason=reason, effect=effect,
                    # The catalogue reads the parameters only; longer than the interval in
                    # force is disruptive too (the backend's plan says so when it is made).
                    risk=risk_of(Action.SET_CHECKPOINT_INTERVAL, params)
                    if change.shorter else RiskClass.DISRUPTIVE,
                    score=round(BASE["checkpoint-interval"] + min(49.0, change.saving_s_per_h / 10), 3),
                    node=f"{w.backend}:{w.node}" if w.node else None,
                )
            )  # fmt: skip


def _priority(w: WorkloadInfo) -> int:
    try:
        return int(w.labels.get(PRIORITY_LABEL, "0"))
    except ValueError:
        return 0


def plan_actions(
    data: PlannerInput, *, now: datetime, config: PlannerConfig | None = None
) -> list[Proposal]:
    """Ranked proposals, most urgent first (pure; see the module docstring for the rules)."""
    p = _Planner(data, now, config or PlannerConfig())
    p.gpu_failures()
    p.interruptions()
    p.dead_nodes()
    p.sla_risks()
    p.memory_pressure()
    p.capacity(grow=True)
    p.backlog()
    p.cost()
    p.intervals()
    p.capacity(grow=False)
    return sorted(p.out.values(), key=lambda x: (-x.score, x.target))
