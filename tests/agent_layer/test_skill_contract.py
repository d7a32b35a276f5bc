"""Skill contract: every call a SKILL.md tells an agent to make is valid against the live
server, and every output field it relies on is one the tool really returns.

The calls are written in the convention of ``skill_calls`` (``tool(arg=VALUE) -> field``).
One real ``clawpoint serve`` (the installed console script, stdio, the SDK's client) serves
a small local setup: a counter workload under CRIU on node-a with one checkpoint, one
approval the agent asked for, one runbook run. Then, for every call of every skill:

- the tool is in the live ``tools/list`` of a server serving the toolsets the skill declares
  (``metadata.clawpoint-toolsets``, e.g. ``default,capacity``; else the default ones); the
  calls run on a server serving every toolset any skill declares; every argument is one of its parameters and the
  arguments (placeholders replaced by samples of their type) validate against its input
  schema: types, enums, bounds, required; a runbook's name and parameters against
  ``list_runbooks``;
- every output field it names is in what the call really returns on the setup
  (placeholders replaced by the setup's ids), or, where that output is empty or the call
  fails on the setup, declared by the tool's output schema; a value it compares with was
  seen there, or is one of the field's declared values;
- every ``clawpoint ...`` command it names exists (``--help`` exits 0);
- every other snake_case name in backticks is a tool, an argument or an output field.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, get_args

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml
from mcp import Client
from pydantic import BaseModel

from core.guardrails.approvals import ApprovalStatus
from core.model import Action, CheckpointStatus, NodeHealth, RiskClass, WorkloadState
from core.planner.planner import BASE as TRIGGERS
from core.runbooks.store import RunStatus
from core.signals.model import GpuVerdict
from core.signals.queue import QueueDepth
from core.signals.sla import RiskLevel
from mcp_server.common import ActionOut
from tests.adversarial.conftest import PERSON, Lab
from tests.agent_layer import serving, skill_calls
from tests.agent_layer.skill_calls import Call, SkillSyntaxError
from tests.service.conftest import counter, wait_step
from tests.signals.fakes import FakeAwsImds

ROOT = Path(__file__).resolve().parents[2]
# CLAWPOINT_SKILLS_DIR: check another skills folder against the live server (e.g. an old one).
SKILLS = sorted(Path(os.environ.get("CLAWPOINT_SKILLS_DIR", ROOT / "skills")).glob("*/SKILL.md"))
CLAWPOINT = Path(sys.executable).parent / "clawpoint"
_SNAKE = r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+"

# Values an open record's field can take, where the tool documents them but its output
# schema cannot say so (records are open objects): the enums those fields are made from.
FIELD_VALUES: dict[str, type[StrEnum] | tuple[Any, ...]] = {
    "list_nodes:nodes[].schedulable": (True, False),
    "cluster_health:nodes[].schedulable": (True, False),
    "list_checkpoints:checkpoints[].status": CheckpointStatus,
    "get_workload:state": WorkloadState,
    "list_workloads:workloads[].state": WorkloadState,
    "cluster_health:nodes[].health": NodeHealth,
    "list_nodes:nodes[].health": NodeHealth,
    "cluster_health:gpus[].verdict": GpuVerdict,
    "plan_actions:gpus[].verdict": GpuVerdict,
    "sla_risk:risks[].level": RiskLevel,
    "plan_actions:sla[].level": RiskLevel,
    "plan_actions:proposals[].risk": RiskClass,
    "plan_actions:proposals[].action": Action,
    "get_approval:status": ApprovalStatus,
    "list_approvals:approvals[].status": ApprovalStatus,
    "start_runbook:status": RunStatus,
    "runbook_status:status": RunStatus,
    "continue_runbook:status": RunStatus,
    "spot_market:notices[].kind": ("spot", "rebalance", "maintenance"),
    "cluster_health:notices[].kind": ("spot", "rebalance", "maintenance"),
    "plan_actions:notices[].kind": ("spot", "rebalance", "maintenance"),
    "plan_actions:proposals[].trigger": tuple(TRIGGERS),
}

# Open records that are a model's dump (all its fields, nulls left out): a field of the model
# is declared even where the setup never fills it (nothing waits in a local queue).
RECORD_MODELS: dict[str, tuple[str, type[BaseModel]]] = {
    "queue_depth": ("queues[]", QueueDepth),
}


PRICES = (
    '[signals.prices.table]\n"local:node-b" = { price_per_hour = 0.9, on_demand_per_hour = 3.06 }\n'
)
# The default two nodes plus node-c in the spot pool, released in the setup (a pool with a
# released node and an idle one, as a capacity skill reads them).
NODES = """
[local]
nodes = [
  { name = "node-a", price_per_hour = 3.06, labels = { pool = "on-demand" } },
  { name = "node-b", price_per_hour = 0.92, spot = true, labels = { pool = "spot" } },
  { name = "node-c", price_per_hour = 0.95, spot = true, labels = { pool = "spot" } },
]
"""
DEFAULT_TOOLSETS = "default"


def toolsets(skill: Path) -> str:
    """The toolsets ``skill`` needs served (``metadata.clawpoint-toolsets``), else default."""
    front = yaml.safe_load(skill.read_text(encoding="utf-8").split("---", 2)[1])
    declared = (front.get("metadata") or {}).get("clawpoint-toolsets")
    return str(declared) if declared else DEFAULT_TOOLSETS


def union(sets: list[str]) -> str:
    return ",".join(sorted({name.strip() for s in sets for name in s.split(",")}))


@pytest.fixture
def aws() -> Iterator[FakeAwsImds]:
    with FakeAwsImds() as fake:
        yield fake


def _split(path: Path) -> str:
    return path.read_text(encoding="utf-8").split("---", 2)[2]


# --- the convention itself: strict, and able to fail -------------------------------------


def test_parser_reads_calls_refs_and_placeholders() -> None:
    call = skill_calls.parse_call(
        'start_runbook(name="spot-interruption", params={"workload": WORKLOAD}, dry_run=true)'
        ' -> status in ["succeeded", "waiting_approval"]'
    )
    assert call.tool == "start_runbook" and call.placeholders == {"WORKLOAD"}
    assert skill_calls.substitute(call.args) == {
        "name": "spot-interruption", "params": {"workload": "local:train-1"}, "dry_run": True,
    }  # fmt: skip
    assert call.ref is not None and call.ref.path == ("status",) and call.ref.op == "in"
    ref = skill_calls.parse_call("list_checkpoints(workload=WORKLOAD) -> checkpoints[].status")
    assert ref.ref is not None and ref.ref.path == ("checkpoints[]", "status")
    assert skill_calls.parse_call("cluster_status()").args == {}


@pytest.mark.parametrize(
    "text",
    [
        "checkpoint_workload(workload=W)",  # unknown placeholder
        "checkpoint_workload(workload: WORKLOAD)",  # not name=value
        "checkpoint_workload(workload=WORKLOAD",  # unclosed
        "checkpoint_workload(workload=WORKLOAD) and then wait",  # trailing prose
        "checkpoint_workload(workload=WORKLOAD, workload=WORKLOAD)",  # twice
        "migrate_workload(workload=WORKLOAD, to=node-b)",  # bare word, not a JSON string
        "get_workload(workload=WORKLOAD) -> ",  # empty path
        'get_workload(workload=WORKLOAD) -> state in "running"',  # in needs an array
        "drain_node(node=NODE, save=yes)",  # not JSON
    ],
)
def test_parser_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(SkillSyntaxError):
        skill_calls.parse_call(text)


def test_a_call_like_span_that_does_not_parse_fails_the_skill() -> None:
    body = "Call `get_workload(workload=WORKLOAD)`, then `migrate_workload(workload=W)`."
    with pytest.raises(SkillSyntaxError, match=":1:"):
        skill_calls.calls(body, "x")
    with pytest.raises(SkillSyntaxError):
        skill_calls.calls("see `-> status`", "x")
    with pytest.raises(SkillSyntaxError):
        skill_calls.find_spans("```\nget_workload()\n```")


@pytest.mark.parametrize("skill", SKILLS, ids=lambda p: p.parent.name)
def test_every_skill_parses_and_says_when_it_is_done(skill: Path) -> None:
    body = _split(skill)
    found = skill_calls.calls(body, skill.parent.name)
    assert found, f"{skill.parent.name} names no tool call"
    assert "## Done when" in body, f"{skill.parent.name} has no 'Done when' section"
    done = body.split("## Done when", 1)[1].split("\n## ", 1)[0]
    assert any(c.ref is not None for c in skill_calls.calls(done)), (
        f"{skill.parent.name}: 'Done when' must name the call and output field that prove it"
    )


# --- the live check ----------------------------------------------------------------------


def _start(
    lab: Lab, name: str, labels: dict[str, str] | None = None, every: float | None = None
) -> str:
    """A small counter under CRIU on node-a, once it makes progress."""
    spec = counter(lab.settings, name, mb=8, node="node-a", every=every)
    spec = spec.model_copy(update={"labels": labels or {}})
    lab.service.run_workload(spec, detach=True, principal=PERSON)
    wait_step(lab.settings, name, 2)
    return f"local:{name}"


def _workloads(lab: Lab) -> dict[str, str]:
    """One running workload with a deadline (so it has an SLA risk) and an hourly periodic
    checkpoint (an interval in force; none comes due in the test), one saved and stopped
    (to resume), one dead after a checkpoint (to fail over)."""
    deadline = (datetime.now(UTC) + timedelta(hours=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
    running = _start(lab, "skill-w", {"clawpoint.io/deadline": deadline,
                                      "clawpoint.io/expected-duration": "2h"},
                     every=3600)  # fmt: skip
    stopped = _start(lab, "skill-s")
    done = lab.service.act(Action.PREEMPT, stopped, {}, principal=PERSON, confirmed=True)
    assert done.status == "executed", done.message
    dead = _start(lab, "skill-f")
    done = lab.service.act(Action.CHECKPOINT, dead, {}, principal=PERSON, confirmed=True)
    assert done.status == "executed", done.message
    pid = lab.service.get_workload(dead).pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    until = time.monotonic() + 60
    while lab.service.get_workload(dead).state is not WorkloadState.FAILED:
        assert time.monotonic() < until, "the wrapper did not record the death"
        time.sleep(0.05)
    return {"running": running, "stopped": stopped, "dead": dead}


@dataclass
class Live:
    tools: dict[str, Any]
    runbooks: dict[str, dict[str, Any]]
    real: dict[str, Any]
    # Per tool, placeholders that need another workload or node than the default one.
    real_for: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)  # call text -> structured output
    failed: dict[str, str] = field(default_factory=dict)  # call text -> error text


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _call(client: Client, tool: str, args: dict[str, Any]) -> tuple[Any, str | None]:
    result = await client.call_tool(tool, args)
    if result.is_error:
        return None, " ".join(getattr(c, "text", "") for c in result.content)
    return result.structured_content, None


async def _setup(client: Client, lab: Lab, ws: dict[str, str]) -> Live:
    # A person releases node-c (idle, the dearer spot node): the spot pool then has a
    # released node and an idle one (node-b), and no move below can land on node-c.
    shrunk = lab.service.act(Action.SCALE_POOL, "local:spot", {"size": 1}, principal=PERSON,
                             confirmed=True)  # fmt: skip
    assert shrunk.status == "executed", shrunk.message
    assert [p.released for p in lab.service.pools("local") if p.id == "local:spot"] == [["node-c"]]
    listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    books = await serving.ok(client, "list_runbooks")
    runbooks = {b["name"]: b for b in books["runbooks"]}
    workload = ws["running"]
    done = await serving.ok(client, "checkpoint_workload", {"workload": workload, "reason": "t"})
    assert done["status"] == "executed", done
    saved = await serving.ok(client, "list_checkpoints", {"workload": ws["stopped"]})
    asked = await serving.ok(client, "migrate_workload", {"workload": workload, "reason": "t"})
    assert asked["status"] == "approval_required", asked
    approval = asked["approval"]["id"]
    lab.service.guard.approvals.approve(approval, PERSON)  # a person's act, not the agent's
    run = await serving.ok(
        client, "start_runbook", {"name": "spot-interruption", "params": {"workload": workload}}
    )
    real = {
        "WORKLOAD": workload, "NODE": "local:node-a", "APPROVAL": approval,
        "CHECKPOINT": saved["checkpoints"][0]["id"], "RUN": run["id"], "BACKEND": "local",
        "POOL": "local:spot", "SIZE": 2,  # a dry run of growing node-c back
    }  # fmt: skip
    real_for = {
        "resume_workload": {"WORKLOAD": ws["stopped"]},
        "restore_checkpoint": {"WORKLOAD": ws["stopped"]},
        "failover_workload": {"WORKLOAD": ws["dead"]},
        "migrate_workload": {"NODE": "local:node-b"},
    }
    return Live(tools=tools, runbooks=runbooks, real=real, real_for=real_for)


def _schema_errors(live: Live, call: Call) -> list[str]:
    tool = live.tools.get(call.tool)
    if tool is None:
        return [f"{call.where}: no tool {call.tool!r} (tools: {', '.join(sorted(live.tools))})"]
    schema = tool.input_schema
    props = schema.get("properties", {})
    problems = [
        f"{call.where}: {call.tool} has no argument {name!r} (it takes {', '.join(props)})"
        for name in call.args
        if name not in props
    ]
    args = skill_calls.substitute(call.args)
    validator = jsonschema.Draft202012Validator(schema)
    problems += [f"{call.where}: `{call.text}`: {e.message}" for e in validator.iter_errors(args)]
    if call.tool == "start_runbook" and isinstance(args.get("name"), str):
        book = live.runbooks.get(args["name"])
        if book is None:
            problems.append(f"{call.where}: no runbook {args['name']!r}")
        else:
            unknown = set(args.get("params") or {}) - set(book["params"])
            if unknown:
                problems.append(
                    f"{call.where}: runbook {book['name']} takes no {sorted(unknown)} "
                    f"(params: {', '.join(book['params'])})"
                )
    return problems


def _at(value: Any, path: tuple[str, ...]) -> list[Any] | None:
    """Every value at ``path`` (None: no item has it). Records leave out empty and null
    fields, so a field of list items counts as there when at least one item has it."""
    current = [value]
    for part in path:
        name, each = part.removesuffix("[]"), part.endswith("[]")
        nxt: list[Any] = []
        for item in current:
            if not isinstance(item, dict) or name not in item:
                continue
            got = item[name]
            if each:
                if isinstance(got, list):
                    nxt.extend(got)
            else:
                nxt.append(got)
        if not nxt:
            return None
        current = nxt
    return current


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    for key in ("anyOf", "oneOf"):
        if key in schema:  # X | None: follow the non-null branch
            branches = [s for s in schema[key] if s.get("type") != "null"]
            if len(branches) == 1:
                return _resolve(branches[0], root)
    return schema


def _declared(schema: dict[str, Any] | None, path: tuple[str, ...]) -> dict[str, Any] | None:
    """The output schema of ``path`` when the schema declares it, else None."""
    if not schema:
        return None
    root, node = schema, schema
    for part in path:
        name, each = part.removesuffix("[]"), part.endswith("[]")
        node = _resolve(node, root)
        child = node.get("properties", {}).get(name)
        if child is None:
            return None
        node = _resolve(child, root)
        if each:
            if node.get("type") != "array" or "items" not in node:
                return None
            node = _resolve(node["items"], root)
    return node


def _allowed(live: Live, call: Call, seen: list[Any] | None) -> set[Any]:
    assert call.ref is not None
    values: set[Any] = {json.dumps(v) for v in seen or []}
    declared = _declared(live.tools[call.tool].output_schema, call.ref.path)
    if declared is not None and "enum" in declared:
        values |= {json.dumps(v) for v in declared["enum"]}
    if declared is not None and "const" in declared:
        values.add(json.dumps(declared["const"]))
    ann = live.tools[call.tool].annotations
    if call.ref.text == "status" and ann is not None and not ann.read_only_hint:
        if call.tool not in ("start_runbook", "continue_runbook"):  # an action's result
            values |= {json.dumps(v) for v in get_args(ActionOut.model_fields["status"].annotation)}
    known = FIELD_VALUES.get(f"{call.tool}:{call.ref.text}")
    if known is not None:
        values |= {json.dumps(str(v) if isinstance(v, StrEnum) else v) for v in known}
    return values


def _record_field(tool: str, path: tuple[str, ...]) -> bool:
    """Whether ``path`` is a field of the model ``tool``'s records are made from."""
    where, model = RECORD_MODELS.get(tool, ("", BaseModel))
    return len(path) == 2 and path[0] == where and path[1] in model.model_fields


