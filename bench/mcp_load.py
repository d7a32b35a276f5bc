"""MCP load: concurrent agents over streamable HTTP against one ``clawpoint serve --http``,
plus in-process calls; throughput, p50/p99 latency, errors and CPU per call.

``python bench/mcp_load.py [--clients 50] [--duration 60] [--period 1] [--inproc 1000] [--no-pin]``

One server on loopback (fresh ``CLAWPOINT_HOME``, one small cooperative counter so that
``get_workload`` and the dry-run plans have a real subject). The calls are every read tool
the server lists (``read_only_hint``) and every action tool with ``dry_run`` (a plan only:
nothing changes) that needs at most a workload id, taken from the live ``tools/list``.
Each client calls them round-robin over its own keep-alive HTTP connection. Two runs:

- paced (open loop, what the p99 target is about): each client sends one call every
  ``--period`` seconds, the clients' schedules spread evenly over the period and each call
  jittered by up to ``--jitter`` of it, whether or not its previous call has returned; the
  arrival rate is clients / period. Latency is counted from the scheduled send time, so a
  late load generator adds to it rather than hiding queueing (no coordinated omission).
- closed loop (saturation): each client sends its next call the moment the last returns,
  with no think time. This measures the server's throughput; its latency is queueing
  (about clients / throughput), not the time a call needs.

Then ``--inproc`` calls through an in-memory SDK session (no HTTP). Results go to
bench/results/mcp_load.json, with the server's and the load generator's CPU seconds per
call, the CPUs each ran on, and the load average around each run.

Pinning (the default on a machine with two CPUs or more): the load generator runs on the
last CPU this process may use and the server on the others (``os.sched_setaffinity``; the
server inherits its CPUs at start), so the generator's own work never competes with the
server's and the figure is the server's. Other processes on the machine still share both
sets. ``--no-pin`` leaves both to the scheduler. ``--nice N`` runs both at niceness N
(below 0 needs CAP_SYS_NICE): on a machine others load, it keeps their work from
delaying the server's (it does nothing about I/O or a hypervisor's stalls).

The load phases post the exact request the SDK client sends for each call (headers and
JSON-RPC body captured from one SDK call per tool during discovery) and parse the JSON
answer, without the SDK's client-side machinery: that keeps the load generator's own CPU
use per call low, as it shares the machine with the server. ``--sdk`` uses one SDK
``Client`` session per client instead. Limits: the clients run in this one Python process on
the same machine as the server; unpinned, the figures include competition for the CPUs with
the load generator (its CPU time is reported), and pinned or not, with whatever else runs
there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.config import load_settings  # noqa: E402
from core.model import Action, Principal, PrincipalKind  # noqa: E402
from core.service.facade import bootstrap  # noqa: E402
from core.specs import RunSpec  # noqa: E402
from mcp_server.server import build_server  # noqa: E402

WORKLOAD = "local:load-subject"

# One planned call: tool name, arguments, "read" or "dry_run".
Call = tuple[str, dict[str, Any], str]
# Latency samples and error counts by tool.
Samples = dict[str, list[float]]
Errors = dict[str, int]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ms(values: list[float], q: float) -> float:
    return round(percentile(values, q) * 1000, 2)


def summary(samples: Samples, errors: Errors, wall_s: float, kinds: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    every = [v for vs in samples.values() for v in vs]
    out: dict[str, Any] = {
        "calls": len(every),
        "errors": sum(errors.values()),
        "errors_by_tool": {k: v for k, v in errors.items() if v},
        "throughput_per_s": round(len(every) / wall_s, 1) if wall_s else None,
        "p50_ms": _ms(every, 0.50),
        "p99_ms": _ms(every, 0.99),
    }
    for kind in ("read", "dry_run"):
        these = [v for t, vs in samples.items() if kinds.get(t) == kind for v in vs]
        out[kind] = {"calls": len(these), "p50_ms": _ms(these, 0.5), "p99_ms": _ms(these, 0.99),
                     "max_ms": _ms(these, 1.0)}  # fmt: skip
    out["by_tool"] = {
        t: {"kind": kinds.get(t), "calls": len(vs), "p50_ms": _ms(vs, 0.5), "p99_ms": _ms(vs, 0.99)}
        for t, vs in sorted(samples.items())
    }
    return out


def calls_for(tools: list[Any]) -> list[Call]:
    """Read tools, and dry-run plans of the action tools (``dry_run``: nothing changes), that
    need nothing or only a workload id, from the live list."""
    chosen: list[Call] = []
    for t in tools:
        dry = "dry_run" in t.input_schema.get("properties", {})
        if not (dry or (t.annotations and t.annotations.read_only_hint)):
            continue
        required = set(t.input_schema.get("required", []))
        if required <= {"workload"}:
            args: dict[str, Any] = {"workload": WORKLOAD} if "workload" in required else {}
            if dry:
                chosen.append((t.name, {**args, "dry_run": True}, "dry_run"))
            else:
                chosen.append((t.name, args, "read"))
    return chosen


# --- callers: one per client; each returns True when the call failed ------------------------
Caller = Callable[[str, dict[str, Any]], Awaitable[bool]]


class RawCaller:
    """Posts the request the SDK client sends (captured in ``discover``) and reads the JSON
    answer: a failure is an HTTP error, a JSON-RPC error or ``isError``."""

    def __init__(self, http: httpx2.AsyncClient, url: str, templates: dict[str, tuple[dict[str, str], dict[str, Any]]]) -> None:  # fmt: skip
        self.http, self.url, self.templates, self.next_id = http, url, templates, 1000

    async def __call__(self, name: str, args: dict[str, Any]) -> bool:
        headers, body = self.templates[name]
        self.next_id += 1
        request = {**body, "id": self.next_id}
        resp = await self.http.post(self.url, headers=headers, content=json.dumps(request))
        if resp.status_code != 200:
            return True
        answer = resp.json()
        return "error" in answer or bool(answer.get("result", {}).get("isError"))


async def discover(url: str, token: str) -> tuple[list[Call], dict[str, tuple[dict[str, str], dict[str, Any]]]]:  # fmt: skip
    """The calls that succeed once on the subject (``plan_failover`` refuses a live
    workload: a correct answer, not load), and the SDK's request for each."""
    captured: dict[str, tuple[dict[str, str], dict[str, Any]]] = {}

    async def keep(request: httpx2.Request) -> None:
        if request.headers.get("mcp-method") == "tools/call":
            body = json.loads(request.content)
            skip = {"host", "content-length", "authorization", "user-agent", "connection",
                    "accept-encoding"}  # fmt: skip
            headers = {k: v for k, v in request.headers.items() if k.lower() not in skip}
            captured[body["params"]["name"]] = (headers, body)

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=120, event_hooks={"request": [keep]}) as http:  # fmt: skip
        async with Client(streamable_http_client(url, http_client=http)) as client:
            calls = calls_for((await client.list_tools()).tools)
            usable = [c for c in calls if not (await client.call_tool(c[0], c[1])).is_error]
    return usable, captured


