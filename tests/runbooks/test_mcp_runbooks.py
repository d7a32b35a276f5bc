"""Every shipped runbook through the real MCP server over stdio (``clawpoint serve``), on the
local backend: the server process is stopped while the run waits for a person and a new one
continues it; approvals come from a person at the CLI, never from the agent."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, cast

import pytest
from mcp import Client, StdioServerParameters

from core.backends.local import LocalBackend
from core.config import Settings
from core.model import Action, WorkloadState, utcnow
from core.service.facade import Service
from tests.runbooks.conftest import ROOT, approve
from tests.runbooks.serve_signals import ENV as SIGNALS_ENV
from tests.service.conftest import PERSON, counter, log_text, step, wait_step

NAME = "rb-w"
WORKLOAD = f"local:{NAME}"


def _params(settings: Settings, signals: dict[str, Any] | None = None) -> StdioServerParameters:
    """``python -m core.cli serve``; with ``signals``, the same server with those read tools
    stood in (``tests/runbooks/serve_signals.py``)."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update({"CLAWPOINT_HOME": str(settings.home), "PYTHONPATH": str(ROOT)})
    args = ["-m", "core.cli", "serve"]
    if signals is not None:
        env[SIGNALS_ENV] = json.dumps(signals)
        args = ["-m", "tests.runbooks.serve_signals"]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(ROOT))


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
            assert ann is not None and not ann.read_only_hint and ann.destructive_hint
        size = sum(len(json.dumps(tools[n].model_dump(mode="json", exclude_none=True)))
                   for n in ("list_runbooks", "start_runbook", "runbook_status",
                             "continue_runbook"))  # fmt: skip
        assert size < 6500, size  # a small part of the budget (tests/mcp/test_token_budgets.py)

        listed = await _call(client, "list_runbooks", {})
        names = {r["name"] for r in listed["runbooks"]}
        assert names == {"spot-interruption", "gpu-node-failure", "node-maintenance-drain",
                         "sla-rescue", "queue-backlog", "capacity-planner"}  # fmt: skip

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


@dataclass(frozen=True)
class Case:
    """One runbook's path: where the run waits (step, the person's answer or None for an
    approval), its last step, where the workload ends up and how many checkpoints it has."""

    runbook: str
    params: dict[str, Any]
    waits: tuple[tuple[str, str | None], ...]
    last: str
    node: str | None = "node-b"
    state: WorkloadState = WorkloadState.RUNNING
    checkpoints: int = 1
    labels: dict[str, str] = field(default_factory=dict)
    degrade: str | None = None
    signals: dict[str, Any] | None = None


CASES = [
    # Moved to another node than the one being reclaimed (the workload starts on node-a), in
    # one action: one approval, never left stopped between two.
    Case("spot-interruption", {"workload": WORKLOAD}, (("move-gate", None),), "done"),
    Case("gpu-node-failure", {"node": "local:node-a"}, (("drain-gate", None),), "done",
         degrade="node-a"),
    Case("node-maintenance-drain", {"node": "local:node-a", "window": "now"},
         (("confirm", "drain"), ("drain-gate", None)), "done"),
    Case("sla-rescue", {"workload": WORKLOAD},
         (("choose", "migrate"), ("migrate-gate", None)), "done",
         checkpoints=2, labels={"clawpoint.io/expected-duration": "2h"}),
    # No queue on the local backend: the two signals are stood in; the preemption is real.
    Case("queue-backlog", {"partition": "gpu"},
         (("choose", "preempt"), ("preempt-gate", None)), "preempted", node=None,
         state=WorkloadState.STOPPED, signals={
             "queue_depth": {"pending": 3, "running": 1, "oldest_wait_minutes": 45.0,
                             "backlog": True},
             "plan_actions": {"workload": WORKLOAD,
                              "summary": f"preempt {WORKLOAD} (lowest priority)"}}),
]  # fmt: skip