def _output_errors(live: Live, call: Call) -> list[str]:
    ref = call.ref
    if ref is None or call.tool not in live.tools:
        return []
    out = live.outputs.get(call.text)
    seen = _at(out, ref.path) if out is not None else None
    if seen is None and _record_field(call.tool, ref.path):
        return [] if ref.op is None else [f"{call.where}: `{call.text}`: the setup never "
                                          f"fills {ref.text}, so no value can be checked"]  # fmt: skip
    if seen is None and _declared(live.tools[call.tool].output_schema, ref.path) is None:
        why = live.failed.get(call.text) or f"output: {json.dumps(out)[:300]}"
        return [f"{call.where}: `{call.text}`: {call.tool} returns no {ref.text!r} ({why})"]
    if ref.op is None:
        return []
    wanted = ref.value if ref.op == "in" else [ref.value]
    allowed = _allowed(live, call, seen)
    return [
        f"{call.where}: `{call.text}`: {ref.text} is never {w!r} (seen or declared: "
        f"{sorted(allowed)})"
        for w in wanted
        if json.dumps(w) not in allowed
    ]


def _words(found: list[str]) -> list[str]:
    import re

    return re.findall(rf"`({_SNAKE})`", "\n".join(found))


def _keys(value: Any, into: set[str]) -> None:
    """Every key and every string value (names, enum values, states) in ``value``."""
    if isinstance(value, dict):
        for k, v in value.items():
            into.add(k)
            _keys(v, into)
    elif isinstance(value, list):
        for v in value:
            _keys(v, into)
    elif isinstance(value, str):
        into.add(value)