class Session:
    """A client's connection: raw posts (default) or an SDK ``Client`` session."""

    def __init__(self, url: str, token: str, templates: dict[str, Any], *, sdk: bool) -> None:
        self.url, self.token, self.templates, self.sdk = url, token, templates, sdk

    async def __aenter__(self) -> Caller:
        # One connection each, as separate agents would have (and no pool limit in the way).
        limits = httpx2.Limits(max_connections=None, max_keepalive_connections=None)
        self.http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.token}"},
                                       timeout=120, limits=limits)  # fmt: skip
        await self.http.__aenter__()
        if not self.sdk:
            return RawCaller(self.http, self.url, self.templates)
        self.client = Client(streamable_http_client(self.url, http_client=self.http))
        await self.client.__aenter__()

        async def call(name: str, args: dict[str, Any]) -> bool:
            return bool((await self.client.call_tool(name, args)).is_error)

        return call

    async def __aexit__(self, *exc: object) -> None:
        if self.sdk:
            await self.client.__aexit__(None, None, None)
        await self.http.__aexit__(None, None, None)


async def _timed(caller: Caller, name: str, args: dict[str, Any], since: float,
                 samples: Samples, errors: Errors) -> None:  # fmt: skip
    try:
        failed = await caller(name, args)
    except Exception:
        failed = True
    samples.setdefault(name, []).append(time.perf_counter() - since)
    if failed:
        errors[name] = errors.get(name, 0) + 1


async def closed_client(session: Session, calls: list[Call], until: float, offset: int,
                        samples: Samples, errors: Errors) -> None:  # fmt: skip
    async with session as caller:
        i = offset
        while time.perf_counter() < until:
            name, args, _ = calls[i % len(calls)]
            i += 1
            await _timed(caller, name, args, time.perf_counter(), samples, errors)


