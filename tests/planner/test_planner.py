"""The planner's rules over plain models: GPU failure, SLA, cost, queue backlog, notices."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.model import KILLED, Action, NodeHealth, NodeInfo, WorkloadInfo, WorkloadState
from core.planner.planner import PlannerInput, plan_actions
from core.signals.model import InterruptionAction, InterruptionNotice, Provider
from core.signals.nvml import NvmlMonitor
from core.signals.queue import QueueDepth, coerce, from_workloads
from core.signals.sla import Observation, Progress, RiskLevel, assess
from tests.signals.fake_nvml import FakeGpu, FakeNvml

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def node(name: str, price: float = 1.0, speed: float = 1.0, **kw: object) -> NodeInfo:
    labels = {"clawpoint.io/speed": str(speed)}
    return NodeInfo.model_validate(
        {"id": f"local:{name}", "backend": "local", "name": name, "price_per_hour": price,
         "labels": labels, **kw}
    )  # fmt: skip


def wl(name: str, on: str, *, state: WorkloadState = WorkloadState.RUNNING,
       labels: dict[str, str] | None = None, gpus: int = 0) -> WorkloadInfo:  # fmt: skip
    return WorkloadInfo(
        id=f"local:{name}", backend="local", name=name, state=state, node=on,
        labels=labels or {}, gpus=gpus, started_at=NOW - timedelta(hours=1),
    )  # fmt: skip


def test_xid79_on_a_gpu_yields_a_failover_plan_ranked_first_with_its_reason() -> None:
    fake = FakeNvml([FakeGpu(uuid="GPU-0"), FakeGpu(uuid="GPU-1")])
    with NvmlMonitor(fake, node="local:gpu-a") as monitor:
        fake.inject_xid(1, 79)
        report = monitor.report()
    assert report.gpus[1].verdict.value == "failed"
    nodes = [node("gpu-a", gpus=2), node("gpu-b", gpus=2), node("cpu-c", price=0.1)]
    work = [
        wl("train", "gpu-a", gpus=1),
        wl("dead", "gpu-a", state=WorkloadState.FAILED, gpus=1),
        wl("other", "gpu-b", gpus=1),
    ]
    data = PlannerInput(nodes=nodes, workloads=work, gpus=report.gpus, remaining_s={"other": 60})
    proposals = plan_actions(data, now=NOW)
    assert [p.trigger for p in proposals[:2]] == ["gpu-failure", "gpu-failure"]
    by_target = {p.target: p for p in proposals}
    train, dead = by_target["local:train"], by_target["local:dead"]
    assert train.action is Action.MIGRATE and train.params == {"to": "gpu-b"}
    assert dead.action is Action.FAILOVER and dead.params == {"to": "gpu-b"}
    assert "Xid 79" in train.reason and "local:gpu-a" in train.reason
    # Only a node with enough GPUs qualifies: the cheap CPU node is never the target.
    assert all(p.to_node != "local:cpu-c" for p in proposals[:2])


def test_sla_high_is_flagged_and_the_move_that_restores_slack_is_proposed() -> None:
    deadline = NOW + timedelta(hours=1)
    w = wl("report", "slow", labels={"clawpoint.io/deadline": deadline.isoformat()})
    # 1000 of 10000 steps; 1000 steps in the last 1000 s = 1 step/s -> 9000 s left, 3600 s to go.
    history = [
        Observation(step=0, at=NOW - timedelta(seconds=1000)),
        Observation(step=1000, at=NOW),
    ]
    risk = assess(w, now=NOW, progress=Progress(step=1000, total=10000), history=history, speed=1.0)
    assert risk is not None and risk.level is RiskLevel.HIGH
    assert risk.remaining_s == 9000 and risk.slack_s == 3600 - 9000
    assert risk.needed_speed is not None and 3.0 < risk.needed_speed < 3.2  # 9000*1.25/3600

    nodes = [node("slow", 1.0), node("fast2", 2.0, speed=2.0), node("fast4", 4.0, speed=4.0),
             node("fast8", 9.0, speed=8.0)]  # fmt: skip
    data = PlannerInput(nodes=nodes, workloads=[w], sla=[risk], pause_s={"local:report": 20})
    [p] = plan_actions(data, now=NOW)
    assert p.action is Action.MIGRATE and p.trigger == "sla-risk"
    # The cheapest node fast enough to bring the risk back to low, not the fastest.
    assert p.params == {"to": "fast4"}
    assert p.effect.slack_before_s == -5400
    assert p.effect.slack_after_s == 3600 - (20 + 9000 / 4)
    assert p.effect.cost_per_hour_before == 1.0 and p.effect.cost_per_hour_after == 4.0


def test_sla_low_or_no_faster_node_means_no_move() -> None:
    deadline = NOW + timedelta(hours=10)
    w = wl("ok", "a", labels={"clawpoint.io/deadline": deadline.isoformat()})
    risk = assess(w, now=NOW, progress=Progress(step=5000, total=10000), speed=1.0)
    assert risk is not None and risk.level is RiskLevel.LOW  # 1.39 steps/s from started_at
    assert (
        plan_actions(
            PlannerInput(nodes=[node("a"), node("b", 2.0, speed=2.0)], workloads=[w], sla=[risk]),
            now=NOW,
        )
        == []
    )


def test_cost_rule_small_saving_over_short_time_yields_no_move() -> None:
    nodes = [node("dear", 3.0), node("cheap", 2.9)]
    w = wl("job", "dear")
    # 0.10/h saved over 10 minutes = 0.017, while a 60 s pause costs (3.0+2.9)/60 = 0.098.
    short = PlannerInput(
        nodes=nodes, workloads=[w], remaining_s={"local:job": 600}, pause_s={"local:job": 60}
    )
    assert plan_actions(short, now=NOW) == []
    # A big saving over a long run moves, with numbers.
    nodes = [node("dear", 3.0), node("cheap", 0.9)]
    long = PlannerInput(
        nodes=nodes, workloads=[w], remaining_s={"local:job": 36000}, pause_s={"local:job": 60}
    )
    [p] = plan_actions(long, now=NOW)
    assert p.action is Action.MIGRATE and p.trigger == "cost" and p.params == {"to": "cheap"}
    assert p.effect.net_saving is not None and p.effect.move_cost is not None
    assert p.effect.net_saving > p.effect.move_cost > 0
    assert abs(p.effect.net_saving - (2.1 * 10 - 3.9 * 60 / 3600)) < 0.01


def test_interruption_moves_live_work_by_deadline_or_preempts_without_capacity() -> None:
    notice = InterruptionNotice(
        source="aws-imds", provider=Provider.AWS, action=InterruptionAction.TERMINATE,
        deadline=NOW + timedelta(seconds=120), node="local:spot",
    )  # fmt: skip
    soon = (NOW + timedelta(hours=2)).isoformat()
    later = (NOW + timedelta(hours=20)).isoformat()
    work = [
        wl(
            "late",
            "spot",
            labels={"clawpoint.io/deadline": later, "clawpoint.io/expected-duration": "3h"},
        ),
        wl(
            "early",
            "spot",
            labels={"clawpoint.io/deadline": soon, "clawpoint.io/expected-duration": "2h"},
        ),
    ]
    risks = [r for w in work if (r := assess(w, now=NOW)) is not None]
    nodes = [node("spot", 0.9, spot=True), node("od", 3.0)]
    proposals = plan_actions(
        PlannerInput(nodes=nodes, workloads=work, notices=[notice], sla=risks), now=NOW
    )
    assert [p.target for p in proposals] == ["local:early", "local:late"]
    assert all(p.action is Action.MIGRATE and p.params == {"to": "od"} for p in proposals)
    assert proposals[0].effect.notice_deadline == notice.deadline
    # No other node with room: save and stop instead of losing the work.
    full = [node("spot", 0.9, spot=True), node("od", 3.0, health=NodeHealth.DOWN)]
    proposals = plan_actions(PlannerInput(nodes=full, workloads=work, notices=[notice]), now=NOW)
    assert {p.action for p in proposals} == {Action.PREEMPT}


def test_dead_node_fails_over_dead_workloads() -> None:
    nodes = [node("gone", health=NodeHealth.DOWN), node("b")]
    work = [wl("x", "gone", state=WorkloadState.FAILED)]
    [p] = plan_actions(PlannerInput(nodes=nodes, workloads=work), now=NOW)
    assert (p.action, p.trigger, p.params) == (Action.FAILOVER, "node-down", {"to": "b"})


def test_a_workload_a_person_killed_is_never_failed_over_on_its_own() -> None:
    nodes = [node("gone", health=NodeHealth.DOWN), node("b")]
    killed = wl("x", "gone", state=WorkloadState.FAILED).model_copy(update={"exit_status": KILLED})
    assert not killed.died()
    assert plan_actions(PlannerInput(nodes=nodes, workloads=[killed]), now=NOW) == []


def test_queue_depth_model_and_backlog_preempts_low_priority_work() -> None:
    slurm = coerce(
        {"partition": "gpu", "pending": 3, "pending_by_reason": {"Resources": 3},
         "oldest_pending_age_s": 1800, "pending_gpus": 2, "max_pending_priority": 10,
         "running": 2, "unknown_field": 1},
        backend="slurm",
    )  # fmt: skip
    assert slurm.backend == "slurm" and slurm.backlog and slurm.pending_gpus == 2
    assert slurm.severity.value == "warning"
    local = from_workloads("local", [wl("a", "n"), wl("b", "n", state=WorkloadState.STOPPED)])
    assert [(q.pending, q.running) for q in local] == [(0, 1)]
    assert not QueueDepth(source="t", backend="x", pending=5, oldest_pending_age_s=5).backlog

    def job(name: str, prio: str) -> WorkloadInfo:
        w = wl(name, "g1", labels={"clawpoint.io/priority": prio}, gpus=2)
        return w.model_copy(update={"backend": "slurm", "id": f"slurm:{name}", "partition": "gpu"})

    nodes = [NodeInfo(id="slurm:g1", backend="slurm", name="g1", gpus=8)]
    work = [job("low", "1"), job("high", "50"), job("mid", "5")]
    proposals = plan_actions(PlannerInput(nodes=nodes, workloads=work, queues=[slurm]), now=NOW)
    # Two GPUs wanted: the lowest-priority job alone frees them; the high one is never touched.
    assert [(p.target, p.action, p.trigger) for p in proposals] == [
        ("slurm:low", Action.PREEMPT, "queue-backlog")
    ]