def _check_cli(spans: set[str]) -> list[str]:
    """Each ``clawpoint ...`` command parses in the command tree the console script runs:
    its subcommand words exist, and its options and arguments (placeholders replaced by a
    sample) are ones that command takes. Parsing only: nothing is run."""
    import re

    import typer.main

    from core.cli.app import app

    problems = []
    for span in sorted(spans):
        cmd: Any = typer.main.get_command(app)
        words = skill_calls.cli_words(span) or []
        path = ["clawpoint"]
        rest = span.split()[1:]
        for word in words:
            commands = getattr(cmd, "commands", None)
            if not isinstance(commands, Mapping):  # the root's loads each command on lookup
                break  # a leaf command: the rest are its arguments
            cmd = commands.get(word)
            if cmd is None:
                problems.append(f"`{span}`: {' '.join(path)} has no command {word!r} (it has: "
                                f"{', '.join(sorted(commands))})")  # fmt: skip
                break
            path.append(word)
            rest = rest[1:]
        else:
            if isinstance(getattr(cmd, "commands", None), Mapping) and not getattr(
                cmd, "invoke_without_command", False
            ):
                problems.append(f"`{span}`: names a command group, not a command")
                continue
        if cmd is None:
            continue
        args = [re.sub(r"[A-Z][A-Z_]+", lambda m: str(skill_calls.PLACEHOLDERS.get(
            m.group(0), ("", "x"))[1]), a) for a in rest]  # fmt: skip
        try:
            cmd.make_context(" ".join(path), args)
        except Exception as exc:  # click's usage errors: the command would refuse this
            problems.append(f"`{span}`: {type(exc).__name__}: {exc}")
    return problems


