"""Benchmark: the time budget of a spot notice, from the notice to the workload safe elsewhere.

Run: ``.venv/bin/python bench/notice_to_safe.py [--mb 200] [--reps 3] [--skip-openclaw]``
(root for CRIU; without it the cooperative engine is used and the figures say so).

Each repetition uses a fresh state directory (two local nodes: node-a on demand, node-b spot
and "this host"), a fake AWS IMDSv2 endpoint on 127.0.0.1 (``tests/signals/fakes.py``: token
PUT, then ``spot/instance-action`` 404 until marked, exactly as documented), and the
self-checking counter (``core.workloads.counter``) holding ``--mb`` MiB on node-b, started
through the installed ``clawpoint run``. Everything is driven through the installed
``clawpoint`` command, as an operator runs it.

Measured: from the moment the endpoint starts answering with the notice (t0, wall clock) to
the first progress record written by the restored workload on node-a (its own timestamp in
``NAME.progress.json``: the step it wrote is verified by the counter itself, which checks
every page of its state each step and exits on a mismatch). "State intact" is checked too:
the first step after the move is not below the step seen at the notice (no restart from
zero) and the record says ``verified``. The notice arrives at a random phase of the watch
poll, so the figures include the wait for the next pass (0-5 s).

Scenarios:

- ``grant``: a standing approval (``migrate`` scoped ``trigger=spot-interruption``) and
  ``clawpoint watch --every 5s``; no person, no agent. Target: <= 15 s at 200 MiB.
- ``person``: no grant; watch asks, a scripted person polls ``clawpoint approvals list
  --json`` every second and approves with ``clawpoint approvals approve ID``; watch runs the
  approved plan on its next pass.
- ``openclaw``: no grant; a real OpenClaw gateway on loopback runs the shipped trigger script
  (``scripts/openclaw-trigger.js``, every 30 s, OpenClaw's minimum for condition triggers).
  No model is available here, so a scripted stand-in plays the agent: it watches the
  gateway's run history for the wake-up, then uses the real MCP server (``clawpoint serve``
  over stdio): ``list_approvals``, ``migrate_workload`` (asks a person), and after the
  scripted person approved, ``execute_approved``. Its tool calls are recorded.
- ``openclaw-stream``: the same agent, woken by the stream job instead (the gateway runs
  ``clawpoint watch --every 5s`` and fires on ``^(attention|error): `` lines).
- ``slurm``: as ``grant``, with the counter submitted by ``clawpoint slurm submit`` as a
  wrapped, requeueable sbatch job on the loopback cluster (``scripts/slurm-cluster.sh``), on a
  node no other job runs on (a notice for a node makes watch move every wrapped job on it);
  the notice names that node (``[signals] node = "slurm:NODE"``). Safe: the requeued job
  running on another node writes a verified step, restored from the checkpoint (not below
  the step at the notice), its log without "STATE CHECK FAILED", and counting on. Target:
  <= 30 s. Only the benchmark's own job is touched; it is cancelled at the end.
- ``quiet``: the agent's wake-ups over a simulated 30-minute quiet period. 360 watch passes
  (30 min at 5 s) are run back to back by one ``clawpoint watch --every 1s`` process (the
  pass is the same whatever the interval; only the spacing is compressed) with the trigger
  script's rule applied to each pass's JSON, then one notice: wake-ups must be 0, then 1.

The benchmark measures; it asserts nothing (tests must not assert timings). JSON results:
``bench/results/notice_to_safe.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.backends.slurm.sbatch import job_homes  # noqa: E402
from tests.signals.fakes import FakeAwsImds  # noqa: E402

CLAWPOINT = Path(sys.executable).parent / "clawpoint"
NODE_BIN = Path(os.environ.get("CLAWPOINT_NODE_BIN", "/opt/clawpoint-node/bin"))
POLL = "5s"
WAKE_LEVELS = ("attention", "error")


def log(msg: str) -> None:
    print(f"[notice_to_safe] {msg}", file=sys.stderr, flush=True)


def wait_until(what: str, check: Callable[[], Any], timeout: float, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def engine() -> str:
    return "criu" if os.geteuid() == 0 and shutil.which("criu") else "cooperative"


def clawpoint_cli(home: Path, env: dict[str, str], *args: str) -> Any:
    """Run the installed command; its JSON (with ``--json``) or text; RuntimeError if it fails."""
    proc = subprocess.run(
        [str(CLAWPOINT), *args], env=env, capture_output=True, text=True, timeout=600, cwd=home,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(
            f"clawpoint {' '.join(args)}: {proc.returncode}\n{proc.stdout}{proc.stderr}"
        )
    return json.loads(proc.stdout) if "--json" in args else proc.stdout


class Site:
    """One state directory, its fake metadata endpoint and the workload on node-b."""

    def __init__(self, root: Path, imds: FakeAwsImds, *, backend: str = "local") -> None:
        self.home = root / "home"
        self.home.mkdir(parents=True)
        self.imds = imds
        self.backend = backend
        self.procs: list[subprocess.Popen[bytes]] = []
        node = "local:node-b"
        (self.home / "config.toml").write_text(
            f"""