async def paced_client(session: Session, calls: list[Call], start: float, until: float,
                       period: float, jitter: float, k: int, clients: int,
                       samples: Samples, errors: Errors, late: list[float]) -> None:  # fmt: skip
    rng = random.Random(k)
    async with session as caller:
        pending: set[asyncio.Task[None]] = set()
        i = 0
        while True:
            due = start + (i + k / clients) * period + rng.uniform(-jitter, jitter) * period
            if due >= until:
                break
            name, args, _ = calls[(k + i) % len(calls)]
            i += 1
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            late.append(max(0.0, time.perf_counter() - due))
            # Open loop: the call goes out on schedule even if the previous one is pending.
            task = asyncio.create_task(_timed(caller, name, args, due, samples, errors))
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_phase(server_pid: int, body: Callable[[], Awaitable[None]], samples: Samples,
                    errors: Errors, kinds: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    load_before = os.getloadavg()
    s0, c0, t0 = cpu_s(server_pid), sum(os.times()[:2]), time.perf_counter()
    await body()
    s1, c1, t1 = cpu_s(server_pid), sum(os.times()[:2]), time.perf_counter()
    out = summary(samples, errors, t1 - t0, kinds)
    n = max(1, out["calls"])
    out["cpu"] = {
        "server_s": round(s1 - s0, 1), "server_ms_per_call": round((s1 - s0) / n * 1000, 2),
        "load_generator_s": round(c1 - c0, 1),
        "load_generator_ms_per_call": round((c1 - c0) / n * 1000, 2),
    }  # fmt: skip
    out["loadavg_before"], out["loadavg_after"] = load_before, os.getloadavg()
    return out


async def over_http(url: str, token: str, server_pid: int, opts: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    calls, templates = await discover(url, token)
    kinds = {name: kind for name, _, kind in calls}
    report: dict[str, Any] = {"tools": {"read": [c[0] for c in calls if c[2] == "read"],
                                        "dry_run": [c[0] for c in calls if c[2] == "dry_run"]},
                              "client": "sdk" if opts.sdk else "raw"}  # fmt: skip

    def session() -> Session:
        return Session(url, token, templates, sdk=opts.sdk)

    if opts.paced_duration > 0:
        samples: Samples = {}
        errors: Errors = {}
        late: list[float] = []

        async def paced() -> None:
            start = time.perf_counter() + 1.0  # every session opened before the first call
            until = start + opts.paced_duration
            await asyncio.gather(*(
                paced_client(session(), calls, start, until, opts.period, opts.jitter, k,
                             opts.clients, samples, errors, late)
                for k in range(opts.clients)))  # fmt: skip

        out = await run_phase(server_pid, paced, samples, errors, kinds)
        out.update(clients=opts.clients, duration_s=opts.paced_duration, period_s=opts.period,
                   jitter=opts.jitter, arrival_rate_per_s=round(opts.clients / opts.period, 1),
                   send_late_p99_ms=_ms(late, 0.99))  # fmt: skip
        report["paced"] = out
    if opts.duration > 0:
        samples, errors = {}, {}

        async def closed() -> None:
            until = time.perf_counter() + opts.duration
            await asyncio.gather(*(closed_client(session(), calls, until, k, samples, errors)
                                   for k in range(opts.clients)))  # fmt: skip

        out = await run_phase(server_pid, closed, samples, errors, kinds)
        out.update(clients=opts.clients, duration_s=opts.duration)
        report["closed_loop"] = out
    return report


async def in_process(home: Path, n: int) -> dict[str, Any]:
    service = bootstrap(load_settings(home))
    samples: Samples = {}
    errors: Errors = {}
    async with Client(build_server(service)) as client:
        calls = calls_for((await client.list_tools()).tools)
        calls = [c for c in calls if not (await client.call_tool(c[0], c[1])).is_error]
        t0 = time.monotonic()
        for i in range(n):
            name, args, _ = calls[i % len(calls)]
            s = time.perf_counter()
            result = await client.call_tool(name, args)
            samples.setdefault(name, []).append(time.perf_counter() - s)
            if result.is_error:
                errors[name] = errors.get(name, 0) + 1
        return summary(samples, errors, time.monotonic() - t0, {c[0]: c[2] for c in calls})


def split_cpus() -> tuple[set[int], set[int]] | None:
    """(the load generator's CPU, the server's CPUs) from this process's own set, or None
    with fewer than two."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None
    return {allowed[-1]}, set(allowed[:-1])


def pin_self(cpus: set[int]) -> None:
    """Every thread of this process onto ``cpus`` (a thread keeps the set it had when it
    started, so each is set, not only the calling one)."""
    for task in Path("/proc/self/task").iterdir():
        os.sched_setaffinity(int(task.name), cpus)


def renice_self(niceness: int) -> None:
    """Every thread of this process (and so what it starts) at ``niceness`` (per thread on
    Linux, like the CPU set)."""
    for task in Path("/proc/self/task").iterdir():
        os.setpriority(os.PRIO_PROCESS, int(task.name), niceness)


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), platform.processor())  # fmt: skip
    return {"cpu": cpu, "cpus": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "loadavg_before": os.getloadavg()}  # fmt: skip


def _line(title: str, r: dict[str, Any]) -> str:
    return (f"{title}: {r['calls']} calls, {r['throughput_per_s']}/s, {r['errors']} errors; "
            f"read p50 {r['read']['p50_ms']} ms p99 {r['read']['p99_ms']} ms; dry runs p50 "
            f"{r['dry_run']['p50_ms']} ms p99 {r['dry_run']['p99_ms']} ms")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of closed-loop load")
    ap.add_argument("--paced-duration", type=float, default=60.0, help="seconds of paced load")
    ap.add_argument("--period", type=float, default=1.0, help="seconds between a client's calls")
    ap.add_argument("--jitter", type=float, default=0.25, help="of the period, either way")
    ap.add_argument("--inproc", type=int, default=1000, help="in-process calls")
    ap.add_argument("--sdk", action="store_true", help="load with SDK sessions, not raw posts")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="leave the server and the load generator to the scheduler")  # fmt: skip
    ap.add_argument("--nice", type=int, default=None,
                    help="niceness of the server and the load generator (<0: CAP_SYS_NICE)")  # fmt: skip
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "mcp_load.json")
    opts = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="clawpoint-load-"))
    (home / "config.toml").write_text("[recovery]\nevery_s = 3600\n")
    os.environ["CLAWPOINT_HOME"] = str(home)
    service = bootstrap(load_settings(home))
    spec = RunSpec.model_validate({
        "name": WORKLOAD.split(":")[1], "node": "node-a", "engine": "cooperative",
        "command": [sys.executable, "-m", "core.workloads.counter", "--state-mb", "1",
                    "--step-seconds", "0.5"],
        "cwd": str(ROOT), "home": str(home),
    })  # fmt: skip
    person = Principal(id="bench", kind=PrincipalKind.PERSON)
    service.run_workload(spec, detach=True, principal=person)

    port, token = free_port(), "agent-" + os.urandom(16).hex()
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(CLAWPOINT_HOME=str(home), PYTHONPATH=str(ROOT), CLAWPOINT_MCP_TOKEN=token)
    if opts.nice is not None:
        renice_self(opts.nice)  # before the server starts: it inherits the niceness
    cpus = split_cpus() if opts.pin else None
    if cpus is not None:
        pin_self(cpus[1])  # the server starts with the server's CPUs, then this process moves
    server = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "serve", "--http", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    if cpus is not None:
        pin_self(cpus[0])
    url = f"http://127.0.0.1:{port}/mcp"
    report: dict[str, Any] = {"machine": machine(), "nice": opts.nice}
    report["pinned"] = (
        {"load_generator_cpus": sorted(cpus[0]), "server_cpus": sorted(cpus[1])} if cpus else None
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx2.get(url, timeout=1)
                break
            except httpx2.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.2)
        report["http"] = asyncio.run(over_http(url, token, server.pid, opts))
        if opts.inproc > 0:
            report["in_process"] = asyncio.run(in_process(home, opts.inproc))
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        service.act(Action.KILL, WORKLOAD, {}, principal=person, confirmed=True)
    report["machine"]["loadavg_after"] = os.getloadavg()
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(report, indent=2) + "\n")
    h = report["http"]
    if cpus is not None:
        print(f"pinned: load generator on CPU {sorted(cpus[0])}, server on {sorted(cpus[1])}")
    if "paced" in h:
        p = h["paced"]
        print(_line(f"HTTP paced, {p['clients']} clients, {p['arrival_rate_per_s']} calls/s "
                    f"offered, {p['duration_s']:.0f} s", p))  # fmt: skip
    if "closed_loop" in h:
        c = h["closed_loop"]
        print(_line(f"HTTP closed loop, {c['clients']} clients, {c['duration_s']:.0f} s", c))
    if "in_process" in report:
        print(_line("in-process", report["in_process"]))


if __name__ == "__main__":
    main()
