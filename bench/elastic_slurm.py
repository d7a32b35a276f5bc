"""Benchmark: an elastic Slurm pool against an always-on one, for the same burst of jobs.

The loopback cluster's partition ``elastic`` (n4, n5: CLOUD nodes under Slurm's power
saving, ``scripts/slurm-cluster.sh``) gets a burst of 20 jobs at once: 18 short plain jobs
(``sleep``) and 2 self-verifying counters under clawpoint's wrapper that run on. Two runs:

- **always on**: both nodes powered up before the burst and kept up;
- **elastic**: both powered down before the burst; Slurm powers them up for the pending
  jobs (its ResumeProgram); once the queue has drained, clawpoint shrinks the pool to the
  nodes the running jobs need (``scale_pool``, as a person would approve it): the node that
  loses least is drained, its counter checkpointed and restarted on the node that stays,
  and the node powered down. At the end both counters are checked: still counting from at
  least their checkpointed step, no "STATE CHECK FAILED".

Each run lasts the burst plus a quiet tail (``--tail-s``, default 60 s) in which only the
counters run. Reported: node-hours of each run (the seconds each node was not powered down,
sampled every 0.5 s), the saving, and the queue wait of the 20 jobs (submit to start) in
each run, so the wait the powered-down start adds. Needs root and the cluster
(``scripts/slurm-cluster.sh up``) and CRIU (it brings the cluster up if it is not); nothing else may use the cluster meanwhile.

Usage: ``.venv/bin/python bench/elastic_slurm.py [--tail-s 60] [--no-docs]``. JSON:
``bench/results/elastic_slurm.json``; the "Elastic Slurm pool" section of
``docs/benchmarks.md`` is rewritten (only that section).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs_section import write_section  # noqa: E402
from core.backends.slurm import SbatchSpec, SlurmBackend, submit  # noqa: E402
from core.backends.slurm.config import SlurmConfig  # noqa: E402
from core.backends.slurm.sbatch import job_homes  # noqa: E402
from core.config import load_settings  # noqa: E402
from core.model import Action, Principal, PrincipalKind  # noqa: E402
from core.service.facade import bootstrap  # noqa: E402

CLUSTER = Path(os.environ.get("CLAWPOINT_SLURM_DIR", "/var/lib/clawpoint-slurm"))
NODES = ("n4", "n5")
PERSON = Principal(id="bench", kind=PrincipalKind.PERSON)
SHORT_JOBS, SHORT_S, COUNTERS = 18, 4, 2


def slurm_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for line in (CLUSTER / "env").read_text().splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        if key:
            env[key] = value
    return env


def ensure_cluster() -> None:
    """The loopback cluster up (started when it is not) and its environment in ours."""
    script = str(ROOT / "scripts" / "slurm-cluster.sh")
    if subprocess.run([script, "status"], capture_output=True, check=False).returncode != 0:
        subprocess.run([script, "up"], capture_output=True, check=True, timeout=600)
    os.environ.update(slurm_env())


def sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60).stdout


class UpTime(threading.Thread):
    """Samples every 0.5 s which elastic nodes are not powered down; seconds up per node."""

    def __init__(self, backend: SlurmBackend) -> None:
        super().__init__(daemon=True)
        self.backend, self.up = backend, dict.fromkeys(NODES, 0.0)
        self.stop = threading.Event()

    def run(self) -> None:
        last = time.monotonic()
        while not self.stop.wait(0.5):
            now = time.monotonic()
            for node in NODES:
                try:
                    if not self.backend.power_state(node).powered_down:
                        self.up[node] += now - last
                except Exception:  # a sample the controller did not answer: counted up
                    self.up[node] += now - last
            last = now


def power(backend: SlurmBackend, *, up: bool) -> None:
    """Every elastic node powered up (answering), or down, before a run starts."""
    for node in NODES:
        state = backend.power_state(node)
        if up and state.released:
            sh("scontrol", "update", f"nodename={node}", "state=POWER_UP")
        if not up and not state.released:
            sh("scontrol", "update", f"nodename={node}", "state=POWER_DOWN")
    for node in NODES:
        want = (lambda n=node: backend.power_state(n).answers) if up else (
            lambda n=node: backend.power_state(n).powered_down)  # fmt: skip
        backend.wait_until(f"{node} powered {'up' if up else 'down'}", 120, want)


def step_of(job: str) -> int:
    for path in (p for home in job_homes(job) for p in home.glob("run/*.progress.json")):
        try:
            return int(json.loads(path.read_text())["step"])
        except (OSError, ValueError, KeyError):
            pass
    return -1


def burst(backend: SlurmBackend, tag: str) -> tuple[list[str], list[str], float]:
    """Submit the 20 jobs at once; (counters, short jobs, submit time)."""
    t0 = time.time()
    counters = []
    for i in range(COUNTERS):
        lineage = f"bench-{tag}-{i}-{os.getpid()}"
        spec = SbatchSpec(
            lineage=lineage, partition="elastic",
            command=[sys.executable, "-m", "core.workloads.counter", "--state-mb", "32"],
            output=str(CLUSTER / "log" / f"{lineage}.out"), workdir=str(ROOT),
        )  # fmt: skip
        counters.append(submit(spec, backend.cfg, backend.transport).job_id)
    short = [
        sh("sbatch", "--parsable", "-p", "elastic", "-o", "/dev/null", f"--job-name=bench-{tag}",
           "--wrap", f"sleep {SHORT_S}").strip()
        for _ in range(SHORT_JOBS)
    ]  # fmt: skip
    return counters, short, t0


def starts(backend: SlurmBackend, jobs: list[str], until: float) -> dict[str, float]:
    """Each job's start time (epoch s), polled until every one started or ``until``."""
    seen: dict[str, float] = {}
    while len(seen) < len(jobs) and time.time() < until:
        for raw in backend.raw_jobs():
            jid = str(raw.get("job_id"))
            started = raw.get("start_time")
            start = started.get("number") if isinstance(started, dict) else started
            state = raw.get("job_state")
            state = state[0] if isinstance(state, list) else state
            if jid in jobs and jid not in seen and state in ("RUNNING", "COMPLETED") and start:
                seen[jid] = float(start)
        time.sleep(0.25)
    return seen