[[local.nodes]]
name = "node-a"
price_per_hour = 3.06
spot = false
[[local.nodes]]
name = "node-b"
price_per_hour = 0.92
spot = true
[checkpoint]
default_engine = "{engine()}"
criu_path = "{shutil.which("criu") or "criu"}"
[signals]
node = "{node}"
[signals.aws]
enabled = true
base_url = "{imds.url}"
"""
        )

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "CLAWPOINT_HOME": str(self.home), "LANG": "C.UTF-8"}

    def cli(self, *args: str) -> Any:
        return clawpoint_cli(self.home, self.env(), *args)

    def spawn(self, *args: str, stdout: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(
            [str(CLAWPOINT), *args], env=self.env(), stdout=stdout,
            stderr=subprocess.DEVNULL, cwd=self.home, start_new_session=True,
        )  # fmt: skip
        self.procs.append(p)
        return p

    def start_counter(self, mb: int) -> None:
        self.cli(
            "run", "--name", "counter", "--node", "node-b", "-d", "--json", "--",
            sys.executable, "-m", "core.workloads.counter", "--state-mb", str(mb),
            "--step-seconds", "0.05",
        )  # fmt: skip
        wait_until("the counter's first steps", lambda: (self.progress() or {}).get("step", 0) > 10,
                   timeout=120)  # fmt: skip

    def progress(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads((self.home / "run" / "counter.progress.json").read_text()))
        except (OSError, ValueError):
            return None

    def pids(self) -> dict[str, Any]:
        try:
            return dict(json.loads((self.home / "run" / "counter.pids.json").read_text()))
        except (OSError, ValueError):
            return {}

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
        data = self.pids()
        for key in ("payload_pid", "wrapper_pid"):
            pid = data.get(key)
            if isinstance(pid, int) and pid > 1:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def measure_move(site: Site, notify: Callable[[], None], timeout: float = 300) -> dict[str, Any]:
    """Mark the notice; wait until the restored counter reports a verified step on node-a."""
    before = site.pids().get("payload_pid")
    step_at_notice = (site.progress() or {}).get("step", 0)
    t0 = time.time()
    site.imds.mark_instance_action("terminate", in_seconds=120)
    notify()

    def restored() -> dict[str, Any] | None:
        pids = site.pids()
        if pids.get("payload_pid") in (None, before) or not pids.get("restored_from"):
            return None
        prog = site.progress()
        if prog is None or prog.get("ts", 0) <= t0 or not prog.get("verified"):
            return None
        return prog

    prog = wait_until("the workload to run on node-a", restored, timeout=timeout, every=0.05)
    safe_s = float(prog["ts"]) - t0
    where = [w for w in site.cli("workloads", "--json") if w["name"] == "counter"]
    return {
        "notice_to_safe_s": round(safe_s, 3),
        "node_after": where[0]["node"] if where else None,
        "state_after": where[0]["state"] if where else None,
        "step_at_notice": step_at_notice,
        "first_step_after": prog["step"],
        "state_intact": bool(prog.get("verified")) and prog["step"] >= step_at_notice,
    }


def scenario_grant(root: Path, mb: int) -> dict[str, Any]:
    with FakeAwsImds() as imds:
        site = Site(root, imds)
        try:
            site.start_counter(mb)
            site.cli("approvals", "grant", "--action", "migrate", "--scope",
                     "trigger=spot-interruption", "--json")  # fmt: skip
            site.spawn("watch", "--every", POLL)
            time.sleep(1 + random.uniform(0, 5))  # the notice lands at a random poll phase
            return measure_move(site, lambda: None)
        finally:
            site.close()


def scripted_person(site: Site, stop: threading.Event, seen: list[dict[str, Any]]) -> None:
    """A person at a terminal: checks pending approvals every second, approves each one."""
    while not stop.is_set():
        try:
            for a in site.cli("approvals", "list", "--json")["approvals"]:
                if a.get("status") == "pending":
                    site.cli("approvals", "approve", a["id"], "--any-session", "--json")
                    seen.append({"id": a["id"], "at": time.time(), "action": a.get("action")})
        except RuntimeError as exc:
            log(f"person: {exc}")
        stop.wait(1.0)


def scenario_person(root: Path, mb: int) -> dict[str, Any]:
    with FakeAwsImds() as imds:
        site = Site(root, imds)
        stop = threading.Event()
        approved: list[dict[str, Any]] = []
        person = threading.Thread(target=scripted_person, args=(site, stop, approved))
        try:
            site.start_counter(mb)
            site.spawn("watch", "--every", POLL)
            time.sleep(1 + random.uniform(0, 5))
            t0 = time.time()
            row = measure_move(site, person.start)
            row["approved_after_s"] = [round(a["at"] - t0, 3) for a in approved]
            return row
        finally:
            stop.set()
            if person.is_alive():
                person.join()
            site.close()


# -- OpenClaw ---------------------------------------------------------------------------


class Gateway:
    """A real OpenClaw gateway on 127.0.0.1 with token auth, in a throwaway HOME."""

    def __init__(self, root: Path) -> None:
        import secrets
        import socket

        self.home = root / "openclaw-home"
        self.home.mkdir(parents=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.token = secrets.token_urlsafe(16)
        self.env = {"PATH": f"{NODE_BIN}:/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8"}
        subprocess.run([str(NODE_BIN / "openclaw"), "config", "set", "gateway.mode", "local"],
                       env=self.env, capture_output=True, timeout=120, check=True)  # fmt: skip
        self.proc = subprocess.Popen(
            [str(NODE_BIN / "openclaw"), "gateway", "run", "--port", str(self.port), "--bind",
             "loopback", "--auth", "token", "--token", self.token],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        wait_until("the gateway", lambda: self.call("cron", "status") is not None, 180, 2)

    def call(self, *args: str) -> Any:
        proc = subprocess.run(
            [str(NODE_BIN / "openclaw"), *args, "--json", "--port", str(self.port), "--token",
             self.token], env=self.env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)


def _tool_json(result: Any) -> Any:
    if getattr(result, "structured_content", None):
        return result.structured_content
    texts = [c.text for c in result.content if getattr(c, "text", None)]
    try:
        return json.loads(texts[0]) if texts else None
    except ValueError:
        return texts


async def stand_in_agent(
    site: Site, calls: list[dict[str, Any]], person: Callable[[str], None]
) -> None:
    """What an agent following the clawpoint-ops skill does when woken, through real MCP."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=str(CLAWPOINT), args=["serve"], env=site.env())

    async with Client(params) as client:

        async def call(name: str, args: dict[str, Any]) -> Any:
            began = time.time()
            res = await client.call_tool(name, args)
            out = _tool_json(res)
            calls.append({"tool": name, "args": args, "at": began, "s": round(time.time() - began, 3),
                          "error": bool(res.is_error),
                          "status": out.get("status") if isinstance(out, dict) else None})  # fmt: skip
            return out

        await call("list_approvals", {"status": "pending"})
        out = await call("migrate_workload", {"workload": "local:counter", "to": "node-a",
                                              "reason": "spot notice on node-b (woken by watch)"})  # fmt: skip
        if isinstance(out, dict) and out.get("status") == "approval_required":
            approval_id = out["approval"]["id"]
            person(approval_id)  # the agent tells the person; the person approves at the CLI
            await call("execute_approved", {"approval_id": approval_id})


