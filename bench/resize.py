"""Benchmark: the pause of a resize that moves a workload to a node with twice the memory,
against a plain migrate of the same workload in the same run.

Run as root: ``.venv/bin/python bench/resize.py [--reps 3] [--mb 1024]``.

Three local nodes: ``small-a`` and ``small-b`` (2Gi each) and ``big`` (4Gi). The
self-verifying counter (``core.workloads.counter``) holding ``--mb`` MiB starts on
``small-a`` with a 1536Mi memory limit (its own cgroup). Each repetition, interleaved:

- ``migrate``: ``migrate`` to the other small node (the same limit, restored into a new
  cgroup);
- ``resize``: ``resize --memory 3Gi`` (fits only ``big``: the migrate path, restored into a
  cgroup with the new limit before it runs), then ``resize --memory 1536Mi --to small-a``
  back (not measured).

Both go through the service as a person confirming (the handoff to a standby, the default
``[migration]``); the disk is synced before each. The pause is the workload's own: the
longest gap between its consecutive steps around the move, less its median step interval
before (``bench/migration.py``'s ``Watcher``). Medians of ``--reps``; the figures go to
``bench/results/resize.json`` and docs/benchmarks.md (``bench/docs_section.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from docs_section import write_section  # noqa: E402
from migration import Watcher  # noqa: E402

from core.config import load_settings  # noqa: E402
from core.model import Action, Principal, PrincipalKind  # noqa: E402
from core.service.facade import bootstrap  # noqa: E402
from core.specs import RunSpec  # noqa: E402

PERSON = Principal(id="bench", kind=PrincipalKind.PERSON)
CONFIG = """
[local]
nodes = [
  { name = "small-a", price_per_hour = 1.0, memory = "2Gi" },
  { name = "small-b", price_per_hour = 1.0, memory = "2Gi" },
  { name = "big", price_per_hour = 2.0, memory = "4Gi" },
]
"""
NAME = "bench-resize"
LIMIT_MB = 1536


class Subject:
    def __init__(self, home: Path, mb: int) -> None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(CONFIG)
        os.environ["CLAWPOINT_HOME"] = str(home)
        self.settings = load_settings(home)
        self.service = bootstrap(self.settings)
        argv = [sys.executable, "-m", "core.workloads.counter", "--state-mb", str(mb),
                "--step-seconds", "0.02"]  # fmt: skip
        spec = RunSpec.model_validate({
            "name": NAME, "node": "small-a", "engine": "criu", "command": argv,
            "cwd": str(ROOT), "home": str(home), "memory_mb": LIMIT_MB,
        })  # fmt: skip
        self.service.run_workload(spec, detach=True, principal=PERSON)
        self.watch = Watcher(self.settings.run_dir / f"{NAME}.progress.json")
        self.watch.wait_steps(10)

    def act(self, action: Action, params: dict[str, Any]) -> dict[str, Any]:
        os.sync()
        time.sleep(1)
        t0 = time.time()
        done = self.service.act(action, f"local:{NAME}", params, principal=PERSON,
                                confirmed=True)  # fmt: skip
        t1 = time.time()
        if done.status != "executed" or done.execution is None:
            raise RuntimeError(f"{action.value} {params}: {done.message}")
        self.watch.wait_steps(10)
        w = self.service.get_workload(f"local:{NAME}")
        out = {s.name: s.output or {} for s in done.execution.steps}
        handoff = out.get("start", {}).get("handoff") or {}
        return {**self.watch.freeze(t0, t1), "command_s": t1 - t0, "node": w.node,
                "memory_mb": w.memory_mb, "load": os.getloadavg()[0],
                "criu_frozen_s": (out.get("checkpoint", {}).get("timings") or {}).get("frozen_s"),
                "takeover_s": handoff.get("takeover_s"), "mode": handoff.get("mode"),
                "planned_pause_s": done.plan.expected_pause_s if done.plan else None}  # fmt: skip

    def close(self) -> None:
        self.watch.stop()
        self.service.act(Action.KILL, f"local:{NAME}", {}, principal=PERSON, confirmed=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    ap.add_argument("--docs-only", action="store_true",
                    help="rewrite the docs section from bench/results/resize.json, run nothing")  # fmt: skip
    args = ap.parse_args()
    if args.docs_only:
        write_section("resize", _docs(json.loads((ROOT / "bench/results/resize.json").read_text())))
        return 0
    if os.geteuid() != 0:
        print("run as root (CRIU, cgroups)", file=sys.stderr)
        return 2
    machine = {"cpus": os.cpu_count(), "kernel": platform.release(),
               "cpu": platform.processor() or platform.machine(),
               "load_before": os.getloadavg()}  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {"migrate": [], "resize": []}
    with tempfile.TemporaryDirectory(prefix="clawpoint-resize-", dir="/var/tmp") as tmp:
        subject = Subject(Path(tmp) / "home", args.mb)
        try:
            for rep in range(args.reps):
                other = "small-b" if rep % 2 == 0 else "small-a"
                got = subject.act(Action.MIGRATE, {"to": other})
                runs["migrate"].append(got)
                print(f"rep {rep + 1} migrate -> {got['node']}: {got['freeze_s']:.3f} s",
                      flush=True)  # fmt: skip
                got = subject.act(Action.RESIZE, {"memory": "3Gi"})
                assert got["node"] == "big" and got["memory_mb"] == 3072, got
                runs["resize"].append(got)
                print(f"rep {rep + 1} resize -> {got['node']}: {got['freeze_s']:.3f} s",
                      flush=True)  # fmt: skip
                subject.act(Action.RESIZE, {"memory": f"{LIMIT_MB}Mi", "to": other})
        finally:
            subject.close()
    machine["load_after"] = os.getloadavg()
    med = {k: statistics.median(r["freeze_s"] for r in rows) for k, rows in runs.items()}
    ratio = med["resize"] / med["migrate"]
    # Each repetition's two moves a few seconds apart, under the same load: their ratio is
    # less at the mercy of what else the machine runs than the medians are.
    pairs = [
        r["freeze_s"] / m["freeze_s"] for m, r in zip(runs["migrate"], runs["resize"], strict=True)
    ]
    results = {"machine": machine, "reps": args.reps, "mb": args.mb, "median_freeze_s": med,
               "ratio": ratio, "pair_ratio_median": statistics.median(pairs),
               "pair_ratios": pairs, "runs": runs}  # fmt: skip
    out = ROOT / "bench" / "results" / "resize.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"median pause: migrate {med['migrate']:.3f} s, resize {med['resize']:.3f} s "
          f"(x{ratio:.2f}; per repetition x{results['pair_ratio_median']:.2f}); JSON: {out}")  # fmt: skip
    if not args.no_docs:
        write_section("resize", _docs(results))
    return 0


def _docs(r: dict[str, Any]) -> str:
    m, med = r["machine"], r["median_freeze_s"]

    def each(kind: str) -> str:
        return ", ".join(f"{x['freeze_s']:.3f}" for x in r["runs"][kind])

    def crit(kind: str, key: str) -> str:
        got = [x[key] for x in r["runs"][kind] if isinstance(x.get(key), float)]
        return f"{statistics.median(got):.3f} s" if got else "-"

    met = "met" if r["ratio"] <= 1.2 else "NOT met"
    pairs = ", ".join(f"{p:.2f}" for p in r["pair_ratios"])
    frozen = [x["criu_frozen_s"] for rows in r["runs"].values() for x in rows
              if isinstance(x.get("criu_frozen_s"), float)] or [0.0]  # fmt: skip
    lo, hi = min(frozen), max(frozen)
    return f"""## Resize: moved to a node with twice the memory vs a plain migrate

