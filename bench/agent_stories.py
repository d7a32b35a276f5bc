"""Three incident stories, driven over stdio by a scripted agent with a scripted person at the
CLI: what they cost the agent, what they ask of the person, how long the workload is down.

Each story runs in a fresh CLAWPOINT_HOME: two local nodes (node-a on demand and fast,
node-b spot, "this host", its AWS metadata a fake on 127.0.0.1) and the self-checking
counter on node-b under CRIU. The agent is the SDK's client talking to the installed
``clawpoint serve`` over stdio; the person is another principal, at a terminal: every half
second it runs ``clawpoint approvals list --json``, reads each new request for
``person_delay`` seconds, then ``clawpoint approvals approve ID``. The agent never waits on
tokens: it learns that the person decided the way a chat would tell it.

- ``spot-notice``: a spot notice for node-b. ``spot_market``, then
  ``migrate_workload(workload, reason)``; an agent that does not wait calls
  ``execute_approved`` at once and does what the answer says (asked to request a new
  approval, it requests again: a duplicate for the person); once the person approved,
  ``execute_approved``; ``get_workload`` to check it runs elsewhere.
- ``spot-runbook``: the same notice; ``start_runbook("spot-interruption")`` and
  ``continue_runbook`` after each approval the run waits for, until it ends.
- ``at-risk``: "is anything at risk?": a workload whose deadline it will miss on node-b.
  ``sla_risk``, ``plan_actions``, then a dry run of the first proposal (its ``tool`` and
  ``arguments`` when the proposal carries them, else the action tool named after it). No
  person.

Figures per story: tool calls; tokens (cl100k_base) of every result as three kinds of host
hand it to the model (``bench.tokens.host_views``); approvals asked of the person;
duplicate requests (more than one request for the same action and target); and, from the
counter's own progress records sampled every 10 ms, the longest time it made no progress
(downtime). In ``spot-notice`` the one pause is the migration's own, the figure the
runbook's downtime is held to. Run each story once per ``result_text``
mode (``summary``, ``json``: the text copy as it was) to measure both.

Limits: one scripted agent, not a model; its calls follow the skills (skills/*/SKILL.md),
so a model may make more. Timings include this machine's load.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from bench import tokens
from core import errors
from core.config import load_settings
from core.model import Action, WorkloadState, utcnow
from core.service.facade import Service, bootstrap
from tests.service.conftest import PERSON, counter, wait_step
from tests.signals.fakes import FakeAwsImds

ROOT = Path(__file__).resolve().parents[1]
CLAWPOINT = Path(sys.executable).parent / "clawpoint"
NAME = "story-w"
WORKLOAD = f"local:{NAME}"
# An answer that sends the agent back to ask again (rather than to wait).
ASK_AGAIN = re.compile(r"request (a )?new approval|request (it|approval) again", re.IGNORECASE)

CONFIG = """
[[local.nodes]]
name = "node-a"
price_per_hour = 3.06
labels = {{pool = "on-demand", "clawpoint.io/speed" = "20"}}
[[local.nodes]]
name = "node-b"
price_per_hour = 0.92
spot = true
labels = {{pool = "spot"}}
[signals]
node = "local:node-b"
connect_timeout_s = 0.5
read_timeout_s = 0.5
[signals.aws]
enabled = true
base_url = "{imds}"
[mcp]
result_text = "{mode}"
"""


class Person:
    """Someone at a terminal approving every request after reading it for ``delay`` s."""

    def __init__(self, home: Path, delay: float) -> None:
        self.home, self.delay = home, delay
        self.asked: dict[str, float] = {}  # approval id -> when the person first saw it
        self.decided: dict[str, threading.Event] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def cli(self, *args: str) -> Any:
        env = {"PATH": os.environ["PATH"], "CLAWPOINT_HOME": str(self.home),
               "PYTHONPATH": str(ROOT), "LANG": "C.UTF-8"}  # fmt: skip
        proc = subprocess.run([str(CLAWPOINT), *args, "--json"], env=env, capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"clawpoint {' '.join(args)}: {proc.returncode} {proc.stderr}")
        return json.loads(proc.stdout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for a in self.cli("approvals", "list")["approvals"]:
                    seen = self.asked.setdefault(a["id"], time.monotonic())
                    if time.monotonic() - seen >= self.delay:
                        self.cli("approvals", "approve", a["id"])
                        self.event(a["id"]).set()
            except RuntimeError as exc:
                print(f"person: {exc}", file=sys.stderr)
            self._stop.wait(0.5)

    def event(self, approval_id: str) -> threading.Event:
        return self.decided.setdefault(approval_id, threading.Event())

    async def wait(self, approval_id: str, timeout: float = 300) -> None:
        import anyio.to_thread

        if not await anyio.to_thread.run_sync(self.event(approval_id).wait, timeout):
            raise RuntimeError(f"the person never decided {approval_id}")

    def duplicates(self) -> int:
        """Requests beyond the first for the same action and target."""
        seen: dict[tuple[str, str], int] = {}
        for a in self.cli("approvals", "list", "--all", "--limit", "500")["approvals"]:
            plan = a.get("plan") or {}
            key = (str(plan.get("action")), str(plan.get("target")))
            seen[key] = seen.get(key, 0) + 1
        return sum(n - 1 for n in seen.values())

    def __enter__(self) -> Person:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=130)


class Downtime:
    """Samples the counter's progress record; the longest stretch without a new step."""

    def __init__(self, home: Path) -> None:
        self.path = home / "run" / f"{NAME}.progress.json"
        self.stamps: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ts = float(json.loads(self.path.read_text())["ts"])
            except (OSError, ValueError, KeyError):
                ts = None
            if ts is not None and (not self.stamps or ts > self.stamps[-1]):
                self.stamps.append(ts)
            self._stop.wait(0.01)

    def longest_gap_s(self) -> float:
        gaps = [b - a for a, b in zip(self.stamps, self.stamps[1:], strict=False)]
        return round(max(gaps, default=0.0), 3)

    def __enter__(self) -> Downtime:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