def scenario_openclaw(root: Path, mb: int, kind: str = "trigger") -> dict[str, Any]:
    import anyio

    if not (NODE_BIN / "openclaw").exists():
        return {"skipped": f"openclaw not in {NODE_BIN} (scripts/install-node-tools.sh)"}
    gw = Gateway(root)
    with FakeAwsImds() as imds:
        site = Site(root, imds)
        calls: list[dict[str, Any]] = []
        try:
            site.start_counter(mb)
            script = root / "clawpoint-trigger.js"
            script.write_text((ROOT / "scripts" / "openclaw-trigger.js").read_text()
                              .replace("@CLAWPOINT@", str(CLAWPOINT))
                              .replace("@CLAWPOINT_HOME@", str(site.home)))  # fmt: skip
            message = ("clawpoint watch found something that needs you (below). "
                       "If nothing needs doing, reply NO_REPLY.")  # fmt: skip
            if kind == "trigger":
                schedule = ["--every", "30s", "--trigger-script", str(script)]
            else:
                argv = ["/usr/bin/env", f"CLAWPOINT_HOME={site.home}", str(CLAWPOINT), "watch",
                        "--every", POLL]  # fmt: skip
                schedule = ["--stream-command", json.dumps(argv), "--stream-mode", "match",
                            "--stream-match", "^(attention|error): ", "--stream-batch-ms", "1000"]  # fmt: skip
            job = gw.call("cron", "add", "--name", f"clawpoint-{kind}", *schedule, "--message",
                          message, "--session", "isolated", "--no-deliver")["id"]  # fmt: skip

            def evals() -> int:
                got = gw.call("cron", "get", job) or {}
                return int(got.get("state", {}).get("triggerEvalCount", 0))

            if kind == "trigger":
                wait_until("a first quiet evaluation", lambda: evals() >= 1, 150, 1)
            else:
                time.sleep(35)  # the source runs; past the gateway's 30 s floor between fires
            woke_at: list[float] = []

            def person(approval_id: str) -> None:
                site.cli("approvals", "approve", approval_id, "--any-session", "--json")

            def notified() -> None:
                def woken() -> bool:
                    runs = (gw.call("cron", "runs", job) or {}).get("entries", [])
                    return bool(runs)

                wait_until("the agent's wake-up", woken, 150, 0.2)
                woke_at.append(time.time())
                anyio.run(stand_in_agent, site, calls, person)

            t0 = time.time()
            row = measure_move(site, notified, timeout=400)
            row["woken_after_s"] = round(woke_at[0] - t0, 3) if woke_at else None
            row["tool_calls"] = [dict(c, at=round(c["at"] - t0, 3)) for c in calls]
            return row
        finally:
            site.close()
            gw.close()


