"""Polling the cloud interruption endpoints: AWS IMDSv2, GCP metadata, Azure Scheduled Events.

The clients live in ``aws``, ``gcp`` and ``azure`` (each module's docstring gives its
endpoint's exact protocol) over the shared HTTP access in ``metadata``; this module polls
the enabled ones and is what the watch loop uses: ``NoticePoller`` (long-lived: keeps the
AWS token and GCP's first sighting) or ``poll`` / ``poll_notices`` (one shot).

Limits: a refused or timed-out connection means "not on that cloud" and is reported as an
unavailable provider (``ProviderStatus``), never raised out of ``poll``; so is a provider
that answers outside its documented format. Providers are polled one after another, so one
poll takes at most about (connect timeout + attempts x read timeout) per enabled provider.
"""

from __future__ import annotations

from pydantic import Field

from core import errors, logs
from core.schema_base import Model
from core.signals.aws import AwsImdsClient
from core.signals.azure import AzureEvent, AzureEventsClient, ScheduledEvents
from core.signals.config import SignalsConfig
from core.signals.gcp import GcpMetadataClient
from core.signals.metadata import Clock
from core.signals.model import (
    InterruptionNotice,
    Provider,
    utcnow,
)

log = logs.get_logger("clawpoint.signals.cloud")

__all__ = [
    "AwsImdsClient",
    "AzureEvent",
    "AzureEventsClient",
    "GcpMetadataClient",
    "NoticePoller",
    "PollResult",
    "ProviderStatus",
    "ScheduledEvents",
    "poll",
    "poll_notices",
]


class ProviderStatus(Model):
    """How one provider's poll went: ``available`` False = not on that cloud (or broken)."""

    provider: Provider
    available: bool
    reason: str = ""
    notices: int = 0


class PollResult(Model):
    notices: list[InterruptionNotice] = Field(default_factory=list)
    providers: list[ProviderStatus] = Field(default_factory=list)


class NoticePoller:
    """Long-lived poller for a watch loop: keeps clients (AWS token, GCP first-seen time)."""

    def __init__(self, config: SignalsConfig, *, clock: Clock = utcnow) -> None:
        self._clients: list[tuple[Provider, AwsImdsClient | GcpMetadataClient | AzureEventsClient]]
        self._clients = []
        if config.aws.enabled:
            self._clients.append((Provider.AWS, AwsImdsClient(config, clock=clock)))
        if config.gcp.enabled:
            self._clients.append((Provider.GCP, GcpMetadataClient(config, clock=clock)))
        if config.azure.enabled:
            self._clients.append((Provider.AZURE, AzureEventsClient(config, clock=clock)))

    def poll(self) -> PollResult:
        """Ask every enabled provider once; an unreachable or broken one is reported, not raised."""
        result = PollResult()
        for provider, client in self._clients:
            try:
                found = client.notices()
            except errors.ClawpointError as exc:
                log.info("provider not available", provider=provider.value, reason=exc.message)
                result.providers.append(
                    ProviderStatus(provider=provider, available=False, reason=exc.message)
                )
                continue
            result.notices.extend(found)
            result.providers.append(
                ProviderStatus(provider=provider, available=True, notices=len(found))
            )
        return result

    def close(self) -> None:
        for _, client in self._clients:
            client.close()

    def __enter__(self) -> NoticePoller:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def poll(config: SignalsConfig) -> PollResult:
    """One-shot poll of every enabled provider (see ``NoticePoller`` for repeated polls)."""
    with NoticePoller(config) as poller:
        return poller.poll()


def poll_notices(config: SignalsConfig) -> list[InterruptionNotice]:
    """The interruption notices of every enabled provider (empty when none or none reachable)."""
    return poll(config).notices
