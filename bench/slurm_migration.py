"""Benchmark: how long a Slurm migrate pauses a workload, against the local handoff's pause
of the same workload in the same run.

The self-verifying counter holding ``--mb`` MiB (default 200, a step every 20 ms) runs three
times: twice as a Slurm job on the loopback cluster (``clawpoint slurm submit``'s batch
script, the wrapper inside the job), moved between n1 and n2 with ``migrate --to``, once by
the live move (a standby job started on the target first takes it over: ``docs/slurm.md``,
"Live moves") and once by the requeue (``[slurm] live_handoff = false``: checkpoint, requeue
held, release onto the other node, restore there by a new wrapper); and under the local
backend, moved between node-a and node-b with the handoff (stop-and-copy). Repetitions
alternate the three, disk synced before each.
The pause is the workload's own: the longest gap between two consecutive steps around the
move (their own timestamps, the progress file read every millisecond), less its median step
interval before the move (as ``bench/migration.py``). Issue target: Slurm <= 1.5x local.

Needs root, CRIU and the loopback cluster (brought up if it is not); nothing else may use the
cluster meanwhile. Usage: ``.venv/bin/python bench/slurm_migration.py [--reps 3] [--mb 200]
[--no-docs]``. JSON: ``bench/results/slurm_migration.json``; the "Slurm migrate" section of
``docs/benchmarks.md`` is rewritten (only that section).

Limits: one machine plays every node, so the Slurm figure has no network in it (the store is
a local directory), only what a cross-node move does beyond the local handoff: the job's
requeue and release through slurmctld, slurmd's launch of the batch script, and the new
wrapper's start and restore inside the pause.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.elastic_slurm import CLUSTER, ensure_cluster  # noqa: E402
from bench.migration import Clawpoint, Watcher, command  # noqa: E402
from bench.move_report import (  # noqa: E402
    Rows,
    alternate,
    in_home,
    pause_table,
    publish,
    step_lines,
    step_times,
)
from core.backends.slurm import SbatchSpec, SlurmBackend, submit  # noqa: E402
from core.backends.slurm.config import SlurmConfig  # noqa: E402
from core.backends.slurm.sbatch import job_homes  # noqa: E402
from core.config import load_settings  # noqa: E402
from core.model import Action, Principal, PrincipalKind  # noqa: E402
from core.service.facade import bootstrap  # noqa: E402

PERSON = Principal(id="bench", kind=PrincipalKind.PERSON)
NODES = ("n1", "n2")
TARGET_RATIO = 1.5


class SlurmCounter:
    """The counter as a Slurm job under the wrapper, moved between n1 and n2."""

    def __init__(self, home: Path, mb: int, kind: str) -> None:
        self.home = home
        self.lineage = f"bench-slurm-{kind}-{os.getpid()}"
        self.backend = SlurmBackend(SlurmConfig(enabled=True))
        spec = SbatchSpec(
            lineage=self.lineage, exclude="n3", command=command("counter", mb),
            output=str(CLUSTER / "log" / f"{self.lineage}.out"), workdir=str(ROOT),
        )  # fmt: skip
        self.job = submit(spec, self.backend.cfg, self.backend.transport).job_id
        self.backend.wait_until(
            "the job to run", 180, lambda: self.backend.get_workload(self.job).node
        )
        self.node = str(self.backend.get_workload(self.job).node)
        progress = f"run/{self.lineage}.progress.json"
        first = self.job  # a live move's new job keeps this job's home path
        self.watch = Watcher(find=lambda: [h / progress for h in job_homes(first)])
        self.watch.wait_steps(20)

    def move(self) -> dict[str, Any]:
        service = bootstrap(load_settings(self.home))
        dest = NODES[1] if self.node == NODES[0] else NODES[0]
        t0 = time.time()
        done = service.act(Action.MIGRATE, f"slurm:{self.job}", {"to": dest}, principal=PERSON,
                           confirmed=True)  # fmt: skip
        t1 = time.time()
        if done.status != "executed" or done.execution is None:
            raise RuntimeError(f"slurm migrate: {done.message}")
        steps = {s.name: s.output or {} for s in done.execution.steps}
        moved = steps.get("takeover") or steps.get("wait_running") or {}
        self.node = str(moved.get("node") or dest)
        self.job = str(moved.get("job") or self.job)  # a live move's standby job runs it now
        self.watch.wait_steps(20)
        return {**self.watch.freeze(t0, t1), "command_s": t1 - t0, "node": self.node,
                "steps_s": step_times(done.execution), "how": moved.get("how", "restart")}  # fmt: skip

    def close(self) -> None:
        self.watch.stop()
        subprocess.run(["scancel", f"--name=clawpoint-{self.lineage}"], capture_output=True,
                       check=False, timeout=60)  # fmt: skip


LABELS = {"local": "local handoff", "slurm": "Slurm live move", "requeue": "Slurm requeue"}


def markdown(rows: Rows, mb: int, machine: dict[str, Any]) -> str:
    table, ratio = pause_table(rows, LABELS)
    handed = sum(r.get("how") == "handoff" for r in rows["slurm"])
    verdict = "met" if ratio["slurm"] <= TARGET_RATIO else "not met"
    return "\n".join(
        [
            "## Slurm migrate against the local handoff",
            "",
            f"`bench/slurm_migration.py --reps {len(rows['local'])} --mb {mb}` (root; the loopback "
            "cluster): the self-verifying counter holding "
            f"{mb} MiB moved between n1 and n2 by `migrate --to` as a Slurm job, by the live move "
            "(a standby job on the target takes it over) and by the requeue (`[slurm] "
            "live_handoff = false`), and between two local nodes by the handoff (stop-and-copy), "
            "alternating, disk synced before each. "
            "Pause = the longest gap between two of its own steps around the move, less its "
            f"usual step interval. Machine: {machine['cpus']} CPUs, kernel {machine['kernel']}, "
            f"load {machine['load_before']:.2f} before, {machine['load_after']:.2f} after.",
            "",
            *table,
            "",
            f"Live move / local, medians: x{ratio['slurm']:.2f} (target <= {TARGET_RATIO}x: "
            f"{verdict}); {handed} of {len(rows['slurm'])} live moves were handoffs (the others "
            "fell back to the requeue).",
            "",
            *step_lines(rows, LABELS, ("slurm", "requeue")),
        ]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--no-docs", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root, CRIU and the loopback cluster (scripts/slurm-cluster.sh up)")
        return 2
    ensure_cluster()
    work = Path(tempfile.mkdtemp(prefix="slurm-move-bench-"))
    homes = {"slurm": work / "slurm-home", "requeue": work / "requeue-home"}
    for kind, home in homes.items():
        home.mkdir()
        live = "true" if kind == "slurm" else "false"
        (home / "config.toml").write_text(
            f"[local]\nenabled = false\n[slurm]\nenabled = true\nlive_handoff = {live}\n"
        )
    machine = {"cpus": os.cpu_count(), "kernel": platform.release(),
               "load_before": os.getloadavg()[0]}  # fmt: skip
    local = Clawpoint(work / "local-home", "bench-local-move", command("counter", args.mb))
    jobs: dict[str, SlurmCounter] = {}
    try:
        for kind, home in homes.items():
            os.environ["CLAWPOINT_HOME"] = str(home)
            jobs[kind] = SlurmCounter(home, args.mb, kind)
        rows = alternate(args.reps, {
            "local": in_home(work / "local-home", lambda: local.move("stop-and-copy")),
            "slurm": in_home(homes["slurm"], jobs["slurm"].move),
            "requeue": in_home(homes["requeue"], jobs["requeue"].move),
        })  # fmt: skip
    finally:
        for job in jobs.values():
            job.close()
        os.environ["CLAWPOINT_HOME"] = str(work / "local-home")
        local.close()
    machine["load_after"] = os.getloadavg()[0]
    publish("slurm-migration", machine, rows, markdown(rows, args.mb, machine),
            docs=not args.no_docs)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