async def spot_notice(call: Call, person: Person) -> str:
    await call("spot_market", {})
    reason = "spot notice for node-b: move the workload before the node is reclaimed"
    asked = await call("migrate_workload", {"workload": WORKLOAD, "reason": reason})
    if asked.get("status") != "approval_required":
        return str(asked.get("status"))
    approval = asked["approval"]["id"]
    early = await call("execute_approved", {"approval_id": approval})  # before the person
    said = json.dumps(early)
    if ASK_AGAIN.search(said) and "do not request" not in said.lower():
        again = await call("migrate_workload", {"workload": WORKLOAD, "reason": reason})
        approval = (again.get("approval") or {}).get("id", approval)
    await person.wait(approval)
    done = await call("execute_approved", {"approval_id": approval})
    where = await call("get_workload", {"workload": WORKLOAD})
    return f"{done.get('status')}; {where.get('state')} on {where.get('node')}"


async def spot_runbook(call: Call, person: Person) -> str:
    run = await call("start_runbook", {"name": "spot-interruption",
                                       "params": {"workload": WORKLOAD}})  # fmt: skip
    for _ in range(10):
        if run.get("status") != "waiting_approval":
            break
        await person.wait(run["waiting"]["approval_id"])
        run = await call("continue_runbook", {"run_id": run["id"]})
    return f"{run.get('status')}: {run.get('outcome') or run.get('error') or ''}"[:200]


async def at_risk(call: Call, person: Person) -> str:
    risks = await call("sla_risk", {})
    plans = await call("plan_actions", {})
    proposals = plans.get("proposals") or []
    if not proposals:
        return f"{len(risks.get('risks') or [])} at risk, no proposal"
    first = proposals[0]
    tool = first.get("tool") or f"{first.get('action')}_workload"
    args = dict(first.get("arguments") or {"workload": first.get("target")})
    if not first.get("arguments") and first.get("to_node"):
        args["to"] = first["to_node"]
    dry = await call(tool, {**args, "dry_run": True})
    return f"{len(risks.get('risks') or [])} at risk; {tool}: {dry.get('status')}"


