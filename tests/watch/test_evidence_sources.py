"""What a watch pass records as evidence, and what a grant makes of it.

A failed GPU that NVML reports for node-b becomes ``gpu-failure`` evidence about
``local:node-b`` (source ``nvml``): a grant scoped ``trigger=gpu-failed`` (the same trigger
under its other name) then covers a plan for a workload on node-b, not one on node-a. A
healthy GPU records nothing. A notice's evidence lives until the deadline plus the grace;
when it has expired, watch withdraws the approval it had requested on it.
"""

from __future__ import annotations

from datetime import timedelta

from core.guardrails.evidence import NOTICE_GRACE_S
from core.model import Action, Principal, PrincipalKind, WorkloadState, utcnow
from core.service.evidence_check import notice_is_gone
from core.service.facade import Service
from core.signals.cloud import ProviderStatus
from core.signals.model import (
    GpuHealth,
    GpuVerdict,
    InterruptionAction,
    InterruptionNotice,
    Provider,
)
from core.signals.nvml import NvmlReport, NvmlStatus
from core.watch.loop import watch_once
from tests.guardrails.conftest import make_plan
from tests.service.conftest import counter, wait_step

PERSON = Principal(id="alice", kind=PrincipalKind.PERSON)


def _gpu(verdict: GpuVerdict) -> GpuHealth:
    return GpuHealth(source="nvml", node="local:node-b", index=0, verdict=verdict,
                     reasons=["Xid 79: fallen off the bus"] if verdict is GpuVerdict.FAILED
                     else [])  # fmt: skip


def test_a_failed_gpu_is_evidence_for_its_node_only(service: Service) -> None:
    grants = service.guard.grants
    grant = grants.grant(Action.MIGRATE, {"trigger": "gpu-failed"}, max_per_hour=5,
                         expires="1h", reason="GPU failures", granted_by=PERSON)  # fmt: skip
    on_b = make_plan(target="local:train-b", scope={"node": "node-b"})
    on_a = make_plan(target="local:train-a", scope={"node": "node-a"})
    healthy = NvmlReport(status=NvmlStatus.OK, node="local:node-b", gpus=[_gpu(GpuVerdict.HEALTHY)])
    watch_once(service, notices=[], nvml=healthy)
    assert grants.evidence.live() == [] and grants.match(on_b) is None

    failed = NvmlReport(status=NvmlStatus.OK, node="local:node-b",
                        gpus=[_gpu(GpuVerdict.FAILED)])  # fmt: skip
    report = watch_once(service, notices=[], nvml=failed)
    [seen] = grants.evidence.live()
    assert (seen.trigger, seen.subject, seen.source) == ("gpu-failure", "local:node-b", "nvml")
    assert report.evidence and report.evidence[0]["evidence_id"] == seen.id
    covered = grants.match(on_b, "anything the caller says")
    assert covered is not None and covered.id == grant.id and covered.evidence == seen
    assert grants.match(on_a) is None


def test_a_notice_is_evidence_until_its_deadline_plus_the_grace(service: Service) -> None:
    deadline = utcnow().replace(microsecond=0) + timedelta(seconds=120)
    notice = InterruptionNotice(source="aws-imds", provider="aws",
                                action=InterruptionAction.TERMINATE, deadline=deadline,
                                node="local:node-a")  # fmt: skip
    watch_once(service, notices=[notice])
    evidence = service.guard.grants.evidence
    [seen] = [e for e in evidence.live() if e.subject == "local:node-a"]
    assert seen.trigger == "spot-interruption"
    assert seen.expires_at == deadline + timedelta(seconds=NOTICE_GRACE_S)
    later = deadline + timedelta(seconds=NOTICE_GRACE_S + 1)
    assert evidence.find("spot-interruption", ["local:node-a"], later) is None
    assert evidence.find("spot-interruption", ["local:node-a"], deadline) == seen