# -- Slurm ------------------------------------------------------------------------------


SLURM_DIR = Path("/var/lib/clawpoint-slurm")  # scripts/slurm-cluster.sh


def slurm_env() -> dict[str, str]:
    """The loopback cluster's client environment (``scripts/slurm-cluster.sh env``)."""
    env: dict[str, str] = {}
    try:
        for line in (SLURM_DIR / "env").read_text().splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            if key and value:
                env[key.strip()] = value.strip()
    except OSError:
        pass
    return env


def slurm_reason() -> str | None:
    """Why the Slurm scenario cannot run here (None when it can)."""
    if not shutil.which("sinfo"):
        return "sinfo not found: the loopback Slurm cluster is not installed (make deps)"
    if not slurm_env():
        return f"{SLURM_DIR / 'env'} missing: the loopback cluster is not set up (make slurm-up)"
    proc = subprocess.run(["sinfo", "-h", "-o", "%N %t"], capture_output=True, text=True,
                          timeout=30, check=False, env={**os.environ, **slurm_env()})  # fmt: skip
    if proc.returncode != 0:
        return f"sinfo failed: {proc.stderr.strip()[:200]} (make slurm-up)"
    if engine() != "criu":
        return "the Slurm wrapper needs CRIU (root and criu on PATH)"
    return None


