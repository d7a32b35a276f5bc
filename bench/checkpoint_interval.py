"""Benchmark: the periodic-checkpoint interval, Young/Daly against a hindsight sweep and the
adaptive policy, over real spot reclaims and a generated node-failure history.

Costs: the self-verifying counter (``core.workloads.counter``) at 200 MiB and 1 GiB, run
under clawpoint's wrapper with real CRIU (root), checkpointed ``--reps`` times (leave
running, the disk synced before each as periodic checkpoints minutes apart find it); the
pause is the median ``frozen_s`` and the wall time the median ``total_s`` of those
checkpoints. ``--documented-costs`` uses the figures of docs/benchmarks.md instead
(and says so in the output); without root or CRIU the run stops unless that flag is given.

Histories: the 9 AWS V100 zones of the shipped spot traces (every stretch of availability
one run, ended by a reclaim; ends jittered within a probe tick, ``--seeds`` seeds), and a
node-failure history (``core.planner.checkpoint_sim.failure_history``: 180 days, Weibull
inter-failure times of shape 0.7 and mean 36 h, a burst of 1-3 follow-on failures at mean
30 min gaps after 35% of failures; one history per seed).

Policies, replayed by ``core.planner.checkpoint_sim.simulate``: Young/Daly (Daly's period for
the MTBF of the whole history: it knows the mean in hindsight); the best fixed interval (a
sweep of 120 log-spaced intervals, 5 s to 12 h, chosen with hindsight on the same replay);
the adaptive policy (age-dependent hazard estimated online from the runs before, prior one
interruption per 4 h; its two constants were set before the evaluation, not fitted to it).
Target (issue 25): adaptive <= 0.8x the best fixed interval, per history and cost.

Usage: ``.venv/bin/python bench/checkpoint_interval.py [--documented-costs] [--seeds N]``.
JSON: ``bench/results/checkpoint_interval.json``; the "Checkpoint interval" section of
``docs/benchmarks.md`` is rewritten (only that section).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.docs_section import write_section  # noqa: E402
from core.model import CheckpointInfo  # noqa: E402
from core.planner.checkpoint_interval import CheckpointCost, IntervalBounds, daly_period  # noqa: E402
from core.planner.checkpoint_sim import (  # noqa: E402
    AdaptivePolicy,
    FixedPolicy,
    failure_history,
    runs_from_trace,
    simulate,
    sweep_grid,
)
from core.planner.interruption_hazard import RunSpan  # noqa: E402
from core.planner.spot.traces import load_traces  # noqa: E402

TRACES = Path("/work/shared/data/spot-traces/aws-v100-2023-02")
SIZES_MIB = (200, 1024)
# docs/benchmarks.md, "Checkpoint" and "Live migration" (this VM, sha256t16m): the frozen
# time and the whole leave-running checkpoint, 263 MiB and 1031 MiB images.
DOCUMENTED = {
    200: CheckpointCost(pause_s=0.153, wall_s=0.27),
    1024: CheckpointCost(pause_s=0.458, wall_s=0.76),
}
PRIOR_RATE_PER_H = 0.25
TARGET = 0.8
NOTES = """\
- **Why 0.8x is out of reach here**: to first order the cost at the best interval grows
  with the square root of the hazard, so a policy that knows the hazard in each situation
  can gain at most E[sqrt h] / sqrt(E[h]) (over run time) on the best fixed interval. The
  table below computes that bound per zone with the hazard estimated *in hindsight* from the
  whole trace (no policy that learns online can do as well) for what a watcher could know:
  the run's age; its age and the spot price's trend (the traces' prices, per tick); its age,
  how many other zones of its region are out of capacity now and whether one was reclaimed
  in the last 30 min. Spot reclaims do cluster (about half the runs of the us-east-1 zones
  end within 30 minutes), but most run time is in long quiet runs. Earlier covariates
  (reclaims in the previous 6, 24 or 72 h; the previous run's length) lowered the age bound
  by at most 0.02.
- **Tuning**: the policy's constants (age bins, one pseudo-interruption of shrinkage, prior
  one per 4 h) were set before this evaluation. A few other values were tried on the spot
  policy's tuning zones only (us-east-1a, us-east-1d, us-east-2a, us-west-2b; with an
  earlier form of the rule): means 0.91 to 0.99, none near 0.8; the defaults were kept.
- **Young/Daly** with the hindsight MTBF is within a few per cent of the best fixed
  interval everywhere: for one fixed interval, knowing the mean rate is enough.
- **Costs** are measured on a shared 2-vCPU VM while other jobs ran: single checkpoints
  froze the 1 GiB counter 0.5 to 6 s across runs (0.46 s in "Checkpoint" above, on a quiet
  machine), the 200 MiB one 0.12 to 0.34 s. The ratios hold across those costs (0.87 to
  1.00 with the documented ones, `--documented-costs`).