`bench/resize.py` (`make bench`; as root): the self-verifying counter holding {r["mb"]} MiB
with a 1536Mi memory limit (its own cgroup) on a 2Gi local node; each of {r["reps"]}
interleaved repetitions migrates it to the other 2Gi node, then resizes it to 3Gi (fits only
the 4Gi node: checkpoint, handoff, restored into a cgroup with the new limit before it runs),
then resizes it back (not measured). The pause is the workload's own (longest gap between
its steps around the move, less its usual step interval). Machine: {m["cpus"]} CPUs,
kernel {m["kernel"]}, load {m["load_before"][0]:.2f} before, {m["load_after"][0]:.2f} after.

| move | median pause | runs (s) | CRIU frozen | handoff takeover |
|---|---|---|---|---|
| migrate (same limit, new cgroup) | {med["migrate"]:.3f} s | {each("migrate")} | {crit("migrate", "criu_frozen_s")} | {crit("migrate", "takeover_s")} |
| resize to 3Gi on the 4Gi node | {med["resize"]:.3f} s | {each("resize")} | {crit("resize", "criu_frozen_s")} | {crit("resize", "takeover_s")} |

Resize / migrate, medians: x{r["ratio"]:.2f} (target <= 1.2x: {met}); per repetition (the two
moves a few seconds apart, under the same load): {pairs}, median x{r["pair_ratio_median"]:.2f}.
CRIU frozen and takeover are medians of what the checkpoint and start steps report; both
moves run the same dump and handoff code, so the spread of CRIU's own frozen time across
all {2 * r["reps"]} moves ({lo:.2f}-{hi:.2f} s) is the machine's noise, not the resize's.
Command: `.venv/bin/python bench/resize.py --reps {r["reps"]}`."""


if __name__ == "__main__":
    sys.exit(main())