class SlurmSite:
    """The counter as a wrapped sbatch job on the loopback cluster, and a clawpoint home
    pointed at that cluster whose notice source names the job's node.

    Only this object's own job is touched (and cancelled on close). A notice for a node
    makes watch move every wrapped job on it, so the job is placed on a node where no other
    job runs, and the run is refused if another job lands there meanwhile."""

    def __init__(self, root: Path, imds: FakeAwsImds, mb: int) -> None:
        self.home = root / "home"
        self.home.mkdir(parents=True)
        self.imds = imds
        self.lineage = f"bench-n2s-{os.getpid()}-{root.name}"
        self.log = SLURM_DIR / "log" / f"{self.lineage}.out"
        self.job: str | None = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.write_config(None)
        busy = {n for n in self.sq("%N").split() if n}
        nodes = sorted(set(self.sh("sinfo", "-h", "-N", "-o", "%N").split()))
        free = [n for n in nodes if n not in busy]
        if len(free) < 2:
            raise RuntimeError(f"need two idle nodes (busy: {sorted(busy)}; other jobs run)")
        out = self.cli("slurm", "submit", "--name", self.lineage, "--nodelist", free[0],
                       "--output", str(self.log), "--chdir", str(ROOT), "--json", "--",
                       sys.executable, "-m", "core.workloads.counter", "--state-mb", str(mb),
                       "--step-seconds", "0.05")  # fmt: skip
        self.job = str(out["workload"]).removeprefix("slurm:")
        self.node = free[0]
        wait_until("the job to run", lambda: self.where() == ("RUNNING", self.node), 120, 0.5)
        wait_until("the counter's first steps", lambda: (self.progress() or {}).get("step", 0) > 10,
                   timeout=180)  # fmt: skip
        # Pinned only to start on a free node: migrate clears NodeList (NodeList= plus
        # ExcNodeList=SOURCE). Now the notice source can name the node the job runs on.
        self.write_config(self.node)

    def write_config(self, node: str | None) -> None:
        signals = (
            f'[signals]\nnode = "slurm:{node}"\n[signals.aws]\nenabled = true\n'
            f'base_url = "{self.imds.url}"\n'
            if node
            else ""
        )
        (self.home / "config.toml").write_text(
            "[local]\nenabled = false\n[slurm]\nenabled = true\n" + signals
        )

    def env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CLAWPOINT_HOME": str(self.home),
                "LANG": "C.UTF-8", **slurm_env()}  # fmt: skip

    def sh(self, *argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True,
                              env=self.env()).stdout  # fmt: skip

    def sq(self, fmt: str, job: str | None = None) -> str:
        return self.sh("squeue", "-h", *(["-j", job] if job else ["-t", "RUNNING"]), "-o", fmt)

    def where(self) -> tuple[str, str] | None:
        assert self.job
        state, _, node = self.sq("%T|%N", self.job).strip().partition("|")
        return (state, node) if state else None

    def cli(self, *args: str) -> Any:
        return clawpoint_cli(self.home, self.env(), *args)

    def spawn_watch(self) -> None:
        self.watch_log = self.home / "watch.log"
        with self.watch_log.open("wb") as out:
            self.procs.append(subprocess.Popen(
                [str(CLAWPOINT), "watch", "--every", POLL], env=self.env(), stdout=out,
                stderr=subprocess.STDOUT, cwd=self.home, start_new_session=True,
            ))  # fmt: skip

    def _run(self, suffix: str) -> Path:
        homes = job_homes(self.job)
        return (homes[-1] if homes else Path("/nonexistent")) / "run" / f"{self.lineage}.{suffix}"

    def progress(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self._run("progress.json").read_text()))
        except (OSError, ValueError):
            return None

    def pids(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self._run("pids.json").read_text()))
        except (OSError, ValueError):
            return {}

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
        if self.job:
            subprocess.run(["scancel", self.job], env=self.env(), capture_output=True,
                           timeout=60, check=False)  # fmt: skip
            try:  # the job's wrapper may still be writing into its lineage while it ends
                wait_until("the job to end", lambda: self.where() is None, 60, 0.5)
            except TimeoutError:
                log(f"job {self.job} still listed; its checkpoints may be left behind")
        shutil.rmtree(SLURM_DIR / "checkpoints" / "root" / self.lineage, ignore_errors=True)


