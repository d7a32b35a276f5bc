"""Runbooks through the MCP server over stdio: tools, prompts, resources, and a run that
survives a restart of the server while it waits for a person's approval."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from core.config import Settings
from core.model import WorkloadState
from core.service.facade import Service
from tests.runbooks.conftest import ROOT, approve
from tests.service.conftest import PERSON, counter, step, wait_step


def _params(settings: Settings) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update({"CLAWPOINT_HOME": str(settings.home), "PYTHONPATH": str(ROOT)})
    return StdioServerParameters(
        command=sys.executable, args=["-m", "tests.runbooks.serve"], env=env, cwd=str(ROOT)
    )


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def _call(client: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, _text(result)
    assert isinstance(result.structured_content, dict)
    return result.structured_content


@pytest.mark.anyio
async def test_tools_prompts_and_resources(settings: Settings, service: Service) -> None:
    async with Client(_params(settings)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for name in ("list_runbooks", "runbook_status"):
            ann = tools[name].annotations
            assert ann is not None and ann.read_only_hint is True
        for name in ("start_runbook", "continue_runbook"):
            ann = tools[name].annotations
            assert ann is not None and ann.read_only_hint is False and ann.destructive_hint
        size = sum(len(json.dumps(tools[n].model_dump(mode="json", exclude_none=True)))
                   for n in ("list_runbooks", "start_runbook", "runbook_status",
                             "continue_runbook"))  # fmt: skip
        assert size < 6500, size  # a small part of the whole budget (tests/mcp/test_tool_docs.py)

        listed = await _call(client, "list_runbooks", {})
        names = {r["name"] for r in listed["runbooks"]}
        assert names == {"spot-interruption", "gpu-node-failure", "node-maintenance-drain",
                         "sla-rescue", "queue-backlog"}  # fmt: skip

        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert set(prompts) >= names
        args = {a.name: a.required for a in prompts["sla-rescue"].arguments or []}
        assert args == {"workload": True, "min_late_minutes": False}
        got = await client.get_prompt("sla-rescue", {"workload": "local:x"})
        text = got.messages[0].content.text  # type: ignore[union-attr]
        assert "start_runbook" in text and '"workload": "local:x"' in text
        assert "never approve it yourself" in text

        rb = await client.read_resource("clawpoint://runbooks/sla-rescue")
        assert "name: sla-rescue" in rb.contents[0].text  # type: ignore[union-attr]
        policy = await client.read_resource("clawpoint://policy")
        assert "defaults" in json.loads(policy.contents[0].text)  # type: ignore[union-attr]

        bad = await client.call_tool("start_runbook", {"name": "nope"})
        assert bad.is_error and "no runbook 'nope'" in _text(bad)
        bad = await client.call_tool("start_runbook", {"name": "sla-rescue", "params": {}})
        assert bad.is_error and "needs parameter 'workload'" in _text(bad)
        audit = await client.read_resource("clawpoint://audit/recent")
        assert isinstance(json.loads(audit.contents[0].text), list)  # type: ignore[union-attr]


@pytest.mark.anyio
@pytest.mark.criu
async def test_spot_interruption_survives_server_restart(
    settings: Settings, service: Service, need_criu: None
) -> None:
    service.run_workload(counter(settings, "spot-w", mb=20), detach=True, principal=PERSON)
    wait_step(settings, "spot-w", 3)

    async with Client(_params(settings)) as client:
        run = await _call(client, "start_runbook",
                          {"name": "spot-interruption", "params": {"workload": "local:spot-w"}})  # fmt: skip
        assert run["status"] == "waiting_approval", run
        assert run["principal"] == "agent:mcp:stdio"
        approval_id = run["waiting"]["approval_id"]
        assert "clawpoint approvals approve" in run["next"]
    # The server process is gone; the run waits in the database. A person approves.
    approve(settings, approval_id)

    async with Client(_params(settings)) as client:
        status = await _call(client, "runbook_status", {"run_id": run["id"]})
        assert status["status"] == "waiting_approval" and status["current"] == "save-gate"
        run = await _call(client, "continue_runbook", {"run_id": run["id"]})
        # Saved and stopped; resuming it is a second gated action.
        assert run["status"] == "waiting_approval", run
        assert run["current"] == "resume-gate"
        saved_at = step(settings, "spot-w")
        assert service.get_workload("local:spot-w").state is WorkloadState.STOPPED
        approve(settings, run["waiting"]["approval_id"])
        run = await _call(client, "continue_runbook", {"run_id": run["id"]})
        assert run["status"] == "succeeded", run
        assert [s["id"] for s in run["steps"]][-1] == "done"
        again = await _call(client, "continue_runbook", {"run_id": run["id"]})
        assert again["status"] == "succeeded" and again["steps"] == run["steps"]

    assert service.get_workload("local:spot-w").state is WorkloadState.RUNNING
    assert wait_step(settings, "spot-w", saved_at) > saved_at
    assert len(service.checkpoints("local:spot-w")) == 1
