"""Signals an agent can see: cloud notices, GPU and node health and SLA risk over MCP.

A real ``clawpoint serve`` (the installed console script, stdio) is driven by the SDK's
client. The cloud metadata endpoints are the loopback fakes of tests/signals (answering as
the documented AWS, GCP and Azure endpoints do); NVML is the fake pynvml of
tests/signals/fake_nvml.py, loaded into the server by the shim in ``nvml_shim/``. The same
notices must show in ``spot_market``, ``cluster_health`` and ``plan_actions``, and equal what
``clawpoint watch --once`` sees, because both read them through ``insights.observe``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests.adversarial.conftest import Lab
from tests.agent_layer import serving
from tests.signals.fakes import FakeAwsImds, FakeAzureEvents, FakeGcpMetadata

GPUS = serving.HEALTHY_AND_LOST
CLAWPOINT = serving.CLAWPOINT
_config = serving.signals_config
_env = serving.server_env
_client = serving.client
_ok = serving.ok


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def aws() -> Iterator[FakeAwsImds]:
    with FakeAwsImds() as fake:
        yield fake


@pytest.mark.anyio
@pytest.mark.criu
async def test_aws_notice_gpu_and_sla_show_in_the_tools_an_agent_reads(
    aws: FakeAwsImds, lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    lab = lab_factory(_config("aws", aws.url, nvml=True))
    workload = lab.start("sig-w", node="node-a")
    deadline = aws.mark_instance_action("terminate", in_seconds=120)

    async with _client(lab) as client:
        market = await _ok(client, "spot_market")
        [notice] = market["notices"]
        assert notice["node"] == "local:node-a"  # the full id, not the bare name
        assert (notice["provider"], notice["action"], notice["kind"]) == (
            "aws",
            "terminate",
            "spot",
        )
        assert notice["deadline"].startswith(deadline.strftime("%Y-%m-%dT%H:%M:%S"))
        assert 0 < notice["seconds_left"] <= 120
        assert notice["workloads"] == [workload]
        assert market["providers"] == [{"provider": "aws", "available": True, "reason": ""}]
        assert "source" not in notice, "concise by default"
        full = await _ok(client, "spot_market", {"detail": True})
        assert full["notices"][0]["source"] == "aws-imds"
        assert len(json.dumps(full)) > len(json.dumps(market))

        health = await _ok(client, "cluster_health")
        assert health["gpu_status"] == "ok"
        by_index = {g["index"]: g for g in health["gpus"]}
        assert by_index[0]["verdict"] == "healthy"
        assert by_index[1]["verdict"] == "failed" and by_index[1]["node"] == "local:node-a"
        assert [n["node"] for n in health["notices"]] == ["local:node-a"]
        assert {n["node"]: n["health"] for n in health["nodes"]} == {
            "local:node-a": "healthy", "local:node-b": "healthy",
        }  # fmt: skip
        assert "1 not healthy" in health["summary"] and "notices" in health["summary"]

        plan = await _ok(client, "plan_actions")
        assert [n["node"] for n in plan["notices"]] == ["local:node-a"]
        assert {g["verdict"] for g in plan["gpus"]} == {"healthy", "failed"}
        # The lost GPU outranks the notice: move the workload off node-a now.
        [move] = [p for p in plan["proposals"] if p["target"] == workload]
        assert (move["action"], move["trigger"]) == ("migrate", "gpu-failure"), plan

    async with _client(lab, gpus=GPUS[:1]) as client:  # GPUs healthy: the notice decides
        plan = await _ok(client, "plan_actions")
        [move] = [p for p in plan["proposals"] if p["target"] == workload]
        assert move["trigger"] == "spot-interruption", plan
        assert move["notice_deadline"].startswith(notice["deadline"][:19])

    # The watch loop reads the same sources through the same function: same notice.
    proc = subprocess.run(
        [str(CLAWPOINT), "watch", "--once", "--json"], env=_env(lab),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    report = json.loads(proc.stdout.splitlines()[-1])
    [seen] = report["notices"]
    assert (seen["provider"], seen["action"], seen["node"]) == ("aws", "terminate", "local:node-a")
    assert seen["deadline"].startswith(notice["deadline"][:19])
    assert report["gpu_status"] == "ok"


@pytest.mark.anyio
@pytest.mark.parametrize("provider", ["gcp", "azure"])
async def test_gcp_and_azure_notices_show_in_spot_market_and_cluster_health(
    provider: str, lab_factory: Callable[[str], Lab]
) -> None:
    fake: FakeGcpMetadata | FakeAzureEvents
    with FakeGcpMetadata() if provider == "gcp" else FakeAzureEvents() as fake:
        if isinstance(fake, FakeGcpMetadata):
            fake.set_preempted(True)
            expect = ("gcp", "preempt", "spot")
        else:
            fake.add_event("Reboot", in_seconds=300)
            expect = ("azure", "reboot", "maintenance")
        lab = lab_factory(_config(provider, fake.url, nvml=False))
        async with _client(lab) as client:
            market = await _ok(client, "spot_market")
            health = await _ok(client, "cluster_health")
            plan = await _ok(client, "plan_actions")
    for seen in (market["notices"], health["notices"], plan["notices"]):
        assert [(n["provider"], n["action"], n["kind"], n["node"]) for n in seen] == [
            (*expect, "local:node-a")
        ]
    # NVML is off here: no GPU readings (results may leave out null and empty fields).
    assert not health.get("gpu_status") and not health.get("gpus")


@pytest.mark.anyio
async def test_an_unreachable_provider_is_reported_not_raised(
    lab_factory: Callable[[str], Lab],
) -> None:
    # A closed loopback port: what a host that is not on that cloud sees.
    lab = lab_factory(_config("aws", "http://127.0.0.1:9", nvml=False))
    async with _client(lab) as client:
        market = await _ok(client, "spot_market")
    assert market["notices"] == []
    [status] = market["providers"]
    assert status["provider"] == "aws" and status["available"] is False and status["reason"]
