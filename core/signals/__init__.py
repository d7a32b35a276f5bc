"""Signals: typed, timestamped observations with their source.

Interruption notices (cloud metadata endpoints, Kubernetes taints), spot prices, GPU health
(NVML) and node health (backend state). The planner and the watch loop consume these; this
package only observes and never acts. See docs/signals.md.
"""

from core.signals.cloud import NoticePoller, PollResult, ProviderStatus, poll, poll_notices
from core.signals.config import SignalsConfig
from core.signals.model import (
    AnySignal,
    GpuHealth,
    GpuVerdict,
    InterruptionAction,
    InterruptionNotice,
    NodeHealthSignal,
    Provider,
    Severity,
    Signal,
    SpotPrice,
)
from core.signals.nodes import node_health, notices_from_taints
from core.signals.nvml import NvmlMonitor, NvmlReport, NvmlStatus, probe
from core.signals.prices import PriceSource, build_price_sources, price_at

__all__ = [
    "AnySignal",
    "GpuHealth",
    "GpuVerdict",
    "InterruptionAction",
    "InterruptionNotice",
    "NodeHealthSignal",
    "NoticePoller",
    "NvmlMonitor",
    "NvmlReport",
    "NvmlStatus",
    "PollResult",
    "PriceSource",
    "Provider",
    "ProviderStatus",
    "Severity",
    "Signal",
    "SignalsConfig",
    "SpotPrice",
    "build_price_sources",
    "node_health",
    "notices_from_taints",
    "poll",
    "poll_notices",
    "price_at",
    "probe",
]