def test_watch_withdraws_its_request_when_the_notice_evidence_expires(service: Service) -> None:
    spec = counter(service.settings, "expiring", mb=1, node="node-a", engine="cooperative")
    service.run_workload(spec, detach=True, principal=PERSON)
    try:
        wait_step(service.settings, "expiring", 2)
        deadline = utcnow().replace(microsecond=0) + timedelta(seconds=120)
        notice = InterruptionNotice(source="aws-imds", provider="aws",
                                    action=InterruptionAction.TERMINATE, deadline=deadline,
                                    node="local:node-a")  # fmt: skip
        asked = watch_once(service, notices=[notice])
        [act] = asked.actions
        assert act.status == "approval_required" and act.approval_id
        # Still observed: the request stands, and is not repeated.
        again = watch_once(service, notices=[notice])
        assert again.withdrawn == [] and again.still_pending == [act.approval_id]
        # The notice is gone from the endpoint and its evidence has expired.
        later = deadline + timedelta(seconds=NOTICE_GRACE_S + 1)
        gone = watch_once(service, notices=[], now=later)
        [withdrawn] = gone.withdrawn
        assert withdrawn.approval_id == act.approval_id
        assert "evidence expired" in withdrawn.reason
        view = service.guard.approvals.get(act.approval_id)
        assert (view.status.value, view.decided_via) == ("denied", "withdrawn")
        [line] = [f.line() for f in gone.findings if f.kind == "withdrawn"]
        assert line.startswith(f"acted: withdrew approval {act.approval_id}")
        assert gone.exit_code == 21
    finally:
        for w in service.workloads("local"):
            if w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING):
                service.act(Action.KILL, w.id, {}, principal=PERSON, confirmed=True)


def test_a_pass_that_reads_the_gpus_healthy_ends_their_failure_evidence(service: Service) -> None:
    failed = NvmlReport(status=NvmlStatus.OK, node="local:node-b",
                        gpus=[_gpu(GpuVerdict.FAILED)])  # fmt: skip
    watch_once(service, notices=[], nvml=failed)
    evidence = service.guard.grants.evidence
    assert [e.trigger for e in evidence.live()] == ["gpu-failure"]
    unread = NvmlReport(status=NvmlStatus.ERROR, node="local:node-b", gpus=[])
    assert watch_once(service, notices=[], nvml=unread).ended == []  # nothing read: it stands
    healthy = NvmlReport(status=NvmlStatus.OK, node="local:node-b",
                         gpus=[_gpu(GpuVerdict.HEALTHY)])  # fmt: skip
    report = watch_once(service, notices=[], nvml=healthy)
    assert [(e["trigger"], e["subject"]) for e in report.ended] == [("gpu-failure", "local:node-b")]
    assert evidence.live() == []


def test_only_an_answering_provider_without_a_notice_ends_a_notice() -> None:
    here = "local:node-a"
    notice = InterruptionNotice(source="aws-imds", provider="aws",
                                action=InterruptionAction.TERMINATE, node=here)  # fmt: skip
    up = [ProviderStatus(provider=Provider.AWS, available=True)]
    down = [ProviderStatus(provider=Provider.AWS, available=False, reason="timeout")]
    assert notice_is_gone(here, [notice], up) is None
    assert notice_is_gone(here, [], down) is None
    assert notice_is_gone(here, [], up) is not None
    assert notice_is_gone("node-a", [notice], up) is None  # the same node, named bare


def test_a_reclaim_notice_is_one_interruption_of_its_node_however_often_it_is_seen(
    service: Service,
) -> None:
    """The checkpoint economics learn the hazard from what the watch saw: node-b (spot) is
    reclaimed once, whatever the number of passes that see the notice; a rebalance
    recommendation on node-a is a risk, not an interruption; both nodes were watched."""
    from core.state.interruptions import InterruptionHistory

    deadline = utcnow().replace(microsecond=0) + timedelta(seconds=120)
    reclaim = InterruptionNotice(source="aws-imds", provider="aws", deadline=deadline,
                                 action=InterruptionAction.TERMINATE, node="local:node-b")  # fmt: skip
    rebalance = InterruptionNotice(source="aws-imds", provider="aws",
                                   action=InterruptionAction.REBALANCE, node="local:node-a")  # fmt: skip
    for _ in range(3):
        watch_once(service, notices=[reclaim, rebalance])
    history = InterruptionHistory(service.db)
    spot, on_demand = history.tally("local", spot=True), history.tally("local", spot=False)
    assert spot.events == 1 and on_demand.events == 0
    assert spot.watched_h > 0 and on_demand.watched_h > 0  # three passes, seconds apart
