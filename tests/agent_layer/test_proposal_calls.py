"""Every ``plan_actions`` proposal is callable as it stands: ``tool`` is a served MCP tool and
``arguments`` validate against that tool's input schema, and calling it over a real MCP
client is accepted (as a dry run).

The first test covers each kind of proposal the planner makes (migrate, preempt, failover,
leave-running checkpoint, checkpoint interval, pool scaling; from a notice, a lost GPU, a dead
node, an SLA risk, a backlog, a cheaper node, an interval that does not pay, work waiting for
a pool, idle pool nodes) against the live ``tools/list`` of the server (with the ``capacity``
toolset that serves ``scale_pool``); the second drives the installed ``clawpoint serve`` over
stdio: a spot notice on the workload's node, ``plan_actions``, then the proposal's own
``tool`` with its own ``arguments`` and ``dry_run=true``; the third does the same for a
real workload checkpointed once a day whose measured checkpoint pays far more often.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import jsonschema  # type: ignore[import-untyped]
import pytest

from core.config import load_settings
from core.durations import interval_seconds
from core.model import Action, NodeHealth, PoolInfo, WorkloadState
from core.planner.planner import PlannerInput, Proposal, plan_actions
from core.service import insights
from core.service.facade import bootstrap
from core.signals.model import InterruptionAction, InterruptionNotice, Provider
from core.signals.queue import coerce
from core.signals.sla import Observation, Progress, assess
from mcp_server.server import DEFAULT_TOOLSETS, build_server
from tests.adversarial.conftest import PERSON, Lab
from tests.agent_layer import serving
from tests.planner.test_interval_advice import ON_DEMAND
from tests.planner.test_planner import NOW, node, wl
from tests.service.conftest import counter, step, wait_step
from tests.signals.fakes import FakeAwsImds


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def aws() -> Iterator[FakeAwsImds]:
    with FakeAwsImds() as fake:
        yield fake


def _notice(on: str, action: InterruptionAction) -> InterruptionNotice:
    return InterruptionNotice(source="aws-imds", provider=Provider.AWS, action=action,
                              deadline=NOW + timedelta(seconds=120), node=f"local:{on}")  # fmt: skip


def _every_kind() -> list[Proposal]:
    """One proposal of each kind the planner makes."""
    out: list[Proposal] = []
    # A spot notice: migrate where there is room, preempt (save and stop) where there is none.
    spot = [node("spot", 0.9, spot=True), node("od", 3.0)]
    work = [wl("s1", "spot")]
    terminate = _notice("spot", InterruptionAction.TERMINATE)
    out += plan_actions(PlannerInput(nodes=spot, workloads=work, notices=[terminate]), now=NOW)
    full = [node("spot", 0.9, spot=True), node("od", 3.0, health=NodeHealth.DOWN)]
    out += plan_actions(PlannerInput(nodes=full, workloads=work, notices=[terminate]), now=NOW)
    # A rebalance recommendation: a leave-running checkpoint.
    rebalance = _notice("spot", InterruptionAction.REBALANCE)
    out += plan_actions(PlannerInput(nodes=spot, workloads=work, notices=[rebalance]), now=NOW)
    # A dead node: fail its dead workload over.
    dead = [wl("x", "gone", state=WorkloadState.FAILED)]
    out += plan_actions(PlannerInput(nodes=[node("gone", health=NodeHealth.DOWN), node("b")],
                                     workloads=dead), now=NOW)  # fmt: skip
    # An SLA risk: move to a faster node.
    late = wl(
        "late", "slow", labels={"clawpoint.io/deadline": (NOW + timedelta(hours=1)).isoformat()}
    )
    history = [
        Observation(step=0, at=NOW - timedelta(seconds=1000)),
        Observation(step=1000, at=NOW),
    ]
    risk = assess(late, now=NOW, progress=Progress(step=1000, total=10000), history=history)
    assert risk is not None
    fast = [node("slow"), node("fast4", 4.0, speed=4.0)]
    out += plan_actions(PlannerInput(nodes=fast, workloads=[late], sla=[risk]), now=NOW)
    # A cheaper node over a long run.
    cheap = [node("dear", 3.0), node("cheap", 0.9)]
    out += plan_actions(PlannerInput(nodes=cheap, workloads=[wl("job", "dear")],
                                     remaining_s={"local:job": 36000}), now=NOW)  # fmt: skip
    # A backlogged queue: preempt lower-priority work.
    queue = coerce({"pending": 3, "oldest_pending_age_s": 1800, "max_pending_priority": 10,
                    "running": 1}, backend="local")  # fmt: skip
    low = wl("low", "b", labels={"clawpoint.io/priority": "1"})
    out += plan_actions(PlannerInput(nodes=[node("b")], workloads=[low], queues=[queue]), now=NOW)
    # A checkpoint interval far from the one that pays: longer (and shorter) intervals.
    for every in (10.0, 86400.0):
        timed = wl("timed", "b").model_copy(update={"checkpoint_every": every})
        out += plan_actions(PlannerInput(nodes=[node("b")], workloads=[timed],
                                         intervals={timed.id: ON_DEMAND}), now=NOW)  # fmt: skip
    # A pool: grown for work waiting in its queue, shrunk by its idle nodes.
    spot_pool = PoolInfo(id="local:spot", backend="local", name="spot", price_per_hour=0.9,
                    max_size=3, size=2, nodes=["b", "c"], idle=["c"], released=["d"])  # fmt: skip
    waiting = coerce({"pending": 1, "oldest_pending_age_s": 120}, backend="local")
    out += plan_actions(PlannerInput(nodes=[node("b")], workloads=[], pools=[spot_pool],
                                     queues=[waiting]), now=NOW)  # fmt: skip
    out += plan_actions(
        PlannerInput(nodes=[node("b")], workloads=[], pools=[spot_pool], release_idle=True), now=NOW
    )
    # A workload near its memory limit: more memory in place, or on a node with room.
    hot = wl("hot", "b").model_copy(update={"memory_mb": 1024, "memory_used_mb": 1000})
    for room in (8192, 1024):
        sized = [node("b", memory_mb=room), node("big", memory_mb=65536)]
        out += plan_actions(PlannerInput(nodes=sized, workloads=[hot], resize_backends=["local"]),
                            now=NOW)  # fmt: skip
    return out


def test_every_kind_of_proposal_names_a_served_tool_with_valid_arguments(tmp_path: Path) -> None:
    proposals = _every_kind()
    kinds = {(p.trigger, p.action) for p in proposals}
    assert kinds >= {
        ("spot-interruption", Action.MIGRATE), ("spot-interruption", Action.PREEMPT),
        ("spot-interruption", Action.CHECKPOINT), ("node-down", Action.FAILOVER),
        ("sla-risk", Action.MIGRATE), ("cost", Action.MIGRATE),
        ("queue-backlog", Action.PREEMPT),
        ("checkpoint-interval", Action.SET_CHECKPOINT_INTERVAL),
        ("capacity-grow", Action.SCALE_POOL), ("capacity-shrink", Action.SCALE_POOL),
        ("memory-pressure", Action.RESIZE),
    }, kinds  # fmt: skip
    # scale_pool and resize_workload are served only with the capacity toolset (off by default).
    toolsets = (*DEFAULT_TOOLSETS, "capacity")
    server = build_server(bootstrap(load_settings(tmp_path)), toolsets=toolsets)
    schemas = {t.name: t.input_schema for t in anyio.run(server.list_tools)}
    for p in proposals:
        assert p.tool in schemas, (p.tool, sorted(schemas))
        problems = [e.message for e in
                    jsonschema.Draft202012Validator(schemas[p.tool]).iter_errors(p.arguments)]  # fmt: skip
        assert not problems, (p.tool, p.arguments, problems)
        # The concise view an agent reads carries the same call; the full record too.
        brief = insights.Briefer.proposal(p)
        assert (brief["tool"], brief["arguments"]) == (p.tool, p.arguments)
        full = p.model_dump(mode="json")
        assert (full["tool"], full["arguments"]) == (p.tool, p.arguments)
    migrate = next(p for p in proposals if p.trigger == "cost")
    assert (migrate.tool, migrate.arguments) == (
        "migrate_workload", {"workload": "local:job", "to": "cheap"},
    )  # fmt: skip


@pytest.mark.anyio
@pytest.mark.criu
async def test_a_proposal_is_called_as_it_stands_over_mcp(
    aws: FakeAwsImds, lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    lab = lab_factory(serving.signals_config("aws", aws.url, nvml=False))
    workload = lab.start("call-w", node="node-a")
    aws.mark_instance_action("terminate", in_seconds=120)
    async with serving.client(lab, gpus=[]) as client:
        plan = await serving.ok(client, "plan_actions")
        [move] = [p for p in plan["proposals"] if p["target"] == workload]
        assert (move["tool"], move["arguments"]) == (
            "migrate_workload", {"workload": workload, "to": "node-b"},
        ), move  # fmt: skip
        args: dict[str, Any] = {**move["arguments"], "reason": move["reason"][:500]}
        done = await serving.ok(client, move["tool"], {**args, "dry_run": True})
        assert done["status"] == "planned", done
        assert "node-b" in done["plan"]["summary"], done
    assert lab.service.get_workload(workload).node == "node-a"  # a dry run changed nothing


@pytest.mark.anyio
@pytest.mark.criu
async def test_an_interval_proposal_is_called_as_it_stands_over_mcp(
    lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    lab = lab_factory("")
    workload = lab.start("daily", node="node-a")
    # One timed checkpoint, and an interval of a day on an on-demand node: far too rare.
    lab.service.act(Action.CHECKPOINT, workload, {}, principal=PERSON)
    lab.service.act(Action.SET_CHECKPOINT_INTERVAL, workload, {"every": "1d"}, principal=PERSON)
    async with serving.client(lab, gpus=[]) as client:
        plan = await serving.ok(client, "plan_actions")
        [p] = [p for p in plan["proposals"] if p["target"] == workload]
        assert (p["tool"], p["trigger"], p["risk"]) == (
            "set_checkpoint_interval", "checkpoint-interval", "safe",
        ), p  # fmt: skip
        every = p["arguments"]["every"]
        assert (
            set(p["arguments"]) == {"workload", "every"} and p["arguments"]["workload"] == workload
        )
        assert (shorter := interval_seconds(every)) is not None and shorter < 86400, p
        assert "(every 1d now)" in p["reason"] and " -> " in p["reason"], p
        args: dict[str, Any] = {**p["arguments"], "reason": p["reason"][:500]}
        done = await serving.ok(client, p["tool"], {**args, "dry_run": True})
        assert done["status"] == "planned" and done["plan"]["risk"] == "safe", done
        assert lab.service.get_workload(workload).checkpoint_every == 86400.0  # dry run
        done = await serving.ok(client, p["tool"], args)  # safe: an agent may
        assert done["status"] == "executed", done
        assert lab.service.get_workload(workload).checkpoint_every == shorter
        again = await serving.ok(client, "plan_actions")
        assert not [p for p in again["proposals"] if p["target"] == workload], again


@pytest.mark.anyio
@pytest.mark.criu
async def test_a_memory_pressure_proposal_is_called_as_it_stands_over_mcp(
    lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    """A real counter in a 64 MiB cgroup using about 60 MiB of it: plan_actions proposes more
    memory in place (safe), and the proposal called as it stands raises the limit while the
    same process keeps counting."""
    lab = lab_factory("")
    spec = counter(lab.settings, "tight", mb=48, node="node-a").model_copy(update={"memory_mb": 64})
    lab.service.run_workload(spec, detach=True, principal=PERSON)
    wait_step(lab.settings, "tight", 2)
    workload = "local:tight"
    before = lab.service.get_workload(workload)
    assert before.memory_mb == 64 and (before.memory_used_mb or 0) >= 58, before
    async with serving.client(lab, gpus=[], toolsets="default,capacity") as client:
        plan = await serving.ok(client, "plan_actions")
        [p] = [p for p in plan["proposals"] if p["target"] == workload]
        assert (p["tool"], p["trigger"], p["risk"]) == (
            "resize_workload", "memory-pressure", "safe",
        ), p  # fmt: skip
        assert set(p["arguments"]) == {"workload", "memory"}, p  # in place: no "to"
        args: dict[str, Any] = {**p["arguments"], "reason": p["reason"][:500]}
        done = await serving.ok(client, p["tool"], args)  # safe: an agent may
        assert done["status"] == "executed", done
    after = lab.service.get_workload(workload)
    assert after.memory_mb is not None and after.memory_mb > 64, after
    assert (after.pid, after.node, after.state) == (before.pid, "node-a", WorkloadState.RUNNING)
    step_then = step(lab.settings, "tight")
    wait_step(lab.settings, "tight", step_then + 5)  # the same process counts on