def one_run(service: Any, backend: SlurmBackend, *, elastic: bool, tail_s: float) -> dict[str, Any]:
    tag = "elastic" if elastic else "always-on"
    power(backend, up=not elastic)
    clock = UpTime(backend)
    clock.start()
    counters, short, t0 = burst(backend, tag)
    began = starts(backend, counters + short, until=time.time() + 300)
    # The queue has drained once every job started; the short ones end SHORT_S later.
    while any(w.state.value in ("pending", "running") for j in short
              if (w := backend.get_workload(j))):  # fmt: skip
        time.sleep(0.5)
    drained = time.time()
    shrink: dict[str, Any] = {}
    if elastic:  # clawpoint's decision: keep only the nodes the running jobs need
        cpus = len(counters)  # one CPU each; a loopback node has 2
        need = max(1, math.ceil(cpus / 2))
        pool = next(p for p in service.pools("slurm") if p.name == "elastic")
        if pool.size > need:
            done = service.act(Action.SCALE_POOL, "slurm:elastic", {"size": need},
                               principal=PERSON, confirmed=True, reason="queue drained")  # fmt: skip
            shrink = {"status": done.status, "summary": done.plan.summary if done.plan else "",
                      "s": round(time.time() - drained, 1)}  # fmt: skip
    time.sleep(max(0.0, drained + tail_s - time.time()))
    resumed: dict[str, Any] = {}
    before = {j: step_of(j) for j in counters}
    if elastic:  # the quiet time is over: every node drained with save and powered down
        t = time.time()
        done = service.act(Action.SCALE_POOL, "slurm:elastic", {"size": 0}, principal=PERSON,
                           confirmed=True, reason="quiet: save the work, power down")  # fmt: skip
        shrink["to_zero"] = {"status": done.status, "s": round(time.time() - t, 1),
                             "summary": done.plan.summary if done.plan else ""}  # fmt: skip
    clock.stop.set()
    clock.join()
    ended = time.time()
    if elastic:  # outside the window: bring the saved counters back and let them check
        service.act(Action.SCALE_POOL, "slurm:elastic", {"size": 1}, principal=PERSON,
                    confirmed=True)  # fmt: skip
        for j in counters:
            out = service.act(Action.RESUME, f"slurm:{j}", {}, principal=PERSON, confirmed=True)
            resumed[j] = out.status
        for j in counters:
            floor = before[j] + 20

            def counts_on(job: str = j, above: int = floor) -> bool:
                return step_of(job) > above

            backend.wait_until(f"{j} to count on", 120, counts_on)
    intact = all(step_of(j) > 0 for j in counters) and not any(
        "STATE CHECK FAILED" in p.read_text(errors="replace")
        for p in CLUSTER.glob(f"log/bench-{tag}-*-{os.getpid()}.out")
    )
    for j in counters + short:
        sh("scancel", j)
    waits = [began[j] - t0 for j in counters + short if j in began]
    return {
        "run": tag,
        "seconds": round(ended - t0, 1),
        "node_seconds": {n: round(s, 1) for n, s in clock.up.items()},
        "node_hours": round(sum(clock.up.values()) / 3600, 4),
        "jobs_started": len(began),
        "wait_mean_s": round(statistics.mean(waits), 1) if waits else None,
        "wait_max_s": round(max(waits), 1) if waits else None,
        "shrink": shrink,
        "resumed": resumed,
        "counters_intact": intact,
    }


