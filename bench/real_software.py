"""Benchmark: what a client of a real server sees while ``clawpoint migrate`` moves it.

Run as root: ``.venv/bin/python bench/real_software.py [--reps 3] [--only redis,nginx]``.

Each real program (Redis with AOF, nginx with 2 workers serving a 256 KiB file, a Node.js
HTTP server counting with a 10 ms timer, MariaDB) is started with the installed ``clawpoint``
CLI (local backend, private CLAWPOINT_HOME) and migrated node-a -> node-b -> node-a ...
``--reps`` times while the client of tests/workloads/pinger.py makes one request every
10 ms (a fresh connection each, retried once 10 ms later), and a second client the same way
but retrying after ``--slow-retry-ms`` (250). Per move: the longest gap between two answered
requests and the requests that failed even after their retry, for each client.

Then the self-checking counter (``core.workloads.counter``, 10 ms steps) holding as many MiB
as the program's checkpoint is migrated the same way, and its pause (the longest gap between
two of its own step timestamps, read every millisecond) is the reference: ``ratio`` is the
program's median gap over the counter's. Same machine, same run, same CLI path.

Limits: MariaDB runs twice: as root (``--user=root``) and as its package runs it, dropping
to ``mysql`` under ``run --init --user-namespace`` (moves stop-and-copy); native AIO off; one client, one
request in flight; on a busy machine the figures move by tens of ms. Nothing is asserted:
the tests check correctness. JSON: ``bench/results/real_software.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import platform
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.workloads.pinger import (  # noqa: E402
    Pinger,
    http_get,
    mysql_ping,
    redis_ping,
)
from tests.workloads.servers import mariadb_install_db, mariadb_server  # noqa: E402

CLI = Path(sys.executable).with_name("clawpoint")
NODE_JS = ROOT / "tests" / "workloads" / "programs" / "timer_server.js"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cli:
    def __init__(self, home: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWPOINT_")}
        self.env["CLAWPOINT_HOME"] = str(home)
        self.home = home

    def __call__(self, *args: str) -> str:
        done = subprocess.run(  # noqa: S603 (argv list, our own console script)
            [str(CLI), *args], capture_output=True, text=True, env=self.env, timeout=300,
            stdin=subprocess.DEVNULL, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"clawpoint {args} -> {done.returncode}: {done.stdout}{done.stderr}")
        return done.stdout

    def newest_size(self, name: str) -> int:
        rows = json.loads(self("checkpoints", f"local:{name}", "--json"))
        newest = max(rows, key=lambda c: str(c["created_at"]))
        return int(newest.get("size_bytes") or 0)


@dataclass
class Program:
    name: str
    argv: list[str]
    request: Callable[[], None]
    run_opts: tuple[str, ...] = ()  # options of ``clawpoint run``


def programs(work: Path) -> dict[str, Program]:
    out: dict[str, Program] = {}
    if shutil.which("redis-server"):
        port = free_port()
        d = work / "redis"
        d.mkdir()
        argv = [
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "",
            "--daemonize", "no", "--protected-mode", "no", "--logfile", "",
        ]  # fmt: skip
        out["redis"] = Program("redis", argv, redis_ping(port))
    if Path("/usr/sbin/nginx").exists():
        port = free_port()
        d = work / "nginx"
        (d / "www").mkdir(parents=True)
        (d / "www" / "blob.bin").write_bytes(hashlib.sha256(b"x").digest() * 8192)  # 256 KiB
        temp = " ".join(
            f"{k}_temp_path {d / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        (d / "nginx.conf").write_text(
            f"daemon off; master_process on; worker_processes 2; user root;\n"
            f"pid {d / 'nginx.pid'}; error_log {d / 'error.log'};\n"
            f"events {{ worker_connections 128; }}\n"
            f"http {{ access_log {d / 'access.log'}; {temp}\n"
            f"  server {{ listen 127.0.0.1:{port}; root {d / 'www'}; }} }}\n"
        )
        argv = [
            "/usr/sbin/nginx",
            "-e",
            str(d / "error.log"),
            "-p",
            str(d),
            "-c",
            str(d / "nginx.conf"),
        ]
        out["nginx"] = Program("nginx", argv, http_get(port, "/blob.bin"))
    if shutil.which("node"):
        port = free_port()
        out["node"] = Program("node", ["node", str(NODE_JS), str(port)], http_get(port, "/"))
    if Path("/usr/sbin/mariadbd").exists() and shutil.which("mariadb-install-db"):
        port = free_port()
        d = work / "mariadb"
        subprocess.run(mariadb_install_db(d, "root"), check=True, capture_output=True)  # noqa: S603
        argv = mariadb_server(d, work, port, "root")
        out["mariadb"] = Program("mariadb", argv, mysql_ping(port))
    if Path("/usr/sbin/mariadbd").exists() and _has_user("mysql"):
        # As its package runs it: started by root, the server drops to ``mysql``; under our
        # init, in a user namespace of its own (docs/checkpointing.md, "Our init ...").
        port = free_port()
        top = work / "mariadb-mysql"
        top.mkdir()
        work.chmod(0o711)  # mysql passes through the run's private directory to its own
        shutil.chown(top, "mysql", "mysql")
        d = top / "data"
        subprocess.run(mariadb_install_db(d, "mysql"), check=True, capture_output=True)  # noqa: S603
        argv = mariadb_server(d, top, port, "mysql")
        out["mariadb-mysql"] = Program("mariadb-mysql", argv, mysql_ping(port),
                                       ("--init", "--user-namespace"))  # fmt: skip
    return out


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def wait_ready(request: Callable[[], None], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            request()
            return
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class StepWatcher:
    """The counter's progress file, read every millisecond: each step's own timestamp."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ts: dict[int, float] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError, KeyError):
                data = json.loads(self.path.read_text())
                self.ts.setdefault(int(data["step"]), float(data["ts"]))
            time.sleep(0.001)

    def wait_steps(self, n: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        start = max(self.ts, default=0)
        while max(self.ts, default=0) < start + n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no progress in {self.path}")
            time.sleep(0.01)

    def longest_gap(self, t0: float, t1: float) -> float:
        steps = sorted(self.ts)
        gaps = [
            self.ts[b] - self.ts[a]
            for a, b in itertools.pairwise(steps)
            if b == a + 1 and t0 <= self.ts[b] <= t1 + 5
        ]
        return max(gaps, default=float("nan"))

    def stop(self) -> None:
        self._stop.set()


@contextlib.contextmanager
def started(cli: Cli, name: str, argv: list[str], opts: tuple[str, ...] = ()) -> Iterator[None]:
    cli("run", "--name", name, "--node", "node-a", "--detach", *opts, "--", *argv)
    try:
        yield
    finally:
        with contextlib.suppress(RuntimeError):
            cli("kill", f"local:{name}", "--yes")


def moves(reps: int) -> Iterator[str]:
    for i in range(reps):
        yield "node-b" if i % 2 == 0 else "node-a"


def bench_program(cli: Cli, prog: Program, reps: int, slow_retry_s: float) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with started(cli, prog.name, prog.argv, prog.run_opts):
        wait_ready(prog.request)
        with (
            Pinger(prog.request) as pinger,
            Pinger(prog.request, retry_after_s=slow_retry_s) as patient,
        ):
            time.sleep(1.0)
            for node in moves(reps):
                subprocess.run(["sync"], check=True)  # noqa: S607
                with pinger.window() as w, patient.window() as w2:
                    cli("migrate", f"local:{prog.name}", "--to", node, "--yes")
                rows.append(
                    {
                        **w.as_dict(),
                        "slow_retry_failed": w2.failed,
                        "size_bytes": cli.newest_size(prog.name),
                    }
                )
                time.sleep(0.5)
    return {
        "gap_ms": statistics.median(r["gap_ms"] for r in rows),
        "failed": sum(r["failed"] for r in rows),
        "retried": sum(r["retried"] for r in rows),
        "slow_retry_failed": sum(r["slow_retry_failed"] for r in rows),
        "size_mib": statistics.median(r["size_bytes"] for r in rows) / 2**20,
        "runs": rows,
    }


def bench_counter(cli: Cli, mib: int, reps: int) -> dict[str, Any]:
    name = f"counter{mib}"
    argv = [sys.executable, "-m", "core.workloads.counter", "--state-mb", str(mib),
            "--step-seconds", "0.01"]  # fmt: skip
    gaps: list[float] = []
    with started(cli, name, argv):
        watch = StepWatcher(cli.home / "run" / f"{name}.progress.json")
        watch.wait_steps(20)
        for node in moves(reps):
            subprocess.run(["sync"], check=True)  # noqa: S607
            t0 = time.time()
            cli("migrate", f"local:{name}", "--to", node, "--yes")
            t1 = time.time()
            watch.wait_steps(20)
            gaps.append(watch.longest_gap(t0, t1) * 1000)
        watch.stop()
    return {"gap_ms": statistics.median(gaps), "runs": [round(g, 1) for g in gaps]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated program names")
    ap.add_argument("--slow-retry-ms", type=float, default=250.0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "real_software.json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (CRIU's root mode)")
    work = Path(tempfile.mkdtemp(prefix="clawpoint-bench-realsw-"))
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
        "reps": args.reps,
        "slow_retry_ms": args.slow_retry_ms,
        "programs": {},
    }
    try:
        wanted = {p for p in args.only.split(",") if p}
        for name, prog in programs(work).items():
            if wanted and name not in wanted:
                continue
            # A home of its own per program: the guardrails allow so many disruptive actions
            # an hour in one (30 by default), and a run makes 2 x --reps per program.
            home = work / f"home-{name}"
            home.mkdir()
            cli = Cli(home)
            got = bench_program(cli, prog, args.reps, args.slow_retry_ms / 1000)
            ref = bench_counter(cli, max(1, round(got["size_mib"])), args.reps)
            got["counter_gap_ms"] = ref["gap_ms"]
            got["counter_runs"] = ref["runs"]
            got["ratio"] = round(got["gap_ms"] / ref["gap_ms"], 2) if ref["gap_ms"] else None
            results["programs"][name] = got
            print(
                f"{name:8} {got['size_mib']:7.1f} MiB  gap {got['gap_ms']:7.1f} ms  "
                f"counter {ref['gap_ms']:7.1f} ms  ratio {got['ratio']}  "
                f"failed {got['failed']} (retried ok {got['retried']}; retrying after "
                f"{args.slow_retry_ms:.0f} ms: {got['slow_retry_failed']}) in {args.reps} moves",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
