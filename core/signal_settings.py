"""Configuration of the signals layer, as pydantic models (the ``[signals]`` TOML section).

Role: ``core.config`` gathers every section's model, so this one lives below the layers, as
``core.guardrail_settings`` does, and reading the settings never imports the signals package
(its probes, HTTP client and NVML); ``core.signals.config`` re-exports it for the signals.

Defaults name the real metadata endpoints; tests always override ``base_url``. Every cloud
provider is off by default so a laptop or an on-premises cluster never probes link-local
addresses it has nothing to do with; turn on the cloud the nodes run on.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from core.schema_base import Model


class _Section(Model):
    model_config = ConfigDict(extra="forbid")


class AwsImdsConfig(_Section):
    enabled: bool = False
    base_url: str = "http://169.254.169.254"
    # IMDSv2 session token lifetime; AWS allows 1..21600 s. We renew a little before expiry.
    token_ttl_s: int = Field(default=21600, ge=1, le=21600)


class GcpMetadataConfig(_Section):
    enabled: bool = False
    base_url: str = "http://metadata.google.internal"
    # GCP's preempted flag carries no deadline; the documented grace is 30 s.
    grace_s: float = Field(default=30.0, ge=0, le=86400)


class AzureEventsConfig(_Section):
    enabled: bool = False
    base_url: str = "http://169.254.169.254"
    api_version: str = "2020-07-01"
    # Only events whose Resources list this VM name are reported; None = all events.
    vm_name: str | None = None


class PriceEntryConfig(_Section):
    price_per_hour: float = Field(ge=0, le=1e6)
    on_demand_per_hour: float | None = Field(default=None, ge=0, le=1e6)
    zone: str | None = None
    instance_type: str | None = None


class PriceFeedConfig(_Section):
    """A JSON or CSV price feed: a file path or an http(s) URL (formats: docs/signals.md)."""

    location: str
    format: Literal["auto", "json", "csv"] = "auto"


class PriceTraceConfig(_Section):
    """The shipped trace format: ``spot_prices.json`` plus one ``<zone>.csv`` per zone."""

    directory: Path
    on_demand_per_hour: float | None = Field(default=None, ge=0, le=1e6)
    instance_type: str | None = None
    # Replay: trace tick 0 is mapped to this moment; None = use the trace's own dates.
    replay_start: datetime | None = None


class PricesConfig(_Section):
    # node (or zone / instance type) -> price; a bare number is the spot price per hour.
    table: dict[str, float | PriceEntryConfig] = Field(default_factory=dict)
    feeds: list[PriceFeedConfig] = Field(default_factory=list)
    traces: list[PriceTraceConfig] = Field(default_factory=list)


class NvmlConfig(_Section):
    enabled: bool = True
    # How long one report waits for pending Xid events; NVML returns at once when some are
    # queued, so this only bounds the idle case.
    event_wait_ms: int = Field(default=10, ge=0, le=5000)


class SignalsConfig(_Section):
    """``settings.signals``: endpoints, timeouts, poll interval, price sources, NVML."""

    # The clawpoint node id of the machine this process runs on: the subject of its notices.
    node: str | None = None
    aws: AwsImdsConfig = Field(default_factory=AwsImdsConfig)
    gcp: GcpMetadataConfig = Field(default_factory=GcpMetadataConfig)
    azure: AzureEventsConfig = Field(default_factory=AzureEventsConfig)
    # Metadata endpoints answer in milliseconds; a slow connect means "not on that cloud".
    connect_timeout_s: float = Field(default=0.5, gt=0, le=10)
    read_timeout_s: float = Field(default=2.0, gt=0, le=30)
    # Attempts for transient faults (5xx, 429, read timeouts); 1 = no retry.
    attempts: int = Field(default=2, ge=1, le=5)
    # AWS suggests polling the spot endpoints every 5 s.
    poll_interval_s: float = Field(default=5.0, gt=0, le=86400)
    prices: PricesConfig = Field(default_factory=PricesConfig)
    nvml: NvmlConfig = Field(default_factory=NvmlConfig)
