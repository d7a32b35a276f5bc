"""Benchmark: how long a live migration pauses the workload, by mode, against raw CRIU.

Run as root: ``.venv/bin/python bench/migration.py [--reps 3] [--mb 200] [--big-mb 1024]``.

Two workloads, each measured with every variant in turn (interleaved repetitions, same
machine, same filesystem, same run):

- the self-verifying counter (``core.workloads.counter``) holding ``--mb`` MiB, which reads
  and rewrites every page every step (20 ms sleep);
- ``bench/dirty_workload.py`` holding ``--big-mb`` MiB and rewriting about 5% of its pages
  per second (checked as it goes): the access pattern post-copy is for.

Variants:

- ``raw-criu``: the same program started by hand in its own PID namespace, ``criu dump``
  (kill) then ``criu restore -d`` from the same directory (in ``/dev/shm``, the tmpfs
  clawpoint stages a handoff's dump in): stop-and-copy with nothing else;
- ``plain``: ``clawpoint migrate`` with ``[migration] handoff = false`` (stop, publish, then a
  new wrapper restores: the path before the handoff);
- ``stop-and-copy`` and ``post-copy``: ``clawpoint migrate`` with the handoff to a standby
  wrapper and that restore mode.

Before every move the disk is synced (``sync``), so that no variant pays for the write-back
of an earlier one's images. The pause is measured as the workload sees it: a thread reads its progress file every
millisecond and the workload's own timestamps give the longest gap between consecutive
steps around the move, less its median step interval before the move ("freeze"). Also
reported: CRIU's ``frozen_s`` (the dump) and, for the handoff variants, the report of the
start step (``takeover_s``: order received to workload resumed). Medians of ``--reps``.
JSON: ``bench/results/migration.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
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

from core.checkpoint import stats  # noqa: E402
from core.config import load_settings  # noqa: E402
from core.model import Action, Principal, PrincipalKind  # noqa: E402
from core.service.facade import bootstrap  # noqa: E402
from core.specs import RunSpec  # noqa: E402

PERSON = Principal(id="bench", kind=PrincipalKind.PERSON)
VARIANTS = ("raw-criu", "plain", "stop-and-copy", "post-copy")
CONFIG = {
    "plain": "[migration]\nhandoff = false\n",
    "stop-and-copy": '[migration]\nhandoff = true\nmode = "stop-and-copy"\n',
    "post-copy": '[migration]\nhandoff = true\nmode = "post-copy"\n',
}


class Watcher:
    """Reads a progress file every millisecond; remembers each step's own timestamp.

    ``find`` instead of one path: the files to read, looked up again every 50 ms (a Slurm
    job requeued onto another node writes its progress under another node-local home)."""

    def __init__(
        self, path: Path | None = None, *, find: Callable[[], list[Path]] | None = None
    ) -> None:
        self.find = find if find is not None else (lambda: [path] if path else [])
        self.ts: dict[int, float] = {}
        self._stop = False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        paths, found_at = self.find(), time.monotonic()
        while not self._stop:
            if time.monotonic() - found_at > 0.05:
                paths, found_at = self.find(), time.monotonic()
            for path in paths:
                try:
                    data = json.loads(path.read_text())
                    self.ts.setdefault(int(data["step"]), float(data["ts"]))
                except (OSError, ValueError, KeyError):
                    pass
            time.sleep(0.001)

    def wait_steps(self, n: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        start = max(self.ts, default=0)
        while max(self.ts, default=0) < start + n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no progress in {self.find()}")
            time.sleep(0.01)

    def freeze(self, t0: float, t1: float) -> dict[str, float]:
        """The longest step gap in [t0, t1] less the median interval of the steps before.
        Steps not seen (a file that moved, read late) count as taken at the usual interval:
        a gap across them is their span less that, so a pause is never hidden by them."""
        steps = sorted(self.ts)
        pairs = [(a, b) for a, b in itertools.pairwise(steps) if b == a + 1]
        before = [self.ts[b] - self.ts[a] for a, b in pairs if self.ts[b] < t0][-50:]
        normal = statistics.median(before) if before else 0.0
        during = [
            self.ts[b] - self.ts[a] - (b - a - 1) * normal
            for a, b in itertools.pairwise(steps)
            if t0 - 0.5 <= self.ts[b] <= t1 + 5
        ]
        gap = max(during) if during else float("nan")
        return {"gap_s": gap, "step_s": normal, "freeze_s": gap - normal}

    def stop(self) -> None:
        self._stop = True


def command(kind: str, mb: int) -> list[str]:
    if kind == "counter":
        return [sys.executable, "-m", "core.workloads.counter", "--state-mb", str(mb),
                "--step-seconds", "0.02"]  # fmt: skip
    return [sys.executable, str(ROOT / "bench" / "dirty_workload.py"), "--mb", str(mb),
            "--dirty-percent", "5"]  # fmt: skip


def start_by_hand(argv: list[str], progress: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``argv`` run by hand as the first process of a PID namespace of its own (what raw
    CRIU dumps), reporting progress into ``progress``: (the starter, the program's pid)."""
    env = {**os.environ, "CLAWPOINT_PROGRESS_FILE": str(progress), "PYTHONPATH": str(ROOT)}
    starter = subprocess.Popen(  # noqa: S603 (argv list)
        ["unshare", "--pid", "--fork", "setsid", *argv],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=env, cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        kids = Path(f"/proc/{starter.pid}/task/{starter.pid}/children")
        try:
            return starter, int(kids.read_text().split()[0])
        except (OSError, IndexError, ValueError):
            time.sleep(0.01)
    raise RuntimeError(f"{argv[0]} did not start in its PID namespace")


class RawCriu:
    """The workload run by hand in a PID namespace, moved by ``criu dump`` + ``restore``."""

    def __init__(self, work: Path, argv: list[str]) -> None:
        self.work = work
        self.progress = work / "raw.progress.json"
        self.starter, self.pid = start_by_hand(argv, self.progress)
        self.watch = Watcher(self.progress)

    def move(self) -> dict[str, Any]:
        # The same tmpfs clawpoint stages a handoff's dump in, when there is one: the best
        # raw CRIU can do here (else the work directory's disk, like the store).
        shm = Path("/dev/shm")
        images = (shm if shm.is_dir() else self.work) / f"raw-images-{os.getpid()}"
        shutil.rmtree(images, ignore_errors=True)
        images.mkdir()
        t0 = time.time()
        subprocess.run(["criu", "dump", "-t", str(self.pid), "-D", str(images), "-o", "d.log"],
                       check=True)  # fmt: skip
        pidfile = images / "restored.pid"
        subprocess.run(["criu", "restore", "-D", str(images), "-d", "-o", "r.log",
                        "--pidfile", str(pidfile)], check=True)  # fmt: skip
        t1 = time.time()
        self.pid = int(pidfile.read_text())
        dump = stats.read_stats(images / "stats-dump")
        self.watch.wait_steps(20)
        return {**self.watch.freeze(t0, t1), "criu_frozen_s": dump.get("frozen_s"),
                "criu_dump": dump}  # fmt: skip

    def close(self) -> None:
        self.watch.stop()
        subprocess.run(["kill", "-9", str(self.pid)], check=False)
        self.starter.kill()
        for d in Path("/dev/shm").glob(f"raw-images-{os.getpid()}"):
            shutil.rmtree(d, ignore_errors=True)


class Clawpoint:
    """One workload under clawpoint, moved between node-a and node-b with each variant."""

    def __init__(self, home: Path, name: str, argv: list[str]) -> None:
        self.home = home
        self.name = name
        os.environ["CLAWPOINT_HOME"] = str(home)
        settings = load_settings(home)
        spec = RunSpec.model_validate({"name": name, "node": "node-a", "engine": "criu",
                                       "command": argv, "cwd": str(ROOT), "home": str(home)})  # fmt: skip
        bootstrap(settings).run_workload(spec, detach=True, principal=PERSON)
        self.node = "node-a"
        self.watch = Watcher(settings.run_dir / f"{name}.progress.json")
        self.watch.wait_steps(20)

    def move(self, variant: str) -> dict[str, Any]:
        (self.home / "config.toml").write_text(CONFIG[variant])
        service = bootstrap(load_settings(self.home))
        dest = "node-b" if self.node == "node-a" else "node-a"
        t0 = time.time()
        done = service.act(Action.MIGRATE, f"local:{self.name}", {"to": dest}, principal=PERSON,
                           confirmed=True)  # fmt: skip
        t1 = time.time()
        if done.status != "executed" or done.execution is None:
            raise RuntimeError(f"{variant}: {done.message}")
        self.node = dest
        steps = {s.name: s.output or {} for s in done.execution.steps}
        report = steps["start"].get("handoff") or {}
        self.watch.wait_steps(20)
        return {
            **self.watch.freeze(t0, t1),
            "criu_frozen_s": steps["checkpoint"].get("timings", {}).get("frozen_s"),
            "takeover_s": report.get("takeover_s"),
            # where the takeover's time went (s after the order came: lock taken, control
            # socket up, restore begun) and the restore's own wall time
            "takeover_marks": report.get("takeover_marks"),
            "restore_wall_s": report.get("restore_wall_s"),
            "mode": report.get("mode"),
            "command_s": t1 - t0,
        }

    def close(self) -> None:
        service = bootstrap(load_settings(self.home))
        service.act(Action.KILL, f"local:{self.name}", {}, principal=PERSON, confirmed=True)
        self.watch.stop()


def run_workload(kind: str, mb: int, reps: int, work: Path) -> dict[str, Any]:
    argv = command(kind, mb)
    work.mkdir(parents=True, exist_ok=True)
    raw = RawCriu(work, argv)
    raw.watch.wait_steps(20)
    claw = Clawpoint(work / "home", f"bench-{kind}", argv)
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    try:
        for rep in range(reps):
            for variant in VARIANTS:
                # Earlier moves' images still being written back would slow this one's dump
                # (the kernel throttles writers): every variant starts from a synced disk.
                os.sync()
                time.sleep(1)
                got = raw.move() if variant == "raw-criu" else claw.move(variant)
                runs[variant].append(got)
                print(f"  {kind} {mb} MiB rep {rep + 1} {variant:>13}: freeze "
                      f"{got['freeze_s']:.3f} s (CRIU frozen {got['criu_frozen_s'] or 0:.3f})",
                      flush=True)  # fmt: skip
    finally:
        raw.close()
        claw.close()
    summary = {}
    for variant, rows in runs.items():
        med = {k: statistics.median(r[k] for r in rows if isinstance(r.get(k), float))
               for k in ("freeze_s", "criu_frozen_s", "step_s", "gap_s", "takeover_s")
               if any(isinstance(r.get(k), float) for r in rows)}  # fmt: skip
        summary[variant] = {"median": med, "runs": rows}
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--big-mb", type=int, default=1024)
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--only", choices=("counter", "dirty"), default=None)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("run as root (CRIU)", file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "kernel": platform.release(),
            "cpu": platform.processor() or platform.machine(),
            "load_before": os.getloadavg(),
        },
        "reps": args.reps,
    }
    with tempfile.TemporaryDirectory(prefix="clawpoint-migration-", dir="/var/tmp") as tmp:
        if args.only in (None, "counter"):
            results["counter"] = run_workload("counter", args.mb, args.reps, Path(tmp) / "c")
        if not args.skip_big and args.only in (None, "dirty"):
            results["dirty"] = run_workload("dirty", args.big_mb, args.reps, Path(tmp) / "d")
    results["machine"]["load_after"] = os.getloadavg()
    out = ROOT / "bench" / "results" / "migration.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    for kind in ("counter", "dirty"):
        if kind not in results:
            continue
        base = results[kind]["raw-criu"]["median"]["freeze_s"]
        stop = results[kind]["stop-and-copy"]["median"]["freeze_s"]
        print(f"{kind}: median freeze (s) and ratio to raw CRIU stop-and-copy:")
        for variant in VARIANTS:
            med = results[kind][variant]["median"]
            print(f"  {variant:>13}: {med['freeze_s']:.3f}  x{med['freeze_s'] / base:.2f} raw, "
                  f"x{med['freeze_s'] / stop:.2f} stop-and-copy")  # fmt: skip
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
