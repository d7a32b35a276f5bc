"""Deadline-aware spot vs on-demand vs idle scheduling with checkpoints: policies and replay.

Public API: ``evaluate`` (replay policies on traces, score against the exact optimum),
``render_report`` / ``render_table`` (plain text), the policies, the simulator and the
trace loader. Semantics and limits: see ``sim`` and ``docs/spot-policy.md``.
"""

from core.planner.spot.evaluate import (
    DEFAULT_ON_DEMAND_PRICE,
    DEFAULT_SPOT_PRICE,
    KNOWN_POLICIES,
    EvaluationReport,
    RunRow,
    Summary,
    evaluate,
    render_report,
    render_table,
)
from core.planner.spot.omniscient import omniscient_costs
from core.planner.spot.policies import ClawpointPolicy, GreedyPolicy, UniformProgressPolicy
from core.planner.spot.sim import Inst, Job, Policy, RunResult, job_in_ticks, simulate
from core.planner.spot.traces import Trace, load_csv, load_traces

__all__ = [
    "DEFAULT_ON_DEMAND_PRICE",
    "DEFAULT_SPOT_PRICE",
    "KNOWN_POLICIES",
    "ClawpointPolicy",
    "EvaluationReport",
    "GreedyPolicy",
    "Inst",
    "Job",
    "Policy",
    "RunResult",
    "RunRow",
    "Summary",
    "Trace",
    "UniformProgressPolicy",
    "evaluate",
    "job_in_ticks",
    "load_csv",
    "load_traces",
    "omniscient_costs",
    "render_report",
    "render_table",
    "simulate",
]
