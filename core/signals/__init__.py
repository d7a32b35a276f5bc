"""Signals: typed, timestamped observations with their source.

Interruption notices (cloud metadata endpoints, Kubernetes taints), spot prices, GPU health
(NVML) and node health (backend state). The planner and the watch loop consume these; this
package only observes and never acts. See docs/signals.md.

The names below are imported from their modules on first use (PEP 562), so importing one
module of the package (``core.signals.nvml``, ``core.signals.sla``) does not import the
others: the cloud probes bring an HTTP client, NVML ctypes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.lazy_exports import exports

if TYPE_CHECKING:
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

_WHERE: dict[str, str] = {
    "NoticePoller": "core.signals.cloud",
    "PollResult": "core.signals.cloud",
    "ProviderStatus": "core.signals.cloud",
    "poll": "core.signals.cloud",
    "poll_notices": "core.signals.cloud",
    "SignalsConfig": "core.signals.config",
    "AnySignal": "core.signals.model",
    "GpuHealth": "core.signals.model",
    "GpuVerdict": "core.signals.model",
    "InterruptionAction": "core.signals.model",
    "InterruptionNotice": "core.signals.model",
    "NodeHealthSignal": "core.signals.model",
    "Provider": "core.signals.model",
    "Severity": "core.signals.model",
    "Signal": "core.signals.model",
    "SpotPrice": "core.signals.model",
    "node_health": "core.signals.nodes",
    "notices_from_taints": "core.signals.nodes",
    "NvmlMonitor": "core.signals.nvml",
    "NvmlReport": "core.signals.nvml",
    "NvmlStatus": "core.signals.nvml",
    "probe": "core.signals.nvml",
    "PriceSource": "core.signals.prices",
    "build_price_sources": "core.signals.prices",
    "price_at": "core.signals.prices",
}

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


__getattr__ = exports(__name__, _WHERE)
