"""Interruption notice clients against fake metadata servers that answer like the real ones."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx2
import pytest

from core import errors
from core.signals.cloud import (
    AwsImdsClient,
    AzureEventsClient,
    GcpMetadataClient,
    NoticePoller,
    poll,
    poll_notices,
)
from core.signals.config import SignalsConfig
from core.signals.model import InterruptionAction, Provider, Severity
from tests.signals.fakes import (
    BlackHole,
    FakeAwsImds,
    FakeAzureEvents,
    FakeGcpMetadata,
    closed_port_url,
)

Cfg = Callable[..., SignalsConfig]


# --- the fakes refuse what the real endpoints refuse -------------------------------------


def test_fake_aws_requires_token_and_ttl_header(aws_imds: FakeAwsImds) -> None:
    with httpx2.Client(base_url=aws_imds.url, trust_env=False) as c:
        assert c.get("/latest/meta-data/spot/instance-action").status_code == 401
        assert c.put("/latest/api/token").status_code == 400
        bad = {"X-aws-ec2-metadata-token-ttl-seconds": "21600", "X-Forwarded-For": "1.2.3.4"}
        assert c.put("/latest/api/token", headers=bad).status_code == 403
        ok = c.put("/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
        assert ok.status_code == 200
        assert ok.headers["X-aws-ec2-metadata-token-ttl-seconds"] == "60"
        got = c.get(
            "/latest/meta-data/spot/instance-action",
            headers={"X-aws-ec2-metadata-token": ok.text},
        )
        assert got.status_code == 404


def test_fake_gcp_refuses_without_flavor_header(gcp_metadata: FakeGcpMetadata) -> None:
    with httpx2.Client(base_url=gcp_metadata.url, trust_env=False) as c:
        assert c.get("/computeMetadata/v1/instance/preempted").status_code == 403
        ok = c.get("/computeMetadata/v1/instance/preempted", headers={"Metadata-Flavor": "Google"})
        assert (ok.status_code, ok.text, ok.headers["Metadata-Flavor"]) == (200, "FALSE", "Google")


def test_fake_azure_refuses_without_metadata_header(azure_events: FakeAzureEvents) -> None:
    with httpx2.Client(base_url=azure_events.url, trust_env=False) as c:
        url = "/metadata/scheduledevents?api-version=2020-07-01"
        assert c.get(url).status_code == 400
        assert c.get("/metadata/scheduledevents", headers={"Metadata": "true"}).status_code == 400
        assert c.get(url, headers={"Metadata": "true"}).json() == {
            "DocumentIncarnation": 1,
            "Events": [],
        }


# --- AWS ---------------------------------------------------------------------------------


def test_aws_unmarked_then_marked(aws_imds: FakeAwsImds, signals_config: Cfg) -> None:
    client = AwsImdsClient(signals_config(aws=aws_imds.url))
    try:
        assert client.notices() == []
        when = aws_imds.mark_instance_action("stop", in_seconds=120)
        [notice] = client.notices()
    finally:
        client.close()
    assert notice.provider is Provider.AWS
    assert notice.action is InterruptionAction.STOP
    assert notice.deadline == when
    assert notice.severity is Severity.CRITICAL
    assert notice.node == aws_imds.instance_id  # no node configured: the instance id
    assert notice.source == "aws-imds"
    # the token was fetched once and reused for every GET
    assert aws_imds.tokens_issued == 1


def test_aws_rebalance_and_clear(aws_imds: FakeAwsImds, signals_config: Cfg) -> None:
    cfg = signals_config(aws=aws_imds.url, node="slurm:gpu-3")
    with NoticePoller(cfg) as poller:
        aws_imds.mark_rebalance()
        [notice] = poller.poll().notices
        assert notice.action is InterruptionAction.REBALANCE
        assert notice.deadline is None
        assert notice.severity is Severity.WARNING
        assert notice.node == "slurm:gpu-3"
        aws_imds.clear_rebalance()
        assert poller.poll().notices == []


def test_aws_token_expiry_is_refreshed(aws_imds: FakeAwsImds, signals_config: Cfg) -> None:
    client = AwsImdsClient(signals_config(aws=aws_imds.url))
    try:
        assert client.instance_action() is None
        aws_imds.expire_tokens()
        aws_imds.mark_instance_action("terminate", in_seconds=90)
        notice = client.instance_action()
    finally:
        client.close()
    assert notice is not None and notice.action is InterruptionAction.TERMINATE
    assert aws_imds.tokens_issued == 2
    statuses = [(m, p) for m, p, _ in aws_imds.requests]
    assert statuses.count(("PUT", "/latest/api/token")) == 2


def test_aws_transient_5xx_is_retried(aws_imds: FakeAwsImds, signals_config: Cfg) -> None:
    aws_imds.mark_instance_action("hibernate")
    client = AwsImdsClient(signals_config(aws=aws_imds.url, attempts=3))
    try:
        aws_imds.fail_next(2, 503)
        notice = client.instance_action()
    finally:
        client.close()
    assert notice is not None and notice.action is InterruptionAction.HIBERNATE


def test_aws_persistent_5xx_is_unavailable(aws_imds: FakeAwsImds, signals_config: Cfg) -> None:
    aws_imds.fail_next(10, 500)
    result = poll(signals_config(aws=aws_imds.url, attempts=2))
    [status] = result.providers
    assert not status.available and "keeps failing" in status.reason


# --- GCP ---------------------------------------------------------------------------------


def test_gcp_flip(gcp_metadata: FakeGcpMetadata, signals_config: Cfg) -> None:
    client = GcpMetadataClient(signals_config(gcp=gcp_metadata.url))
    try:
        assert client.notices() == []
        gcp_metadata.set_preempted(True)
        [first] = client.notices()
        [again] = client.notices()
        gcp_metadata.set_preempted(False)
        assert client.notices() == []
    finally:
        client.close()
    assert first.action is InterruptionAction.PREEMPT and first.provider is Provider.GCP
    assert first.deadline_estimated and first.deadline is not None
    assert first.deadline - first.observed_at == timedelta(seconds=30)
    assert again.deadline == first.deadline  # the grace counts from the first sighting
    assert first.node == gcp_metadata.instance_name
    assert all(h.get("metadata-flavor") == "Google" for _, _, h in gcp_metadata.requests)


def test_gcp_answer_without_flavor_header_is_rejected(
    aws_imds: FakeAwsImds, signals_config: Cfg
) -> None:
    # Something that is not the GCP metadata server (here: the AWS fake) answers 401/404
    # without the flavor header; the client must not read that as "not preempted".
    result = poll(signals_config(gcp=aws_imds.url))
    [status] = result.providers
    assert status.provider is Provider.GCP and not status.available


# --- Azure -------------------------------------------------------------------------------


def test_azure_preempt_and_started(azure_events: FakeAzureEvents, signals_config: Cfg) -> None:
    client = AzureEventsClient(signals_config(azure=azure_events.url))
    try:
        assert client.notices() == []
        event_id = azure_events.add_event("Preempt", in_seconds=30, resources=["vm-7"])
        [notice] = client.notices()
        assert notice.action is InterruptionAction.PREEMPT
        assert notice.event_id == event_id and notice.node == "vm-7"
        assert notice.deadline is not None and not notice.deadline_estimated
        assert notice.deadline.tzinfo is not None
        assert notice.details["DocumentIncarnation"] == "2"
        azure_events.start_event(event_id)
        [started] = client.notices()
        assert started.details["EventStatus"] == "Started"
        assert started.deadline == started.observed_at and started.deadline_estimated
    finally:
        client.close()


def test_azure_filters_by_vm_name(azure_events: FakeAzureEvents, signals_config: Cfg) -> None:
    azure_events.add_event("Reboot", resources=["other-vm"])
    azure_events.add_event("Freeze", resources=["me"])
    cfg = signals_config(azure=azure_events.url)
    cfg = cfg.model_copy(update={"azure": cfg.azure.model_copy(update={"vm_name": "me"})})
    [notice] = poll_notices(cfg)
    assert notice.action is InterruptionAction.FREEZE
    assert notice.severity is Severity.WARNING


def test_azure_not_before_is_rfc1123() -> None:
    ev_time = AzureEventsClient._deadline  # the parser used for NotBefore
    from core.signals.cloud import AzureEvent

    ev = AzureEvent.model_validate(
        {"EventId": "x", "EventType": "Preempt", "NotBefore": "Mon, 19 Sep 2016 18:29:47 GMT"}
    )
    assert ev_time(ev, datetime.now(UTC)) == (datetime(2016, 9, 19, 18, 29, 47, tzinfo=UTC), False)
    bad = ev.model_copy(update={"not_before": "soon"})
    with pytest.raises(errors.OperationFailed):
        ev_time(bad, datetime.now(UTC))


# --- unreachable endpoints and the combined poll -----------------------------------------


@pytest.mark.timeout(20)
def test_refused_endpoint_is_not_available(signals_config: Cfg) -> None:
    url = closed_port_url()
    result = poll(signals_config(aws=url, gcp=url, azure=url))
    assert result.notices == []
    assert [s.available for s in result.providers] == [False, False, False]
    assert all("unreachable" in s.reason for s in result.providers)


@pytest.mark.timeout(20)
def test_hung_endpoint_is_not_available() -> None:
    hole = BlackHole()
    try:
        from tests.signals.conftest import make_signals_config

        cfg = make_signals_config(aws=hole.url, read_timeout_s=0.2, attempts=2)
        result = poll(cfg)
    finally:
        hole.close()
    [status] = result.providers
    assert status.provider is Provider.AWS and not status.available


def test_poll_all_three(
    aws_imds: FakeAwsImds,
    gcp_metadata: FakeGcpMetadata,
    azure_events: FakeAzureEvents,
    signals_config: Cfg,
) -> None:
    aws_imds.mark_instance_action("terminate")
    gcp_metadata.set_preempted(True)
    azure_events.add_event("Terminate")
    result = poll(signals_config(aws=aws_imds.url, gcp=gcp_metadata.url, azure=azure_events.url))
    assert {n.provider for n in result.notices} == {Provider.AWS, Provider.GCP, Provider.AZURE}
    assert all(s.available and s.notices == 1 for s in result.providers)


def test_nothing_enabled_polls_nothing() -> None:
    assert poll(SignalsConfig()).providers == []