def markdown(runs: list[dict[str, Any]], tail_s: float) -> str:
    on, el = runs
    # The same window for both: an always-on pool keeps every node up however long it is.
    always = len(NODES) * el["seconds"]
    used = el["node_hours"] * 3600
    saved = 1 - used / always if always else 0.0
    wait_mean = el["wait_mean_s"] - on["wait_mean_s"]
    wait_max = el["wait_max_s"] - on["wait_max_s"]
    rows = "\n".join(
        f"| {r['run']} | {r['seconds']} | {r['node_hours'] * 3600:.0f} | "
        f"{r['wait_mean_s']} / {r['wait_max_s']} | {r['jobs_started']}/20 | "
        f"{r['shrink'].get('s', '-')} / {r['shrink'].get('to_zero', {}).get('s', '-')} | "
        f"{'yes' if r['counters_intact'] else 'NO'} |"
        for r in runs
    )
    return f"""## Elastic Slurm pool

`bench/elastic_slurm.py` (root, the loopback cluster: partition `elastic`, n4 and n5 under
Slurm's power saving): a burst of 20 jobs (18 x `sleep {SHORT_S}`, 2 self-verifying counters
under the wrapper), then a {tail_s:.0f} s quiet tail. Always on: both nodes up throughout.
Elastic: both powered down at the burst; Slurm powers them up for the pending jobs; once the
queue has drained clawpoint shrinks the pool to the nodes the counters need (the node that
loses least first: idle, else its counter checkpointed and restarted on the other); at the
end of the tail it shrinks it to 0: both counters checkpointed and held, both nodes powered
down. Then (outside the window) it grows it to 1 and resumes the counters: each counts on
from its checkpoint, its own state check intact.

| run | seconds | node-seconds up | queue wait mean / max (s) | started | shrinks took (s): to what the counters need / to 0 | counters intact |
|---|---|---|---|---|---|---|
{rows}

Node-seconds over the elastic run's window ({el["seconds"]} s): always on {always:.0f} (both
nodes up throughout), elastic {used:.0f}: **{saved:.0%} saved** for this burst and a
{tail_s:.0f} s tail. The queue wait the powered-down start adds: {wait_mean:+.1f} s mean,
{wait_max:+.1f} s max (Slurm's power-save pass, then the node's boot: here a `slurmd`
start). The saving grows with the quiet time: a real cluster idles for hours between
bursts, not {tail_s:.0f} s.
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tail-s", type=float, default=60.0)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root and the loopback cluster (scripts/slurm-cluster.sh up)")
        return 2
    ensure_cluster()
    home = Path(tempfile.mkdtemp(prefix="elastic-bench-"))
    (home / "config.toml").write_text(
        "[local]\nenabled = false\n[slurm]\nenabled = true\n"
        "[slurm.pools.elastic]\nprice_per_hour = 1.0\n"
    )
    os.environ["CLAWPOINT_HOME"] = str(home)
    service = bootstrap(load_settings(home))
    backend = SlurmBackend(SlurmConfig(enabled=True))
    runs = []
    try:
        for elastic in (False, True):
            runs.append(one_run(service, backend, elastic=elastic, tail_s=args.tail_s))
            print(json.dumps(runs[-1]), flush=True)
    finally:
        sh("scancel", "--name=bench-always-on")
        sh("scancel", "--name=bench-elastic")
        power(backend, up=False)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "elastic_slurm.json").write_text(json.dumps(runs, indent=2))
    md = markdown(runs, args.tail_s)
    print(md)
    if not args.no_docs:
        write_section("elastic-slurm", md)
    return 0 if all(r["counters_intact"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