def scenario_slurm(root: Path, mb: int) -> dict[str, Any]:
    """As ``grant``, with the counter as a wrapped sbatch job on the loopback cluster: the
    notice names the job's node; safe = the first verified step the restored job writes,
    running on another node (its progress file is per job id, so per job, not per node)."""
    with FakeAwsImds() as imds:
        site = SlurmSite(root, imds, mb)
        try:
            site.cli("approvals", "grant", "--action", "migrate", "--scope",
                     "trigger=spot-interruption", "--json")  # fmt: skip
            others = [j for j in site.sq("%i|%N").split() if j.split("|")[1] == site.node
                      and j.split("|")[0] != site.job]  # fmt: skip
            if others:
                raise RuntimeError(
                    f"other jobs on {site.node} ({others}): a notice would move them"
                )
            site.spawn_watch()
            time.sleep(1 + random.uniform(0, 5))  # the notice lands at a random poll phase
            before = site.pids().get("payload_pid")
            step_at_notice = (site.progress() or {}).get("step", 0)
            t0 = time.time()
            imds.mark_instance_action("terminate", in_seconds=120)

            def restored() -> dict[str, Any] | None:
                pids = site.pids()
                if pids.get("payload_pid") in (None, before) or not pids.get("restored_from"):
                    return None
                prog = site.progress()
                if prog is None or prog.get("ts", 0) <= t0 or not prog.get("verified"):
                    return None
                return prog

            try:
                prog = wait_until("the job to run on another node", restored, 120, 0.05)
            except TimeoutError as exc:
                seen = site.watch_log.read_text(errors="replace")[-1500:]
                raise TimeoutError(
                    f"{exc}; job {site.job} {site.where()}; watch said: {seen}"
                ) from None
            safe_s = float(prog["ts"]) - t0
            where = site.where()
            step_after = int(prog["step"])
            # progress continues from there (the counter checks every page each step)
            later = wait_until(
                "more steps",
                lambda: (p := site.progress() or {}).get("step", 0) >= step_after + 20 and p,
                120,
                0.2,
            )
            log_text = site.log.read_text(errors="replace") if site.log.exists() else ""
            return {
                "notice_to_safe_s": round(safe_s, 3),
                "job": site.job,
                "node_before": site.node,
                "node_after": where[1] if where else None,
                "state_after": where[0] if where else None,
                "step_at_notice": step_at_notice,
                "first_step_after": step_after,
                "step_later": later["step"],
                "restored_from": site.pids().get("restored_from"),
                "check_failed": "STATE CHECK FAILED" in log_text,
                "state_intact": bool(prog.get("verified"))
                and step_after >= step_at_notice
                and "STATE CHECK FAILED" not in log_text,
            }
        finally:
            site.close()


# -- quiet period -----------------------------------------------------------------------