"""


def _age_bin(ticks: int) -> int:
    return min(ticks.bit_length() - 1, 8)  # 1, 2-3, 4-7 ... ticks: finer where hazard moves


def hindsight_bounds(traces: list[Any]) -> list[dict[str, Any]]:
    """Per zone, E[sqrt h] / sqrt(E[h]) over run time, with the hazard per tick estimated in
    hindsight for each value of a covariate (see NOTES): what any interval policy that knew
    that hazard could gain on the best fixed interval, to first order."""
    by_zone = {t.name.removesuffix("_v100_1"): t for t in traces}
    region = {z: z[:-1] for z in by_zone}
    n = min(len(t.availability) for t in by_zone.values())
    half_hour = max(1, round(0.5 / next(iter(by_zone.values())).tick_hours))

    def reclaimed(z: str, i: int) -> bool:
        a = by_zone[z].availability
        return i >= 1 and a[i - 1] == 1 and a[i] == 0

    def neighbours(z: str, i: int) -> tuple[int, bool]:
        others = [o for o in by_zone if o != z and region[o] == region[z]]
        down = sum(1 for o in others if by_zone[o].availability[i - 1] == 0)
        recent = any(reclaimed(o, j) for o in others for j in range(max(1, i - half_hour), i))
        return down, recent

    def trend(z: str, i: int) -> int:
        p = by_zone[z].prices
        if not p:
            return 0
        return (p[i - 1] > p[max(0, i - 21)]) - (p[i - 1] < p[max(0, i - 21)])

    covariates: dict[str, Any] = {
        "age": lambda z, i, age: _age_bin(age),
        "age + price trend": lambda z, i, age: (_age_bin(age), trend(z, i)),
        "age + other zones": lambda z, i, age: (_age_bin(age), *neighbours(z, i)),
    }
    rows = []
    for z, t in by_zone.items():
        row: dict[str, Any] = {"zone": z}
        for label, key in covariates.items():
            ticks: dict[Any, int] = {}
            events: dict[Any, int] = {}
            age = 0
            for i in range(1, n):
                if t.availability[i - 1] != 1:
                    age = 0
                    continue
                age += 1
                k = key(z, i, age)
                ticks[k] = ticks.get(k, 0) + 1
                events[k] = events.get(k, 0) + (t.availability[i] == 0)
            total, mean = sum(ticks.values()), sum(events.values()) / sum(ticks.values())
            root = sum(c * (events[k] / c) ** 0.5 for k, c in ticks.items()) / total
            row[label] = round(root / mean**0.5, 3) if mean else 1.0
        rows.append(row)
    return rows


def render_bounds(rows: list[dict[str, Any]]) -> str:
    labels = [k for k in rows[0] if k != "zone"]
    lines = [
        "Hindsight bound on adaptive / best fixed (first order; lower is more to gain):",
        "",
        "| zone | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for r in rows:
        lines.append(f"| {r['zone']} | " + " | ".join(f"{r[k]:.3f}" for k in labels) + " |")
    return "\n".join(lines)


def measure(reps: int) -> tuple[dict[int, CheckpointCost], dict[str, Any]]:
    """The counter's checkpoint cost at each size, with real CRIU under the wrapper."""
    from bench.checkpoint import Bench, machine, rss_kib, wait_until
    from core.checkpoint import criu

    status = criu.criu_status()
    work = Path(tempfile.mkdtemp(prefix="clawpoint-interval-", dir="/var/tmp"))
    os.environ["CLAWPOINT_HOME"] = str(work / "home")
    bench = Bench(work, drop=False)  # a periodic checkpoint runs with a warm page cache
    costs: dict[int, CheckpointCost] = {}
    raw: dict[str, Any] = {}
    try:
        for mb in SIZES_MIB:
            name = f"interval-{mb}"
            bench.launch(name, mb)
            try:
                pid, kib = bench.payload_pid(name), mb * 1024
                wait_until("the counter to fill its memory", lambda: rss_kib(pid) >= kib)  # noqa: B023
                infos: list[CheckpointInfo] = []
                for _ in range(reps):
                    # periodic checkpoints are minutes apart: the last one's write-back is
                    # done by the next (back to back, a 1 GiB dump waited behind it: 1-5 s)
                    os.sync()
                    time.sleep(1.0)
                    infos.append(bench.client(name).checkpoint(stop=False))
            finally:
                bench.stop_wrapper(name)
            cost = CheckpointCost.from_checkpoints(infos)
            assert cost is not None, f"no timings in the {mb} MiB checkpoints"
            costs[mb] = cost
            raw[str(mb)] = [dict(i.timings) for i in infos]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return costs, {"machine": machine(status.version, Path("/var/tmp")), "timings": raw}


def histories(seeds: int) -> dict[str, list[list[RunSpan]]]:
    out = {t.name.removesuffix("_v100_1"): [runs_from_trace(t, s) for s in range(seeds)]
           for t in load_traces([TRACES])}  # fmt: skip
    out["node-failures"] = [failure_history(1000 + s) for s in range(seeds)]
    return out


