"""Benchmark API: replay policies on availability traces and score them against Omniscient.

Role: ``evaluate`` takes plain values (what a CLI or MCP tool passes), validates them,
replays every policy on the same seeded start points of every trace for every grid cell
(job fraction x changeover), and returns an :class:`EvaluationReport`; ``render_table``
prints it as plain text.

Prices: on-demand 3.06 $/h (p3.2xlarge, the instance type of the shipped traces); spot is
billed per tick at the trace's own price series (``spot_prices.json``) like the published
replay, or at a constant ``spot_price`` when one is given or the trace has no prices.

Scoring: cost is divided by the cost of running on-demand from the start (``C + d``
hours); the gap of a run is ``cost / omniscient_cost - 1`` on the same window. Strata:
spot availability in the run's window (low < 0.6 <= high) x deadline (tight when the job
fraction is >= 0.8).

Limits: one instance type and one zone per run; constant prices per hour.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pydantic import Field

from core import errors
from core.planner.spot.omniscient import omniscient_costs
from core.planner.spot.policies import ClawpointPolicy, GreedyPolicy, UniformProgressPolicy
from core.planner.spot.sim import Job, Policy, job_in_ticks, on_demand_cost, simulate
from core.planner.spot.traces import Trace, load_traces
from core.schema_base import Model

# $/h. p3.2xlarge on demand; the spot fallback (used for traces without a price series) is
# the floor spot price of the shipped traces.
DEFAULT_ON_DEMAND_PRICE = 3.06
DEFAULT_SPOT_PRICE = 0.918
LOOKBACK_HOURS = 24.0  # history before the start that online policies may see
LOW_AVAILABILITY = 0.6
TIGHT_FRACTION = 0.8

POLICIES: dict[str, Callable[[float], Policy]] = {
    "greedy": lambda tick: GreedyPolicy(),
    "uniform-progress": lambda tick: UniformProgressPolicy(),
    "clawpoint": lambda tick: ClawpointPolicy(tick_hours=tick),
}
OMNISCIENT = "omniscient"
KNOWN_POLICIES = (*POLICIES, OMNISCIENT)


class RunRow(Model):
    trace: str
    start: int
    job_fraction: float
    changeover_hours: float
    policy: str
    window_availability: float
    stratum: str
    cost: float
    cost_ratio: float = Field(description="cost / cost of on-demand from the start")
    gap: float = Field(description="cost / omniscient cost - 1")
    missed: bool
    changeovers: int
    spot_hours: float
    on_demand_hours: float


class Summary(Model):
    policy: str
    group: str = Field(description="'all', a stratum name, or 'f=<fraction> d=<hours>'")
    runs: int
    mean_cost_ratio: float
    gap_mean: float
    gap_p75: float
    deadline_misses: int
    mean_changeovers: float


class EvaluationReport(Model):
    traces: dict[str, float] = Field(description="trace name -> mean availability")
    compute_hours: float
    job_fractions: list[float]
    changeover_hours: list[float]
    starts: int
    seed: int
    spot_price: float | None = Field(
        description="constant spot $/h, or None: each trace's per-tick prices where it has them"
    )
    on_demand_price: float
    policies: list[str]
    overall: list[Summary]
    strata: list[Summary]
    cells: list[Summary]
    runs: list[RunRow]


def _p75(values: list[float]) -> float:
    ordered = sorted(values)
    pos = 0.75 * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarise(rows: list[RunRow], policy: str, group: str) -> Summary:
    n = len(rows)
    return Summary(
        policy=policy,
        group=group,
        runs=n,
        mean_cost_ratio=sum(r.cost_ratio for r in rows) / n,
        gap_mean=sum(r.gap for r in rows) / n,
        gap_p75=_p75([r.gap for r in rows]),
        deadline_misses=sum(r.missed for r in rows),
        mean_changeovers=sum(r.changeovers for r in rows) / n,
    )


# Bounds of an evaluation's inputs. Beyond them the simulation cannot mean anything (a job
# longer than any trace, a changeover of years) or its integers overflow (ticks of an
# infinite job); workers beyond a machine's size only fork processes that wait.
MAX_COMPUTE_HOURS = 100_000.0
MAX_CHANGEOVER_HOURS = 1_000.0
MIN_JOB_FRACTION = 0.01
MAX_STARTS = 1_000_000
MAX_WORKERS = 256
MAX_PRICE = 1e6


def _validate(
    compute_hours: float,
    job_fractions: list[float],
    changeover_hours: list[float],
    starts: int,
    policies: list[str],
    prices: dict[str, float],
    workers: int,
) -> None:
    """Each bound refused by the argument's name (``errors.arg``: ``--compute-hours`` on the
    command line); "not a <= x <= b" refuses NaN too, and every bound refuses infinity."""
    a = errors.arg

    def bad(msg: str, hint: str) -> errors.InvalidInput:
        return errors.InvalidInput(msg, hint=hint)

    if not 0 < compute_hours <= MAX_COMPUTE_HOURS:
        raise bad(
            f"{a('compute_hours')} must be > 0 and at most {MAX_COMPUTE_HOURS:g}, got "
            f"{compute_hours}.",
            "Pass e.g. 48.",
        )
    if not job_fractions or any(not MIN_JOB_FRACTION <= f <= 1 for f in job_fractions):
        raise bad(
            f"{a('job_fractions')} must lie in [{MIN_JOB_FRACTION}, 1], got {job_fractions}.",
            "A job fraction is compute / deadline, e.g. 0.6,0.8,0.95.",
        )
    if not changeover_hours or any(not 0 <= d <= MAX_CHANGEOVER_HOURS for d in changeover_hours):
        raise bad(
            f"{a('changeover_hours')} must be from 0 to {MAX_CHANGEOVER_HOURS:g} h, got "
            f"{changeover_hours}.",
            "Pass e.g. 0.1,0.2.",
        )
    if not 1 <= starts <= MAX_STARTS:
        raise bad(
            f"{a('starts')} must be from 1 to {MAX_STARTS:,}, got {starts}.",
            "Pass e.g. 100 start points per trace.",
        )
    if not 1 <= workers <= MAX_WORKERS:
        raise bad(
            f"{a('workers')} must be from 1 to {MAX_WORKERS}, got {workers}.",
            "Pass at most one worker per CPU (nproc says how many).",
        )
    unknown = [p for p in policies if p not in KNOWN_POLICIES]
    if not policies or unknown:
        raise bad(
            f"Unknown or missing {a('policies')}: {unknown or policies}.",
            f"Choose from {', '.join(KNOWN_POLICIES)}.",
        )
    for name, price in prices.items():
        if not 0 < price <= MAX_PRICE:
            raise bad(
                f"{a(name)} must be > 0 and at most {MAX_PRICE:g} $/h, got {price}.",
                "Pass a positive price per hour.",
            )


def _pick_starts(trace: Trace, longest: int, lookback: int, n: int, seed: int) -> list[int]:
    last = len(trace.availability) - longest
    if last < 0:
        raise errors.InvalidInput(
            f"Trace {trace.name} has {len(trace.availability)} ticks; the job needs {longest}.",
            hint="Use a longer trace, fewer compute hours or a larger job fraction.",
        )
    first = min(lookback, last)
    rng = random.Random(f"{seed}:{trace.name}")
    return [rng.randint(first, last) for _ in range(n)]


def _cell(
    trace: Trace,
    starts: list[int],
    job: Job,
    f: float,
    d_h: float,
    policies: list[str],
    trace_prices: bool,
) -> list[RunRow]:
    tick = trace.tick_hours
    lookback = round(LOOKBACK_HOURS / tick)
    prices = trace.prices if trace_prices else None
    base = on_demand_cost(job, tick)
    best = omniscient_costs(trace.availability, starts, job, tick, prices)
    rows: list[RunRow] = []
    for name in policies:
        policy = POLICIES[name](tick) if name != OMNISCIENT else None
        for start, opt in zip(starts, best, strict=True):
            window = trace.availability[start : start + job.deadline]
            avail = sum(window) / len(window)
            stratum = ("low" if avail < LOW_AVAILABILITY else "high") + (
                "-tight" if f >= TIGHT_FRACTION else "-loose"
            )
            if policy is None:
                cost, missed, changes, spot_h, od_h = float(opt), False, 0, 0.0, 0.0
            else:
                res = simulate(
                    trace.availability,
                    start,
                    job,
                    policy,
                    tick_hours=tick,
                    lookback=lookback,
                    prices=prices,
                )
                cost, missed, changes = res.cost, res.missed, res.changeovers
                spot_h, od_h = res.spot_ticks * tick, res.od_ticks * tick
            rows.append(
                RunRow(
                    trace=trace.name,
                    start=start,
                    job_fraction=f,
                    changeover_hours=d_h,
                    policy=name,
                    window_availability=avail,
                    stratum=stratum,
                    cost=cost,
                    cost_ratio=cost / base,
                    gap=cost / float(opt) - 1.0,
                    missed=missed,
                    changeovers=changes,
                    spot_hours=spot_h,
                    on_demand_hours=od_h,
                )
            )
    return rows


def evaluate(
    traces: list[Path],
    *,
    compute_hours: float,
    job_fractions: list[float],
    changeover_hours: list[float],
    starts: int,
    seed: int,
    policies: list[str],
    spot_price: float | None = None,
    on_demand_price: float | None = None,
    workers: int = 1,
) -> EvaluationReport:
    """Replay ``policies`` on every trace x job fraction x changeover; score vs Omniscient.

    Without ``spot_price``, spot is billed at each trace's per-tick prices (constant
    ``DEFAULT_SPOT_PRICE`` for a trace without them); with it, at that constant price.
    """
    sp = DEFAULT_SPOT_PRICE if spot_price is None else spot_price
    odp = DEFAULT_ON_DEMAND_PRICE if on_demand_price is None else on_demand_price
    prices = {"spot_price": sp, "on_demand_price": odp}
    _validate(compute_hours, job_fractions, changeover_hours, starts, policies, prices, workers)
    loaded = load_traces(traces)
    per_tick = spot_price is None
    if per_tick:
        for trace in loaded:
            if trace.prices is not None and not all(p > 0 for p in trace.prices):
                raise errors.InvalidInput(
                    f"Trace {trace.name} has non-positive spot prices.",
                    hint="Fix spot_prices.json, or pass a constant spot_price.",
                )
    tasks: list[tuple[Trace, list[int], Job, float, float, list[str], bool]] = []
    for trace in loaded:
        jobs = {
            (f, d): job_in_ticks(
                compute_hours=compute_hours,
                job_fraction=f,
                changeover_hours=d,
                tick_hours=trace.tick_hours,
                spot_price=sp,
                od_price=odp,
            )
            for f in job_fractions
            for d in changeover_hours
        }
        longest = max(j.deadline for j in jobs.values())
        lookback = round(LOOKBACK_HOURS / trace.tick_hours)
        picked = _pick_starts(trace, longest, lookback, starts, seed)
        tasks += [(trace, picked, job, f, d, policies, per_tick) for (f, d), job in jobs.items()]
    rows: list[RunRow] = []
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for part in pool.map(_cell, *zip(*tasks, strict=True)):
                rows += part
    else:
        for task in tasks:
            rows += _cell(*task)
    return _report(
        loaded,
        rows,
        compute_hours,
        job_fractions,
        changeover_hours,
        starts,
        seed,
        policies,
        None if per_tick else sp,
        odp,
    )


def _report(
    loaded: list[Trace],
    rows: list[RunRow],
    compute_hours: float,
    job_fractions: list[float],
    changeover_hours: list[float],
    starts: int,
    seed: int,
    policies: list[str],
    sp: float | None,
    odp: float,
) -> EvaluationReport:
    overall, strata, cells = [], [], []
    for name in policies:
        mine = [r for r in rows if r.policy == name]
        overall.append(summarise(mine, name, "all"))
        for s in ("low-tight", "low-loose", "high-tight", "high-loose"):
            part = [r for r in mine if r.stratum == s]
            if part:
                strata.append(summarise(part, name, s))
        for f in job_fractions:
            for d in changeover_hours:
                part = [r for r in mine if r.job_fraction == f and r.changeover_hours == d]
                cells.append(summarise(part, name, f"f={f:g} d={d:g}"))
    return EvaluationReport(
        traces={t.name: t.mean_availability for t in loaded},
        compute_hours=compute_hours,
        job_fractions=job_fractions,
        changeover_hours=changeover_hours,
        starts=starts,
        seed=seed,
        spot_price=sp,
        on_demand_price=odp,
        policies=policies,
        overall=overall,
        strata=strata,
        cells=cells,
        runs=rows,
    )


def render_table(summaries: list[Summary], *, markdown: bool = False) -> str:
    """Plain-text (or Markdown) table of summaries: one row per policy and group."""
    head = ["policy", "group", "runs", "cost/OD", "gap mean", "gap p75", "misses", "changes"]
    body = [
        [
            s.policy,
            s.group,
            str(s.runs),
            f"{s.mean_cost_ratio:.3f}",
            f"{s.gap_mean:.3f}",
            f"{s.gap_p75:.3f}",
            str(s.deadline_misses),
            f"{s.mean_changeovers:.1f}",
        ]
        for s in summaries
    ]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in body])
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join(fmt.format(*row) for row in [head, *body])


def render_report(report: EvaluationReport) -> str:
    """The three tables (overall, strata, grid cells) as plain text."""
    return "\n\n".join(
        [
            "Overall\n" + render_table(report.overall),
            "By stratum (availability x deadline)\n" + render_table(report.strata),
            "By grid cell (job fraction x changeover hours)\n" + render_table(report.cells),
        ]
    )