def scenario_quiet(root: Path, passes: int) -> dict[str, Any]:
    """Wake-ups (the trigger script's rule) over ``passes`` watch passes, then one notice."""
    with FakeAwsImds() as imds:
        site = Site(root, imds)
        try:
            site.start_counter(1)
            watch = site.spawn("watch", "--every", "1s", "--json", stdout=subprocess.PIPE)
            assert watch.stdout is not None
            quiet_wakes = notice_wakes = seen = 0
            marked = False
            after_notice = 0
            for raw in watch.stdout:
                report = json.loads(raw)
                wake = any(f.get("new") and f.get("level") in WAKE_LEVELS
                           for f in report.get("findings", []))  # fmt: skip
                seen += 1
                if not marked:
                    quiet_wakes += wake
                    if seen >= passes:
                        imds.mark_instance_action("terminate", in_seconds=120)
                        marked = True
                else:
                    notice_wakes += wake
                    after_notice += 1
                    if after_notice >= 10:
                        break
            return {
                "quiet_passes": passes,
                "simulated_minutes": passes * 5 / 60,
                "wakeups_quiet": quiet_wakes,
                "passes_after_notice": after_notice,
                "wakeups_after_notice": notice_wakes,
            }
        finally:
            site.close()


def machine() -> dict[str, Any]:
    def first(path: str, prefix: str) -> str:
        try:
            for line in Path(path).read_text().splitlines():
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return "?"

    return {
        "cpu": first("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "memory": first("/proc/meminfo", "MemTotal"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "engine": engine(),
    }


def moved(row: dict[str, Any]) -> bool:
    """The workload ended up on the other node (Slurm: any node but the one noticed)."""
    if "node_before" in row:
        return row.get("node_after") not in (None, row["node_before"])
    return row.get("node_after") == "node-a"


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["notice_to_safe_s"] for r in rows if "notice_to_safe_s" in r]
    if not times:
        return {}
    return {
        "median_s": round(statistics.median(times), 2),
        "max_s": round(max(times), 2),
        "min_s": round(min(times), 2),
        "all_intact": all(r.get("state_intact") and moved(r) for r in rows),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quiet-passes", type=int, default=360)
    ap.add_argument(
        "--only", nargs="*",
        default=["grant", "person", "openclaw", "openclaw-stream", "slurm", "quiet"],
    )  # fmt: skip
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "notice_to_safe.json")
    args = ap.parse_args()
    if not CLAWPOINT.exists():
        log(f"{CLAWPOINT} missing: make venv")
        return 1
    results: dict[str, Any] = {"machine": machine(), "mb": args.mb, "poll": POLL}
    work = Path(tempfile.mkdtemp(prefix="notice-to-safe-"))
    try:
        runners: dict[str, Callable[[Path], dict[str, Any]]] = {
            "grant": lambda d: scenario_grant(d, args.mb),
            "person": lambda d: scenario_person(d, args.mb),
            "openclaw": lambda d: scenario_openclaw(d, args.mb),
            "openclaw-stream": lambda d: scenario_openclaw(d, args.mb, "stream"),
        }
        for name in ("grant", "person", "openclaw", "openclaw-stream"):
            if name not in args.only:
                continue
            reps = 1 if name.startswith("openclaw") else args.reps
            rows = []
            for i in range(reps):
                log(f"{name} {i + 1}/{reps}")
                try:
                    rows.append(runners[name](work / f"{name}-{i}"))
                except (RuntimeError, TimeoutError) as exc:
                    rows.append({"error": str(exc)[:2000]})
                log(f"  {rows[-1]}")
            results[name] = {"runs": rows, **summary(rows)}
        if "slurm" in args.only:
            reason = slurm_reason()
            if reason:
                results["slurm"] = {"skipped": reason}
                log(f"slurm: {reason}")
            else:
                rows = []
                for i in range(args.reps):
                    log(f"slurm {i + 1}/{args.reps}")
                    try:
                        rows.append(scenario_slurm(work / f"slurm-{i}", args.mb))
                    except (RuntimeError, TimeoutError, subprocess.CalledProcessError) as exc:
                        rows.append({"error": str(exc)[:2000]})
                    log(f"  {rows[-1]}")
                results["slurm"] = {"runs": rows, **summary(rows)}
        if "quiet" in args.only:
            log(f"quiet: {args.quiet_passes} passes")
            results["quiet"] = scenario_quiet(work / "quiet", args.quiet_passes)
            log(f"  {results['quiet']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    print(
        json.dumps({k: v for k, v in results.items() if k != "machine"}, indent=1, default=str)[
            :6000
        ]
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
