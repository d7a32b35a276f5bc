"""Benchmark: how long a restore takes from the command to the workload's next step, against
raw CRIU restoring the same kind of images in the same run.

Run as root: ``.venv/bin/python bench/restore_start.py [--reps 10] [--mb 200]``.

What it measures is the part of a move that happens on the target when no standby waits
there: a resume, a failover, a Slurm job requeued onto another node (its batch script
``exec``s ``clawpoint run``, which restores the newest good checkpoint in that process).
Each repetition, in turn:

- ``raw-criu``: the self-verifying counter (``core.workloads.counter``, ``--mb`` MiB) run by
  hand in its own PID namespace and dumped by ``criu dump`` (killed) into a directory on the
  same disk as the store; then ``criu restore -d`` of it. Time from the restore's start to
  the counter's first step after it;
- ``clawpoint``: the same counter under ``clawpoint run``, preempted (checkpoint and stop);
  then ``clawpoint run --name NAME -- CMD`` in the foreground, as a batch script runs it.
  Time from that command's start to the counter's first step after it: Python's start, the
  CLI, the settings, the service, the wrapper, the engine check, the store's choice and
  verification of the newest good checkpoint, CRIU's restore, the resume.

The step is read from the counter's progress file every millisecond while a restore is
awaited (its own timestamps; nothing polls in between).
The disk is synced before every restore. Medians of ``--reps``; the ratio is clawpoint's to
raw CRIU's in the same run. JSON: ``bench/results/restore_start.json``.

``--also PATH`` adds a second install's ``clawpoint`` (an older checkout's, say) as a third
side, measured the same way in the same run: a before/after of the restore path.

Limits: one machine; the counter's step interval (20 ms) bounds the resolution; clawpoint's
restore also verifies the checkpoint's hashes and signature, which raw CRIU does not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.migration import command, start_by_hand  # noqa: E402

CLAWPOINT = Path(sys.executable).with_name("clawpoint")
# Preempting over and over is rate-limited by default (30 disruptive actions an hour).
CONFIG = "[policy.limits]\nrate_per_hour = { destructive = 10 }\n"


def first_step_after(progress: Path, t0: float, timeout_s: float = 60) -> float:
    """Seconds from ``t0`` to the workload's first step stamped after it. The file is read
    every millisecond only while waiting (a reader polling all the time would take CPU from
    the restore it measures, on a small machine)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ts = float(json.loads(progress.read_text())["ts"])
        except (OSError, ValueError, KeyError):
            ts = 0.0
        if ts > t0:
            return ts - t0
        time.sleep(0.001)
    raise RuntimeError(f"no step in {progress} after the restore")


class Raw:
    """The counter by hand: dumped by CRIU into ``work``, restored from there."""

    def __init__(self, work: Path, argv: list[str]) -> None:
        self.work, self.argv = work, argv
        self.progress = work / "raw.progress.json"
        self.images = work / "raw-images"
        self.starter, self.pid = start_by_hand(argv, self.progress)

    def restore(self) -> float:
        first_step_after(self.progress, time.time())  # it runs
        shutil.rmtree(self.images, ignore_errors=True)
        self.images.mkdir()
        subprocess.run(["criu", "dump", "-t", str(self.pid), "-D", str(self.images),
                        "-o", "d.log"], check=True)  # fmt: skip
        os.sync()
        time.sleep(0.5)
        pidfile = self.images / "restored.pid"
        t0 = time.time()
        subprocess.run(["criu", "restore", "-D", str(self.images), "-d", "-o", "r.log",
                        "--pidfile", str(pidfile)], check=True)  # fmt: skip
        took = first_step_after(self.progress, t0)
        self.pid = int(pidfile.read_text())
        return took

    def close(self) -> None:
        subprocess.run(["kill", "-9", str(self.pid)], check=False)
        self.starter.kill()


class Claw:
    """The counter under clawpoint: preempted, then restored by a foreground ``run``."""

    def __init__(self, home: Path, name: str, argv: list[str], clawpoint: Path) -> None:
        self.clawpoint = clawpoint
        home.mkdir(parents=True)
        (home / "config.toml").write_text(CONFIG)
        self.env = {**os.environ, "CLAWPOINT_HOME": str(home)}
        self.name, self.argv = name, argv
        self.progress = home / "run" / f"{name}.progress.json"
        self.fg: subprocess.Popen[bytes] | None = None
        self._cli("run", "--detach", "--name", name, "--", *argv)

    def _cli(self, *args: str) -> None:
        subprocess.run([str(self.clawpoint), *args], env=self.env, check=True,  # noqa: S603
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

    def _stop(self) -> None:
        self._cli("preempt", f"local:{self.name}", "--yes")
        if self.fg is not None:
            self.fg.wait(timeout=60)
            self.fg = None

    def restore(self) -> float:
        first_step_after(self.progress, time.time())  # it runs
        self._stop()
        os.sync()
        time.sleep(0.5)
        t0 = time.time()
        self.fg = subprocess.Popen(  # noqa: S603 (argv list)
            [str(self.clawpoint), "run", "--name", self.name, "--", *self.argv], env=self.env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        return first_step_after(self.progress, t0)

    def close(self) -> None:
        self._cli("kill", f"local:{self.name}", "--yes")
        if self.fg is not None:
            self.fg.wait(timeout=60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--also", type=Path, default=None, metavar="CLAWPOINT",
                    help="another install's console script (an older checkout's, say), "
                    "measured the same way in the same run")  # fmt: skip
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root (CRIU)", file=sys.stderr)
        return 2
    argv = command("counter", args.mb)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="clawpoint-restore-", dir="/var/tmp") as tmp:
        sides: dict[str, Raw | Claw] = {
            "raw-criu": Raw(Path(tmp), argv),
            "clawpoint": Claw(Path(tmp) / "home", "bench-restore", argv, CLAWPOINT),
        }
        if args.also is not None:
            sides["also"] = Claw(Path(tmp) / "also", "bench-restore", argv, args.also)
        runs: dict[str, list[float]] = {name: [] for name in sides}
        try:
            for rep in range(args.reps):
                for name, side in sides.items():
                    took = side.restore()
                    runs[name].append(took)
                    print(f"  rep {rep + 1} {name:>9}: {took:.3f} s", flush=True)
        finally:
            for side in sides.values():
                side.close()
    med = {k: statistics.median(v) for k, v in runs.items()}
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
        },
        "mb": args.mb,
        "also": str(args.also) if args.also else None,
        "reps": args.reps,
        "runs": runs,
        "median_s": med,
        "ratio": med["clawpoint"] / med["raw-criu"],
    }
    out = ROOT / "bench" / "results" / "restore_start.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    also = f", {args.also} {med['also']:.3f} s" if "also" in med else ""
    print(f"restore -> first step, medians: raw CRIU {med['raw-criu']:.3f} s, clawpoint run "
          f"{med['clawpoint']:.3f} s (x{results['ratio']:.2f}){also}\nJSON: {out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
