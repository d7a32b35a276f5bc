"""What an agent pays for, measured with a real tokenizer (cl100k_base, ``bench.tokens``):
the tool list it reads every turn, a checkpoint record in a list, and the shape of what the
server publishes and returns (lean schemas, compact JSON, paged lists, toolsets).

These are size budgets, not timings. The figures themselves are printed by
``bench/agent_cost.py`` and kept in docs/benchmarks.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from bench import tokens
from core.config import Settings
from core.model import Action
from core.service.facade import Service
from mcp_server.server import CAPACITY_TOOLS, TOOLSETS, build_server
from tests.service.conftest import PERSON, counter, wait_step

ROOT = Path(__file__).resolve().parents[2]
CLAWPOINT = Path(sys.executable).parent / "clawpoint"

# The budget held when the 34th tool (set_checkpoint_interval, 146 tokens) came: words that
# repeated in every action's schema were cut ("Plan only", "e.g. local:train-1").
FULL_LIST_BUDGET = 4000
WATCHER_LIST_BUDGET = 1800
CHECKPOINT_RECORD_BUDGET = 150
# list_pools, scale_pool (226 tokens) and resize_workload (about 220), served only when named
CAPACITY_BUDGET = 460


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _tools(service: Service, **kw: Any) -> list[Any]:
    async with Client(build_server(service, **kw)) as client:
        return list((await client.list_tools()).tools)


def _walk(node: Any) -> list[dict[str, Any]]:
    """Every schema object under ``node`` (not the names in ``properties``)."""
    if not isinstance(node, dict):
        return []
    found = [node]
    for key, value in node.items():
        if key == "properties" and isinstance(value, dict):
            for sub in value.values():
                found += _walk(sub)
        elif isinstance(value, dict):
            found += _walk(value)
        elif isinstance(value, list):
            for item in value:
                found += _walk(item)
    return found


@pytest.mark.anyio
async def test_the_full_tool_list_fits_its_token_budget(service: Service) -> None:
    tools = await _tools(service)
    cost = tokens.count(tokens.tool_list(tools))
    assert len(tools) >= 25
    assert cost <= FULL_LIST_BUDGET, f"tools/list costs {cost} tokens (budget {FULL_LIST_BUDGET})"


@pytest.mark.anyio
async def test_the_read_only_watcher_list_fits_its_token_budget(service: Service) -> None:
    tools = await _tools(service, read_only=True)
    cost = tokens.count(tokens.tool_list(tools))
    assert {"list_workloads", "cluster_health", "list_approvals", "runbook_status"} <= {
        t.name for t in tools
    }
    assert all(t.annotations and t.annotations.read_only_hint for t in tools)
    assert cost <= WATCHER_LIST_BUDGET, f"read-only list costs {cost} tokens"


@pytest.mark.anyio
async def test_schemas_are_lean(service: Service) -> None:
    for tool in await _tools(service):
        assert tool.output_schema is None, tool.name
        assert tool.title is None, tool.name
        assert tool.description and "\n" not in tool.description, tool.name
        assert "  " not in tool.description, tool.name
        for node in _walk(tool.input_schema):
            assert "title" not in node, (tool.name, node)
            assert {"type": "null"} not in node.get("anyOf", []), (tool.name, node)
            assert node.get("additionalProperties") is not True, (tool.name, node)
            assert "\n" not in node.get("description", ""), (tool.name, node)
        assert tool.input_schema.get("additionalProperties") is False, tool.name
        a = tool.annotations
        assert a is not None and a.open_world_hint is False, tool.name
        assert a.destructive_hint is not None, tool.name  # hosts warn on it: always explicit
        if a.read_only_hint:
            assert a.destructive_hint is False and a.idempotent_hint is None, tool.name
        else:  # false is the protocol's default for both
            assert a.read_only_hint is None and a.idempotent_hint in (None, True), tool.name


@pytest.mark.anyio
@pytest.mark.parametrize("toolset", TOOLSETS)
async def test_each_toolset_serves_only_its_tools(service: Service, toolset: str) -> None:
    everything = {t.name for t in await _tools(service, toolsets=TOOLSETS)}
    mine = {t.name for t in await _tools(service, toolsets=[toolset])}
    assert mine and mine < everything
    others = set()
    for other in TOOLSETS:
        if other != toolset:
            others |= {t.name for t in await _tools(service, toolsets=[other])}
    assert not mine & others  # every tool belongs to exactly one toolset
    assert mine | others == everything


@pytest.mark.anyio
async def test_capacity_is_served_only_when_named(service: Service) -> None:
    """Pools and their scaling cost every turn of every agent: off unless asked for."""
    default = {t.name for t in await _tools(service)}
    named = {t.name for t in await _tools(service, toolsets=["default", "capacity"])}
    assert not default & CAPACITY_TOOLS
    assert named == default | CAPACITY_TOOLS
    with_it = tokens.count(tokens.tool_list(await _tools(service, toolsets=TOOLSETS)))
    assert with_it <= FULL_LIST_BUDGET + CAPACITY_BUDGET, f"with capacity: {with_it} tokens"


def _serve(settings: Settings, *args: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env["CLAWPOINT_HOME"] = str(settings.home)
    return StdioServerParameters(command=str(CLAWPOINT), args=["serve", *args], env=env)


@pytest.mark.anyio
async def test_serve_toolsets_and_read_only_over_stdio(settings: Settings) -> None:
    params = _serve(settings, "--toolsets", "inventory,approvals", "--read-only")
    async with Client(params) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {
            "cluster_status", "list_nodes", "list_workloads", "get_workload",
            "list_checkpoints", "list_approvals", "get_approval",
        }  # fmt: skip
        refused = await client.call_tool("execute_approved", {"approval_id": "apr-0123456789"})
        assert refused.is_error
        prompts = (await client.list_prompts()).prompts
        assert not prompts  # runbook prompts name start_runbook, which is not served
    bad = subprocess.run(
        [str(CLAWPOINT), "serve", "--toolsets", "inventory,nope"],
        env={**os.environ, "CLAWPOINT_HOME": str(settings.home)},
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert bad.returncode != 0
    assert "nope" in bad.stderr + bad.stdout and "signals" in bad.stderr + bad.stdout


@pytest.mark.anyio
@pytest.mark.criu
async def test_a_checkpoint_record_fits_its_budget_and_lists_page(
    settings: Settings, service: Service, need_criu: None
) -> None:
    service.run_workload(counter(settings, "tok-w", mb=8), detach=True, principal=PERSON)
    wait_step(settings, "tok-w", 3)
    for _ in range(3):
        done = service.act(Action.CHECKPOINT, "local:tok-w", {}, principal=PERSON, confirmed=True)
        assert done.status == "executed", done.message
    async with Client(build_server(service)) as client:
        first = await client.call_tool("list_checkpoints", {"workload": "local:tok-w", "limit": 2})
        page = first.structured_content
        assert page is not None and page["total"] == 3 and len(page["checkpoints"]) == 2
        # The text copy is a one-line summary; the structured content is the one full copy.
        text = tokens.result_text(first)
        assert (
            text
            == "2 checkpoints of 3: local:tok-w@3, local:tok-w@2; more with cursor=local:tok-w@2"
        ), text
        record = page["checkpoints"][0]
        assert record["id"] == "local:tok-w@3" and record["status"] == "good"
        assert "files" not in record and "timings" not in record
        cost = tokens.count(record)
        assert cost <= CHECKPOINT_RECORD_BUDGET, f"a checkpoint record costs {cost} tokens"

        rest = await client.call_tool(
            "list_checkpoints",
            {"workload": "local:tok-w", "limit": 2, "cursor": page["next_cursor"]},
        )
        assert rest.structured_content is not None
        assert [c["id"] for c in rest.structured_content["checkpoints"]] == ["local:tok-w@1"]
        assert "next_cursor" not in rest.structured_content

        full = await client.call_tool(
            "list_checkpoints", {"workload": "local:tok-w", "limit": 1, "detail": True}
        )
        assert full.structured_content is not None
        (detailed,) = full.structured_content["checkpoints"]
        assert detailed["files"] and all(f["digest"] for f in detailed["files"])
        assert tokens.count(detailed) > CHECKPOINT_RECORD_BUDGET  # what the default spares

        gone = await client.call_tool(
            "list_checkpoints", {"workload": "local:tok-w", "cursor": "local:tok-w@99"}
        )
        assert gone.is_error and "list again without a cursor" in tokens.result_text(gone)


@pytest.mark.anyio
@pytest.mark.criu
async def test_a_pending_approval_says_to_wait_for_the_person(
    settings: Settings, service: Service, need_criu: None
) -> None:
    service.run_workload(counter(settings, "tok-m", mb=8), detach=True, principal=PERSON)
    wait_step(settings, "tok-m", 3)
    async with Client(build_server(service)) as client:
        moved = await client.call_tool("migrate_workload", {"workload": "local:tok-m"})
        out = moved.structured_content
        assert out is not None and out["status"] == "approval_required", out
        aid = out["approval"]["id"]
        assert "wait for them" in out["next"] and "do not request it again" in out["next"]
        assert out["plan"]["steps"] and all(isinstance(s, str) for s in out["plan"]["steps"])
        listed = await client.call_tool("list_approvals", {})
        assert listed.structured_content is not None
        (pending,) = listed.structured_content["approvals"]
        assert pending["id"] == aid and pending["plan"]["summary"] == out["plan"]["summary"]
        assert tokens.count(pending) < 300
