"""MCP load: concurrent agents over streamable HTTP against one ``clawpoint serve --http``,
plus in-process calls; throughput, p50/p99 latency and errors.

``python bench/mcp_load.py [--clients 50] [--duration 60] [--inproc 1000]``

One server on loopback (fresh ``CLAWPOINT_HOME``, one small cooperative counter so that
``get_workload`` and the dry-run plans have a real subject). Each client is its own SDK
session with its own HTTP connection pool and calls, round-robin, every read tool the server
lists (``read_only_hint``) and every action tool with ``dry_run`` (a plan only: nothing
changes) that needs at most a workload id. Then ``--inproc`` calls through an in-memory session.
Results go to bench/results/mcp_load.json. Limits: the clients run in this one Python
process on the same machine as the server, so at high client counts the figures include
the load generator's own CPU time; the latencies are those the client sees.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.config import load_settings  # noqa: E402
from core.model import Principal, PrincipalKind  # noqa: E402
from core.service.facade import bootstrap  # noqa: E402
from core.wrapper.spec import RunSpec  # noqa: E402
from mcp_server.server import build_server  # noqa: E402

WORKLOAD = "local:load-subject"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(
    samples: dict[str, list[float]], errors: dict[str, int], wall_s: float
) -> dict[str, Any]:
    every = [v for vs in samples.values() for v in vs]
    return {
        "calls": len(every),
        "errors": sum(errors.values()),
        "errors_by_tool": {k: v for k, v in errors.items() if v},
        "throughput_per_s": round(len(every) / wall_s, 1) if wall_s else None,
        "p50_ms": round(percentile(every, 0.50) * 1000, 2),
        "p99_ms": round(percentile(every, 0.99) * 1000, 2),
        "by_tool": {
            t: {
                "calls": len(vs),
                "p50_ms": round(percentile(vs, 0.5) * 1000, 2),
                "p99_ms": round(percentile(vs, 0.99) * 1000, 2),
            }
            for t, vs in sorted(samples.items())
        },
    }


def calls_for(tools: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """Read tools, and dry-run plans of the action tools (``dry_run``: nothing changes), that
    need nothing or only a workload id, from the live list."""
    chosen = []
    for t in tools:
        dry = "dry_run" in t.input_schema.get("properties", {})
        if not (dry or (t.annotations and t.annotations.read_only_hint)):
            continue
        required = set(t.input_schema.get("required", []))
        if required <= {"workload"}:
            args: dict[str, Any] = {"workload": WORKLOAD} if "workload" in required else {}
            chosen.append((t.name, {**args, "dry_run": True} if dry else args))
    return chosen


async def usable(
    client: Client, calls: list[tuple[str, dict[str, Any]]]
) -> list[tuple[str, dict[str, Any]]]:
    """The calls that succeed once on the subject (``plan_failover`` refuses a live workload:
    a correct answer, not load)."""
    return [(n, a) for n, a in calls if not (await client.call_tool(n, a)).is_error]


async def one_client(url: str, token: str, calls: list[tuple[str, dict[str, Any]]], until: float,
                     offset: int, samples: dict[str, list[float]], errors: dict[str, int]) -> None:  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            i = offset
            while time.monotonic() < until:
                name, args = calls[i % len(calls)]
                i += 1
                t0 = time.perf_counter()
                try:
                    result = await client.call_tool(name, args)
                    failed = bool(result.is_error)
                except Exception:
                    failed = True
                samples.setdefault(name, []).append(time.perf_counter() - t0)
                if failed:
                    errors[name] = errors.get(name, 0) + 1


async def over_http(url: str, token: str, clients: int, duration: float) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            calls = await usable(client, calls_for((await client.list_tools()).tools))
    samples: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    t0 = time.monotonic()
    until = t0 + duration
    await asyncio.gather(*(one_client(url, token, calls, until, k, samples, errors)
                           for k in range(clients)))  # fmt: skip
    out = summary(samples, errors, time.monotonic() - t0)
    out["clients"], out["duration_s"], out["tools"] = clients, duration, [c[0] for c in calls]
    return out


async def in_process(home: Path, n: int) -> dict[str, Any]:
    service = bootstrap(load_settings(home))
    samples: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    async with Client(build_server(service)) as client:
        calls = await usable(client, calls_for((await client.list_tools()).tools))
        t0 = time.monotonic()
        for i in range(n):
            name, args = calls[i % len(calls)]
            s = time.perf_counter()
            result = await client.call_tool(name, args)
            samples.setdefault(name, []).append(time.perf_counter() - s)
            if result.is_error:
                errors[name] = errors.get(name, 0) + 1
        return summary(samples, errors, time.monotonic() - t0)


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), platform.processor())  # fmt: skip
    return {"cpu": cpu, "cpus": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "loadavg_before": os.getloadavg()}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of HTTP load")
    ap.add_argument("--inproc", type=int, default=1000, help="in-process calls")
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
    server = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "serve", "--http", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    report: dict[str, Any] = {"machine": machine()}
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
        report["http"] = asyncio.run(over_http(url, token, opts.clients, opts.duration))
        report["in_process"] = asyncio.run(in_process(home, opts.inproc))
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        from core.model import Action

        service.act(Action.KILL, WORKLOAD, {}, principal=person, confirmed=True)
    report["machine"]["loadavg_after"] = os.getloadavg()
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(report, indent=2) + "\n")
    h, p = report["http"], report["in_process"]
    print(f"HTTP, {h['clients']} clients, {h['duration_s']:.0f} s: {h['calls']} calls, "
          f"{h['throughput_per_s']}/s, p50 {h['p50_ms']} ms, p99 {h['p99_ms']} ms, "
          f"{h['errors']} errors")  # fmt: skip
    print(f"in-process: {p['calls']} calls, {p['throughput_per_s']}/s, p50 {p['p50_ms']} ms, "
          f"p99 {p['p99_ms']} ms, {p['errors']} errors")  # fmt: skip


if __name__ == "__main__":
    main()