@pytest.mark.anyio
@pytest.mark.criu
async def test_every_skill_call_and_field_holds_against_the_live_server(
    aws: FakeAwsImds, lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    parsed = {p.parent.name: skill_calls.calls(_split(p), p.parent.name) for p in SKILLS}
    spans = [s for p in SKILLS for _, s in skill_calls.find_spans(_split(p))]
    needs = {p.parent.name: toolsets(p) for p in SKILLS}
    every_set = union([DEFAULT_TOOLSETS, *needs.values()])
    # The host is local:node-a on AWS, with a spot notice and a lost GPU, and a price feed.
    lab = lab_factory(serving.signals_config("aws", aws.url, nvml=True) + PRICES + NODES)
    aws.mark_instance_action("terminate", in_seconds=600)
    ws = _workloads(lab)
    problems: list[str] = []
    # What each declared set of toolsets really serves (the live tools/list of its own server).
    served: dict[str, set[str]] = {}
    for wanted in {union([t]) for t in needs.values()} - {every_set}:
        async with serving.client(lab, toolsets=wanted) as client:
            served[wanted] = {t.name for t in (await client.list_tools()).tools}
    async with serving.client(lab, toolsets=every_set) as client:
        live = await _setup(client, lab, ws)
        served[every_set] = set(live.tools)
        every = [c for found in parsed.values() for c in found]
        for call in every:
            problems += _schema_errors(live, call)
        for name, found in parsed.items():
            wanted = union([needs[name]])
            problems += [
                f"{c.where}: {c.tool} is not served with --toolsets {wanted} (declare the "
                "toolsets the skill needs in metadata.clawpoint-toolsets)"
                for c in found
                if c.tool in live.tools and c.tool not in served[wanted]
            ]

        # Reads first, so the actions below cannot change what they see; the approved
        # plan (a real migration) last.
        def order(c: Call) -> int:
            ann = live.tools[c.tool].annotations if c.tool in live.tools else None
            if c.tool == "execute_approved":
                return 2
            return 0 if ann is not None and ann.read_only_hint else 1

        for call in sorted((c for c in every if c.ref and c.tool in live.tools), key=order):
            if call.text in live.outputs or call.text in live.failed:
                continue
            args = skill_calls.substitute(call.args, live.real | live.real_for.get(call.tool, {}))
            out, err = await _call(client, call.tool, args)
            if err is not None:
                live.failed[call.text] = err
            else:
                live.outputs[call.text] = out
        for call in every:
            problems += _output_errors(live, call)
        for name in ("cluster_status", "list_workloads", "list_nodes", "list_approvals"):
            if name in live.tools:
                out, _ = await _call(client, name, {})
                live.outputs.setdefault(name, out)
    known: set[str] = set(live.tools) | set(skill_calls.PLACEHOLDERS)
    for values in FIELD_VALUES.values():
        known |= {str(v) for v in values}
    for tool in live.tools.values():
        known |= set(tool.input_schema.get("properties", {}))
        _keys(tool.output_schema or {}, known)
    for out in live.outputs.values():
        _keys(out, known)
    for word in sorted(set(_words(spans)) - known):
        problems.append(f"`{word}` is neither a tool, an argument nor an output field")
    problems += _check_cli({s for s in spans if s.startswith("clawpoint ")})
    total = sum(len(c) for c in parsed.values())
    assert not problems, f"{len(problems)} problems in {total} skill calls:\n" + "\n".join(problems)