def evaluate(name: str, replays: list[list[RunSpan]], cost: CheckpointCost) -> dict[str, Any]:
    bounds = IntervalBounds()

    def mean_total(make: Any) -> float:
        return statistics.fmean(simulate(r, cost, make()).total_s_per_h for r in replays)

    hours = sum(r.hours for rs in replays for r in rs)
    mtbf_s = 3600 * hours / max(1, sum(r.interrupted for rs in replays for r in rs))
    yd_iv = bounds.clamp(daly_period(cost.pause_s, mtbf_s) - cost.wall_s)
    yd = mean_total(lambda: FixedPolicy(yd_iv))
    sweep = [(mean_total(lambda iv=iv: FixedPolicy(iv)), iv) for iv in sweep_grid()]
    best, best_iv = min([*sweep, (yd, yd_iv)])  # Young/Daly's interval is a fixed one too
    adaptive = mean_total(lambda: AdaptivePolicy(cost, prior_rate_per_h=PRIOR_RATE_PER_H))
    return {
        "history": name,
        "pause_s": cost.pause_s,
        "wall_s": cost.wall_s,
        "mtbf_h": round(mtbf_s / 3600, 2),
        "young_daly_interval_s": round(yd_iv, 1),
        "young_daly_s_per_h": round(yd, 2),
        "best_fixed_interval_s": round(best_iv, 1),
        "best_fixed_s_per_h": round(best, 2),
        "adaptive_s_per_h": round(adaptive, 2),
        "adaptive_over_best": round(adaptive / best, 3),
        "young_daly_over_best": round(yd / best, 3),
        "met": adaptive <= TARGET * best,
    }


def render(rows: list[dict[str, Any]], header: str) -> str:
    lines = [
        "## Checkpoint interval",
        "",
        header,
        "",
        "| history | MiB | pause / wall s | MTBF h | Young/Daly s/h (interval) | best fixed s/h "
        "(interval) | adaptive s/h | adaptive / best | YD / best | <= 0.8x |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['history']} | {r['mib']} | {r['pause_s']:.3f} / {r['wall_s']:.3f} | "
            f"{r['mtbf_h']} | {r['young_daly_s_per_h']:.1f} ({r['young_daly_interval_s']:.0f} s) | "
            f"{r['best_fixed_s_per_h']:.1f} ({r['best_fixed_interval_s']:.0f} s) | "
            f"{r['adaptive_s_per_h']:.1f} | {r['adaptive_over_best']:.3f} | "
            f"{r['young_daly_over_best']:.3f} | {'met' if r['met'] else 'not met'} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--documented-costs", action="store_true",
                    help="use the costs in docs/benchmarks.md instead of measuring")  # fmt: skip
    ap.add_argument("--reps", type=int, default=5, help="checkpoints measured per size")
    ap.add_argument("--seeds", type=int, default=3, help="jitter seeds / failure histories")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = ap.parse_args()
    if args.documented_costs:
        costs, source = DOCUMENTED, {"costs": "documented (docs/benchmarks.md), not measured"}
    elif os.geteuid() != 0 or shutil.which("criu") is None:
        print("measuring needs root and CRIU; pass --documented-costs to use the documented "
              "figures instead", file=sys.stderr)  # fmt: skip
        return 2
    else:
        costs, source = measure(args.reps)
        source["costs"] = (
            f"measured: median of {args.reps} leave-running checkpoints per size, disk synced "
            "before each"
        )
    t0 = time.monotonic()
    rows = []
    for name, replays in histories(args.seeds).items():
        for mb, cost in costs.items():
            rows.append({"mib": mb, **evaluate(name, replays, cost)})
            print(json.dumps(rows[-1]), file=sys.stderr)
    elapsed = time.monotonic() - t0
    met = sum(r["met"] for r in rows)
    ratios = [r["adaptive_over_best"] for r in rows]
    header = (
        f"`bench/checkpoint_interval.py{' --documented-costs' if args.documented_costs else ''}"
        f"` ({args.seeds} seeds; {elapsed:.0f} s of replay). Costs: {source['costs']}. "
        "Loss + overhead in seconds per hour of run time, the mean over the seeds; the best "
        "fixed interval is chosen with hindsight on the same replays; the adaptive policy "
        "learns its hazard online (nothing fitted to these histories). Target: adaptive <= "
        f"0.8x best fixed: met on {met} of {len(rows)} (adaptive / best "
        f"{min(ratios):.2f}-{max(ratios):.2f}, median {statistics.median(ratios):.2f})."
    )
    machine = source.get("machine")
    if isinstance(machine, dict):
        header += " Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()) + "."
    bounds = hindsight_bounds(load_traces([TRACES]))
    below = {k: sum(r[k] <= TARGET for r in bounds) for k in bounds[0] if k != "zone"}
    md = (
        render(rows, header)
        + "\n\n"
        + NOTES
        + "\n"
        + render_bounds(bounds)
        + "\n\nZones where even the hindsight bound reaches 0.8x: "
        + ", ".join(f"{k} {v} of {len(bounds)}" for k, v in below.items())
        + "."
    )
    out = ROOT / "bench" / "results" / "checkpoint_interval.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({**source, "seeds": args.seeds, "rows": rows, "bounds": bounds}, indent=2) + "\n"
    )
    if not args.no_docs:
        write_section("checkpoint-interval", md)
    print(md)
    return 0  # a missed target is reported in the table, not as a failed run


if __name__ == "__main__":
    raise SystemExit(main())
