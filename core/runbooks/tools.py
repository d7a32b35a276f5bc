"""The catalogue of MCP tool names that skills and runbook steps may call.

One place for the list, grouped by what a call can do: ``READ_TOOLS`` and ``PLAN_TOOLS``
never change anything; ``ACTION_TOOLS`` take ``dry_run`` and ``reason`` and answer with a
``status`` from ``ACTION_STATUSES``. The action tools come from the catalogue
(``core.actions``). Limits: the read and plan tools are a static mirror of the MCP
server's tools; the tests and the runbook validator read only the names exported here.
"""

from __future__ import annotations

from typing import Final

from core.actions import CATALOGUE

__all__ = [
    "ACTION_STATUSES",
    "ACTION_TOOLS",
    "ALL_TOOLS",
    "ENGINE_ONLY_TOOLS",
    "PLAN_TOOLS",
    "READ_TOOLS",
    "is_mutating",
]

READ_TOOLS: Final[frozenset[str]] = frozenset(
    {
        "cluster_status",
        "list_nodes",
        "list_workloads",
        "get_workload",
        "list_checkpoints",
        "queue_depth",
        "sla_risk",
        "spot_market",
        "cluster_health",
        "plan_actions",
        "list_pools",
        "list_approvals",
        "get_approval",
        "list_runbooks",
        "runbook_status",
    }
)

# Runbook step calls only: over MCP, an action tool's ``dry_run`` returns the same plan
# (with the projection), so the server does not list these (docs/agents.md).
PLAN_TOOLS: Final[frozenset[str]] = frozenset({"plan_migration", "plan_failover"})

# Every catalogue action (core.actions) is an action tool, plus the approval and runbook ones.
ACTION_TOOLS: Final[frozenset[str]] = frozenset(
    {spec.mcp_tool for spec in CATALOGUE.values()}
    | {"execute_approved", "start_runbook", "continue_runbook"}
)

ALL_TOOLS: Final[frozenset[str]] = READ_TOOLS | PLAN_TOOLS | ACTION_TOOLS

# A runbook step may not call these directly: the engine calls ``execute_approved`` itself
# when an approval gate opens, and continuing a run is the engine's own job.
ENGINE_ONLY_TOOLS: Final[frozenset[str]] = frozenset({"execute_approved", "continue_runbook"})

ACTION_STATUSES: Final[tuple[str, ...]] = (
    "executed",
    "approval_required",
    "denied",
    "failed",
    "planned",
)


def is_mutating(tool: str) -> bool:
    """True when calling ``tool`` can change a cluster (it is an action tool)."""
    return tool in ACTION_TOOLS
