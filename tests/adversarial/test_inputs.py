"""Inputs an agent gets wrong, through a real MCP client: each is refused with one message
that names the problem and the valid choices, in the words of MCP, and nothing changes.

- an invented argument, or a boolean written ``"yes"``: refused, never read as true;
- a filter value that matches nothing by mistake (``state="runing"``): refused, listing
  the states; every filter is an enum in the published schema;
- a checkpoint sequence number with leading zeros (``@0001``): refused, never read as ``@1``;
- hints name tools (``list_workloads``), never commands (``clawpoint workloads``);
- a dry run says what would happen for real ("needs a person's approval"), never "the
  policy would approve".
"""

from __future__ import annotations

from typing import Any

import pytest

from core.model import WorkloadState
from tests.adversarial.conftest import TRANSPORTS, Lab, agent_session

pytestmark = pytest.mark.anyio

# What pydantic's own error text looks like; an agent must never be shown it.
PYDANTIC_WORDS = ("validation error", "Input should be", "Extra inputs", "errors.pydantic.dev")


def _one_message(text: str, tool: str, *problems: str) -> None:
    assert text.count(f"{tool}: ") >= 1 and f"{tool} takes: " in text, text
    for problem in problems:
        assert problem in text, text
    assert not any(w in text for w in PYDANTIC_WORDS), text
    assert "clawpoint " not in text, text  # a command line is not what an agent calls


def _plans(lab: Lab) -> list[Any]:
    return [e for e in lab.service.audit.entries(limit=500) if e.kind == "plan"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_invented_arguments_and_lax_booleans_get_one_message(
    lab: Lab, transport: str
) -> None:
    async with agent_session(lab, transport) as agent:
        text = await agent.error("migrate_workload", {"workload": "local:x", "approved": True})
        _one_message(text, "migrate_workload", "unknown argument approved", "workload, to,")
        text = await agent.error("list_workloads", {"bogus": 1})
        _one_message(text, "list_workloads", "unknown argument bogus", "state")
        for value in ("yes", "true", "on", 1):
            text = await agent.error("migrate_workload", {"workload": "local:x", "dry_run": value})
            _one_message(text, "migrate_workload", "dry_run must be true or false")
        text = await agent.error(
            "resume_workload", {"workload": "local:x", "fresh": "yes", "dry_run": True}
        )
        _one_message(text, "resume_workload", "fresh must be true or false (got 'yes')")
        text = await agent.error("list_checkpoints", {"workload": "local:x", "detail": "yes"})
        _one_message(text, "list_checkpoints", "detail must be true or false")
    assert _plans(lab) == []  # nothing was even planned


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_filters_are_enums_and_unknown_values_are_refused(lab: Lab, transport: str) -> None:
    async with agent_session(lab, transport) as agent:
        text = await agent.error("list_workloads", {"state": "runing"})
        _one_message(text, "list_workloads", "state must be one of", "(got 'runing')")
        for state in WorkloadState:
            assert state.value in text
        text = await agent.error("list_nodes", {"backend": "slurmm"})
        _one_message(text, "list_nodes", "backend must be one of local (got 'slurmm')")
        text = await agent.error("list_approvals", {"status": "pendng"})
        _one_message(text, "list_approvals", "status must be one of pending, approved")
        text = await agent.error("list_runs", {"status": "wating"})
        _one_message(text, "list_runs", "status must be one of waiting, running")
        assert (await agent.ok("list_workloads", {"state": "running"}))["workloads"] == []
        assert (await agent.ok("list_approvals", {"status": "all"}))["approvals"] == []
        tools = {t.name: t for t in (await agent.client.list_tools()).tools}
    filters = {"list_nodes": ["backend"], "list_workloads": ["backend", "state"],
               "queue_depth": ["backend"], "list_approvals": ["status"], "list_runs": ["status"]}  # fmt: skip
    for tool_name, names in filters.items():
        for name in names:
            prop = tools[tool_name].input_schema["properties"][name]
            assert prop.get("enum"), (tool_name, name, prop)
    # Every read tool's string argument that is not an id, a cursor or free text is a filter.
    free = {"workload", "approval_id", "run_id", "cursor", "name", "node", "checkpoint"}
    for tool in tools.values():
        ann = tool.annotations
        if not (ann and ann.read_only_hint):
            continue
        for name, prop in (tool.input_schema.get("properties") or {}).items():
            if prop.get("type") == "string" and name not in free:
                assert prop.get("enum"), f"{tool.name}.{name} is a free string: {prop}"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_checkpoint_ids_with_leading_zeros_are_refused(lab: Lab, transport: str) -> None:
    async with agent_session(lab, transport) as agent:
        for ref in ("local:x@0001", "local:x@01", "local:x@00"):
            text = await agent.error("restore_checkpoint", {"checkpoint": ref, "dry_run": True})
            assert f"malformed checkpoint id {ref!r}" in text, text
            assert "without leading zeros" in text and "list_checkpoints" in text, text
        text = await agent.error("restore_checkpoint", {"checkpoint": "local:x@1", "dry_run": True})
        assert "malformed" not in text, text  # a well-formed id that names nothing: not found


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_hints_name_tools_not_commands(lab: Lab, transport: str) -> None:
    async with agent_session(lab, transport) as agent:
        for tool, args in [
            ("get_workload", {"workload": "local:nope"}),
            ("migrate_workload", {"workload": "local:nope"}),
            ("get_approval", {"approval_id": "apr-nope"}),
        ]:
            text = await agent.error(tool, args)
            assert "Next step: " in text, text
            assert "clawpoint " not in text and "'clawpoint" not in text, text
            assert "list_workloads" in text or "list_approvals" in text, text


async def test_a_dry_run_says_a_person_must_approve_not_that_the_policy_approves(
    lab: Lab, need_criu: None
) -> None:
    workload = lab.start("dry")
    async with agent_session(lab, "stdio") as agent:
        out = await agent.ok("migrate_workload", {"workload": workload, "dry_run": True})
        assert out["status"] == "planned", out
        assert "needs a person's approval" in out["message"], out["message"]
        assert "would approve" not in out["message"], out["message"]
        out = await agent.ok("checkpoint_workload", {"workload": workload, "dry_run": True})
        assert "it would run now" in out["message"], out["message"]
    assert lab.service.list_approvals() == [] and lab.executions() == []
