"""Signal models: typed, timestamped observations with the source that produced them.

Every signal carries ``kind`` (the discriminator), ``source`` (which endpoint, file or
library said so), ``observed_at`` (when clawpoint saw it, timezone-aware UTC), ``subject``
(the node or workload it is about, when known) and ``severity``. Kinds defined here:
interruption notices, spot prices, GPU health and node health. Queue depth and SLA risk
belong to the planner; they subclass ``Signal`` with their own ``kind`` literal and are
added to the ``AnySignal`` union there, so nothing here needs to change for them.

Pure data, no I/O.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field

from core.model import NodeHealth
from core.schema_base import Model


def _aware_utc(value: datetime) -> datetime:
    # Naive datetimes are ambiguous across hosts; treat them as UTC rather than local time.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_aware_utc)]


def utcnow() -> datetime:
    return datetime.now(UTC)


class Severity(StrEnum):
    INFO = "info"  # worth knowing; no action needed
    WARNING = "warning"  # act soon (rebalance advice, degraded GPU, cordoned node)
    CRITICAL = "critical"  # act now (termination notice, failed GPU, node down)


class Signal(Model):
    """Base of every signal. Subclasses pin ``kind`` to a literal for discriminated unions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    source: str = Field(description="what produced it, e.g. 'aws-imds', 'nvml', 'price-trace'")
    observed_at: UtcDatetime = Field(default_factory=utcnow)
    subject: str | None = Field(default=None, description="node or workload id it concerns")
    severity: Severity = Severity.INFO
    message: str = ""


# --- interruption notices ---------------------------------------------------------------


class Provider(StrEnum):
    AWS = "aws"
    GCP = "gcp"
    AZURE = "azure"
    KUBERNETES = "kubernetes"


class InterruptionAction(StrEnum):
    TERMINATE = "terminate"  # AWS spot instance-action, Azure Terminate
    STOP = "stop"  # AWS spot instance-action
    HIBERNATE = "hibernate"  # AWS spot instance-action
    PREEMPT = "preempt"  # GCP preempted, Azure Preempt (spot eviction)
    REBALANCE = "rebalance"  # AWS rebalance recommendation: elevated risk, no deadline
    REBOOT = "reboot"  # Azure Reboot
    REDEPLOY = "redeploy"  # Azure Redeploy (moves to another host; local disk lost)
    FREEZE = "freeze"  # Azure Freeze (VM paused for seconds)
    DRAIN = "drain"  # Kubernetes: the node is being drained / cordoned by an operator

    @property
    def loses_node(self) -> bool:
        """True when the instance goes away (or its local state does) at the deadline."""
        return self in _LOSES_NODE


_LOSES_NODE = frozenset(
    {
        InterruptionAction.TERMINATE,
        InterruptionAction.STOP,
        InterruptionAction.HIBERNATE,
        InterruptionAction.PREEMPT,
        InterruptionAction.REDEPLOY,
    }
)


class InterruptionNotice(Signal):
    """The platform announced that a node will be interrupted (or is at elevated risk)."""

    kind: Literal["interruption"] = "interruption"
    provider: Provider
    action: InterruptionAction
    deadline: UtcDatetime | None = None
    # GCP says only "preempted now"; its 30 s grace is added by us, so say it is a guess.
    deadline_estimated: bool = False
    node: str | None = None
    event_id: str | None = None
    details: dict[str, str] = Field(default_factory=dict)

    def seconds_left(self, now: datetime | None = None) -> float | None:
        if self.deadline is None:
            return None
        return (self.deadline - (now or utcnow())).total_seconds()


# --- spot prices ------------------------------------------------------------------------


class SpotPrice(Signal):
    """The spot price of a node / instance type / zone at a moment (``at``)."""

    kind: Literal["spot_price"] = "spot_price"
    node: str | None = None
    instance_type: str | None = None
    zone: str | None = None
    price_per_hour: float = Field(ge=0)
    on_demand_per_hour: float | None = Field(default=None, ge=0)
    currency: str = "USD"
    at: UtcDatetime
    available: bool | None = None  # traces also record whether spot could be launched

    @property
    def discount(self) -> float | None:
        """Fraction saved versus on-demand (0.7 = 70% cheaper), when on-demand is known."""
        if not self.on_demand_per_hour:
            return None
        return 1.0 - self.price_per_hour / self.on_demand_per_hour


# --- GPU health -------------------------------------------------------------------------


class GpuVerdict(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"  # still runs, but checkpoint and plan a move / reset
    FAILED = "failed"  # work on it is lost or about to be; fail over


class XidEvent(Model):
    model_config = ConfigDict(frozen=True)

    xid: int
    observed_at: UtcDatetime
    meaning: str
    effect: GpuVerdict | None  # None = application-level, does not judge the GPU


class EccCounts(Model):
    """ECC error counters; None = not supported on this GPU (e.g. ECC off, consumer GPU)."""

    model_config = ConfigDict(frozen=True)

    volatile_corrected: int | None = None  # since the last driver reload / GPU reset
    volatile_uncorrected: int | None = None
    aggregate_corrected: int | None = None  # over the GPU's lifetime
    aggregate_uncorrected: int | None = None


class GpuHealth(Signal):
    """One GPU as NVML reports it, with a verdict and the reasons for it."""

    kind: Literal["gpu_health"] = "gpu_health"
    node: str | None = None
    index: int
    uuid: str | None = None
    name: str | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    throttle_mask: int | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    ecc: EccCounts = Field(default_factory=EccCounts)
    retired_pages_pending: bool | None = None
    row_remap_pending: bool | None = None
    row_remap_failed: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    xid_events: list[XidEvent] = Field(default_factory=list)
    lost: bool = False  # fallen off the bus (NVML_ERROR_GPU_IS_LOST / Xid 79)
    unknown: list[str] = Field(
        default_factory=list, description="queries this GPU or driver does not support"
    )
    verdict: GpuVerdict = GpuVerdict.HEALTHY
    reasons: list[str] = Field(default_factory=list, description="why the verdict")
    notes: list[str] = Field(default_factory=list, description="observed, not judged")


# --- node health ------------------------------------------------------------------------


class NodeHealthSignal(Signal):
    """A node's health as its backend (Slurm state flags, Kubernetes conditions) reports it."""

    kind: Literal["node_health"] = "node_health"
    node: str
    backend: str
    health: NodeHealth
    schedulable: bool
    flags: list[str] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)


AnySignal = Annotated[
    InterruptionNotice | SpotPrice | GpuHealth | NodeHealthSignal,
    Field(discriminator="kind"),
]
"""Every kind defined here; the planner extends this union with its SLA / queue kinds."""
