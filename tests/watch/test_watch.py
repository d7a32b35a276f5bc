"""The watch loop end to end: a fake AWS IMDSv2 flips to an instance-action for the spot node;
with a standing grant the affected workload is checkpointed and moved (real CRIU) before the
notice time; without one an approval is requested, people are notified, nothing moves."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from core.config import Settings
from core.guardrails.notify import NotifyConfig
from core.model import Action, WorkloadInfo, WorkloadState
from core.service.facade import Service, bootstrap
from core.signals.cloud import NoticePoller
from core.signals.config import SignalsConfig
from core.watch.loop import watch_once
from core.watch.report import EXIT_ACTED, EXIT_APPROVALS, EXIT_NOTHING
from tests.service.conftest import PERSON, counter, step, wait_step
from tests.signals.fakes import FakeAwsImds
from tests.watch.conftest import Receiver


def _service(settings: Settings, imds: FakeAwsImds, make: Callable[..., SignalsConfig],
             hook: Receiver) -> Service:  # fmt: skip
    signals = make(aws=imds.url, node="local:node-b", nvml={"enabled": False})
    tuned = settings.model_copy(
        update={"signals": signals, "notify": NotifyConfig(webhook_url=hook.url, attempts=1)}
    )
    return bootstrap(tuned)


def _start(svc: Service, name: str) -> WorkloadInfo:
    spec = counter(svc.settings, name, mb=32, node="node-b")
    info = svc.run_workload(spec, detach=True, principal=PERSON)
    assert isinstance(info, WorkloadInfo)
    wait_step(svc.settings, name, 5)
    return info


@pytest.mark.usefixtures("need_criu")
def test_notice_with_standing_grant_moves_the_workload_before_the_deadline(
    settings: Settings, aws_imds: FakeAwsImds, signals_config: Callable[..., SignalsConfig],
    webhook: Receiver,
) -> None:  # fmt: skip
    svc = _service(settings, aws_imds, signals_config, webhook)
    try:
        _start(svc, "spotty")
        svc.guard.grants.grant(
            Action.MIGRATE, {"trigger": "spot-interruption"}, max_per_hour=5, expires="1h",
            reason="spot notices cannot wait for a person", granted_by=PERSON,
        )  # fmt: skip
        with NoticePoller(svc.settings.signals) as poller:
            quiet = watch_once(svc, notices=poller)
            assert quiet.exit_code == EXIT_NOTHING and quiet.actions == []
            deadline = aws_imds.mark_instance_action("terminate", in_seconds=120)
            before = step(svc.settings, "spotty")
            report = watch_once(svc, notices=poller)
        [act] = report.actions
        assert (act.trigger, act.action, act.status) == ("spot-interruption", "migrate", "executed")
        assert act.notice_deadline == deadline and act.met_deadline is True
        assert act.finished_at <= deadline
        assert report.exit_code == EXIT_ACTED
        moved = svc.get_workload("local:spotty")
        assert moved.node == "node-a" and moved.state is WorkloadState.RUNNING
        wait_step(svc.settings, "spotty", before)  # resumed where it was, kept counting
        assert webhook.bodies == []  # nobody had to be asked
        # The next poll does not move it again (it is no longer on the interrupted node).
        with NoticePoller(svc.settings.signals) as poller:
            again = watch_once(svc, notices=poller)
        assert again.actions == []
    finally:
        _cleanup(svc)


@pytest.mark.usefixtures("need_criu")
def test_notice_without_grant_requests_approval_notifies_and_moves_nothing(
    settings: Settings, aws_imds: FakeAwsImds, signals_config: Callable[..., SignalsConfig],
    webhook: Receiver,
) -> None:  # fmt: skip
    svc = _service(settings, aws_imds, signals_config, webhook)
    try:
        _start(svc, "waiting")
        aws_imds.mark_instance_action("terminate", in_seconds=120)
        with NoticePoller(svc.settings.signals) as poller:
            report = watch_once(svc, notices=poller)
            [act] = report.actions
            assert act.status == "approval_required" and act.approval_id
            assert report.exit_code == EXIT_APPROVALS
            assert len(webhook.bodies) == 1
            assert "local:waiting" in json.dumps(webhook.bodies[0])
            pending = [a for a in svc.list_approvals() if a.id == act.approval_id]
            assert pending and pending[0].status.value == "pending"
            # Nothing moved, and the next poll does not ask again.
            w = svc.get_workload("local:waiting")
            assert w.node == "node-b" and w.state is WorkloadState.RUNNING
            again = watch_once(svc, notices=poller)
        assert again.actions == [] and again.still_pending and again.exit_code == EXIT_APPROVALS
        assert len(webhook.bodies) == 1
    finally:
        _cleanup(svc)


def _cleanup(svc: Service) -> None:
    for w in svc.workloads("local"):
        if w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING):
            svc.act(Action.KILL, w.id, {}, principal=PERSON, confirmed=True)
