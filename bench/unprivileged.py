"""Benchmark: an ordinary user's checkpoints and migrations against root's, same run.

Run as root: ``.venv/bin/python bench/unprivileged.py [--reps 3] [--mb 200]``.

The same workload (the self-verifying counter holding ``--mb`` MiB, 20 ms steps) is run by
root with the project's venv and by an ordinary user (``clawpoint-alice`` of
``scripts/test-tenants.sh``: no sudo, no group, no file capability) with theirs, each through
the installed ``clawpoint`` as a user runs it, interleaved repetition by repetition:

- ``checkpoint`` (leave-running): CRIU's own ``frozen_s`` (the pause the workload sees, from
  ``stats-dump``), ``criu_dump_s`` (the dump's wall time) and ``publish_s`` from the new
  checkpoint's manifest, and the command's wall time;
- ``migrate --to`` the other local node (handoff, stop-and-copy: post-copy needs privilege,
  see docs/checkpointing.md): the pause as the workload sees it (longest gap between its own
  step timestamps less its normal step, as ``bench/migration.py`` measures it) and the
  command's wall time.

The ordinary user's CRIU runs in user namespaces they own (``core.checkpoint.nsinit``); the
difference against root is what that mode costs. ``sync`` before every timed step.
Reported: medians of ``--reps`` and the user/root ratio. JSON: ``bench/results/unprivileged.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pwd
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from migration import Watcher  # noqa: E402

USER = "clawpoint-alice"
TENANT_VENV = Path(os.environ.get("CLAWPOINT_TENANT_DIR", "/var/lib/clawpoint-tenants")) / "venv"


class Runner:
    """One person's installed ``clawpoint``: root's (this checkout's venv) or the user's."""

    def __init__(self, who: str, home: Path) -> None:
        self.who = who
        self.home = home
        if who == "root":
            self.bin = ROOT / ".venv" / "bin"
            self.uid = self.gid = 0
        else:
            pw = pwd.getpwnam(who)
            self.bin = TENANT_VENV / "bin"
            self.uid, self.gid = pw.pw_uid, pw.pw_gid
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        os.chown(home, self.uid, self.gid)

    def __call__(self, *args: str) -> tuple[float, Any]:
        env = {"PATH": f"{self.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/bin",
               "HOME": str(self.home), "CLAWPOINT_HOME": str(self.home), "LANG": "C.UTF-8"}  # fmt: skip
        t0 = time.perf_counter()
        done = subprocess.run(  # noqa: S603 (argv list)
            [str(self.bin / "clawpoint"), args[0], "--json", *args[1:]],
            env=env, cwd=self.home, capture_output=True, text=True, timeout=600, check=False,
            user=self.uid, group=self.gid, extra_groups=[] if self.uid else None,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise RuntimeError(f"{self.who}: clawpoint {' '.join(args)}: {done.stderr[-600:]}")
        return wall, json.loads(done.stdout)

    def newest_manifest(self, name: str) -> dict[str, Any]:
        lineage = self.home / "checkpoints" / name
        newest = max(p for p in lineage.iterdir() if p.name.isdigit())
        return dict(json.loads((newest / "manifest.json").read_text()))


def one_rep(run: Runner, mb: int) -> dict[str, float]:
    name = "bench-counter"
    run("run", "--name", name, "--node", "node-a", "--detach", "--",
        str(run.bin / "python"), "-m", "core.workloads.counter", "--state-mb", str(mb),
        "--step-seconds", "0.02")  # fmt: skip
    watch = Watcher(run.home / "run" / f"{name}.progress.json")
    try:
        watch.wait_steps(20)
        subprocess.run(["sync"], check=True)
        wall, _ = run("checkpoint", f"local:{name}")
        t = run.newest_manifest(name)["timings"]
        out = {"checkpoint_wall_s": wall, "frozen_s": t.get("frozen_s", float("nan")),
               "criu_dump_s": t["criu_dump_s"], "publish_s": t["publish_s"]}  # fmt: skip
        watch.wait_steps(20)
        subprocess.run(["sync"], check=True)
        t0 = time.time()
        wall, _ = run("migrate", f"local:{name}", "--to", "node-b", "--yes")
        t1 = time.time()
        watch.wait_steps(20)
        out["migrate_wall_s"] = wall
        out["migrate_pause_s"] = watch.freeze(t0, t1)["freeze_s"]
        return out
    finally:
        watch.stop()
        try:
            run("kill", f"local:{name}", "--yes")
        except RuntimeError:
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mb", type=int, default=200)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: it runs the workload as root and as an ordinary user")
    subprocess.run([str(ROOT / "scripts" / "test-tenants.sh"), "up"], check=True)
    user_home = Path(pwd.getpwnam(USER).pw_dir) / "bench-home"
    runners = [Runner("root", Path("/var/tmp/clawpoint-bench-root")), Runner(USER, user_home)]
    results: dict[str, list[dict[str, float]]] = {r.who: [] for r in runners}
    for rep in range(args.reps):
        for run in runners if rep % 2 == 0 else reversed(runners):
            results[run.who].append(one_rep(run, args.mb))
            print(f"rep {rep + 1} {run.who}: {results[run.who][-1]}", file=sys.stderr)
    keys = list(results["root"][0])
    med = {
        who: {k: statistics.median(r[k] for r in rs) for k in keys} for who, rs in results.items()
    }
    ratio = {k: med[USER][k] / med["root"][k] if med["root"][k] else float("nan") for k in keys}
    report = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                          "python": platform.python_version()},
              "mb": args.mb, "reps": args.reps, "medians": med, "ratio_user_over_root": ratio,
              "runs": results}  # fmt: skip
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "unprivileged.json").write_text(json.dumps(report, indent=1))
    print(f"| {args.mb} MiB counter, medians of {args.reps} | root | {USER} | user/root |")
    print("|---|---|---|---|")
    for k in keys:
        print(f"| {k} | {med['root'][k]:.3f} s | {med[USER][k]:.3f} s | {ratio[k]:.2f}x |")


if __name__ == "__main__":
    main()