STORIES: dict[str, Callable[[Call, Person], Awaitable[str]]] = {
    "spot-notice": spot_notice, "spot-runbook": spot_runbook, "at-risk": at_risk,
}  # fmt: skip


def _start(service: Service, home: Path, story: str) -> None:
    labels: dict[str, str] = {}
    if story == "at-risk":  # two hours of work left, due in ten minutes: late on node-b
        due = utcnow().replace(microsecond=0) + timedelta(minutes=10)
        labels = {"clawpoint.io/expected-duration": "2h", "clawpoint.io/deadline": due.isoformat()}
    spec = counter(service.settings, NAME, mb=8, node="node-b").model_copy(
        update={"labels": labels}
    )
    service.run_workload(spec, detach=True, principal=PERSON)
    wait_step(service.settings, NAME, 3)


def _stop(service: Service) -> None:
    for w in service.workloads("local"):
        if w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING):
            try:
                service.act(Action.KILL, w.id, {}, principal=PERSON, confirmed=True)
            except errors.ClawpointError:
                pass


async def run_story(root: Path, story: str, mode: str, person_delay: float) -> dict[str, Any]:
    """One story in a fresh home; its figures."""
    home = root / f"{story}-{mode}"
    home.mkdir(parents=True)
    calls: list[dict[str, Any]] = []
    with FakeAwsImds() as imds:
        (home / "config.toml").write_text(CONFIG.format(imds=imds.url, mode=mode))
        service = bootstrap(load_settings(home))
        env = {"PATH": os.environ["PATH"], "CLAWPOINT_HOME": str(home), "PYTHONPATH": str(ROOT),
               "LANG": "C.UTF-8"}  # fmt: skip
        try:
            _start(service, home, story)
            if story != "at-risk":
                imds.mark_instance_action("terminate", in_seconds=120)
            params = StdioServerParameters(command=str(CLAWPOINT), args=["serve"], env=env)
            with Person(home, person_delay) as person, Downtime(home) as down:
                async with Client(params) as client:

                    async def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
                        result = await client.call_tool(tool, args)
                        views = tokens.host_views(result)
                        calls.append({"tool": tool, "error": bool(result.is_error),
                                      **{k: tokens.count(v) for k, v in views.items()}})  # fmt: skip
                        data = result.structured_content
                        return data if isinstance(data, dict) else {"error": views["text"]}

                    outcome = await STORIES[story](call, person)
                asked, duplicates = len(person.asked), person.duplicates()
            return {
                "story": story, "result_text": mode, "outcome": outcome, "calls": len(calls),
                "tokens": {k: sum(c[k] for c in calls) for k in ("text", "structured", "openclaw")},
                "approvals_asked": asked, "duplicate_requests": duplicates,
                "downtime_s": down.longest_gap_s() if story != "at-risk" else None,
                "person_delay_s": person_delay,
                "per_call": [f"{c['tool']}{' (error)' if c['error'] else ''}: {c['text']}"
                             for c in calls],
            }  # fmt: skip
        except Exception as exc:  # a broken story is a figure too: report it, go on
            return {"story": story, "result_text": mode, "error": f"{type(exc).__name__}: {exc}",
                    "per_call": [c["tool"] for c in calls]}  # fmt: skip
        finally:
            _stop(service)


async def stories(root: Path, person_delay: float) -> list[dict[str, Any]]:
    return [await run_story(root, story, mode, person_delay)
            for story in STORIES for mode in ("summary", "json")]  # fmt: skip


def print_stories(rows: list[dict[str, Any]]) -> None:
    print("stories over stdio (tokens: structured-only host / OpenClaw / the text copy)")
    for r in rows:
        head = f"  {r['story']:<13} {r['result_text']:<8}"
        if "error" in r:
            print(f"{head} error: {r['error']} after {r['per_call']}")
            continue
        t = r["tokens"]
        down = "" if r["downtime_s"] is None else f", downtime {r['downtime_s']} s"
        print(f"{head} {r['calls']} calls, {t['structured']}/{t['openclaw']}/{t['text']} tokens, "
              f"{r['approvals_asked']} asked, {r['duplicate_requests']} duplicate{down}: "
              f"{r['outcome']}")  # fmt: skip