def _start_workload(service: Service, settings: Settings, case: Case) -> int:
    labels = dict(case.labels)
    if "clawpoint.io/expected-duration" in labels:
        labels["clawpoint.io/deadline"] = (utcnow() + timedelta(minutes=10)).isoformat()
    spec = counter(settings, NAME, mb=8).model_copy(update={"labels": labels})
    service.run_workload(spec, detach=True, principal=PERSON)
    if case.degrade:
        local = cast(LocalBackend, service.backend("local"))
        local.set_node_state(case.degrade, health="degraded", reason="xid 79: GPU fell off the bus")
    return wait_step(settings, NAME, 3)


async def _until_it_waits(settings: Settings, case: Case, tool: str,
                          args: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """One server process: call ``tool``; when the run then waits for an approval, check
    that continuing does not get past it. The process ends when this returns."""
    async with Client(_params(settings, case.signals)) as client:
        run = await _call(client, tool, args)
        if run["status"] == "waiting_approval":
            again = await _call(client, "continue_runbook", {"run_id": run["id"]})
            assert again["status"] == "waiting_approval", again
            assert again["waiting"]["approval_id"] == run["waiting"]["approval_id"]
    return run


@pytest.mark.anyio
@pytest.mark.criu
@pytest.mark.parametrize("case", CASES, ids=[c.runbook for c in CASES])
async def test_runbook_survives_server_restarts(
    case: Case, settings: Settings, service: Service, need_criu: None
) -> None:
    before = _start_workload(service, settings, case)
    run = await _until_it_waits(settings, case, "start_runbook",
                                {"name": case.runbook, "params": case.params})  # fmt: skip
    assert run["principal"].startswith("agent:mcp:stdio/")  # this server process's session
    approvals: dict[str, str] = {}
    for at, answer in case.waits:
        # The server that ran the run so far is gone; the run waits in the database.
        wanted = "waiting_answer" if answer else "waiting_approval"
        assert (run["status"], run["current"]) == (wanted, at), run
        if answer is None:
            assert "clawpoint approvals approve" in run["next"]
            view = approve(settings, run["waiting"]["approval_id"])  # a person, at the CLI
            assert f"agent:{view['requester']}" == run["principal"]
            assert view["decided_by"] != view["requester"], view
            approvals[at] = view["id"]
        async with Client(_params(settings, case.signals)) as client:  # a new server
            status = await _call(client, "runbook_status", {"run_id": run["id"]})
            assert (status["status"], status["current"]) == (wanted, at), status
        args = {"run_id": run["id"], **({"answer": answer} if answer else {})}
        run = await _until_it_waits(settings, case, "continue_runbook", args)

    assert run["status"] == "succeeded", (run.get("error"), run["steps"][-1])
    assert run["steps"][-1].split()[0] == case.last  # one line per step: "ID STATUS: ..."
    async with Client(_params(settings, case.signals)) as client:  # the full history on request
        full = await _call(client, "runbook_status", {"run_id": run["id"], "detail": True})
    assert full["steps"][-1]["id"] == case.last
    gates = {s["id"]: s["output"] for s in full["steps"] if s["id"] in approvals}
    for at, approval_id in approvals.items():
        assert gates[at]["status"] == "approved" and gates[at]["approval_id"] == approval_id
        assert gates[at]["result"]["status"] == "executed", gates[at]
    again = await _until_it_waits(settings, case, "continue_runbook", {"run_id": run["id"]})
    assert again["status"] == "succeeded" and again["steps"] == run["steps"]

    w = service.get_workload(WORKLOAD)
    assert w.state is case.state, w
    assert case.node is None or w.node == case.node
    if case.degrade:
        assert not next(n for n in service.nodes("local") if n.name == case.degrade).schedulable
    if w.state is WorkloadState.STOPPED:  # stopped resumable: it goes on from its checkpoint
        service.act(Action.RESUME, WORKLOAD, {}, principal=PERSON, confirmed=True)
    # Progress kept: the moved process goes on past where it was, never started afresh.
    assert wait_step(settings, NAME, step(settings, NAME)) > before
    log = log_text(settings, NAME)
    assert log.count("counter started") == 1 and "STATE CHECK FAILED" not in log, log
    assert len(service.checkpoints(WORKLOAD)) == case.checkpoints
