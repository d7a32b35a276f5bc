"""Azure Scheduled Events client (api-version 2020-07-01).

``GET /metadata/scheduledevents?api-version=2020-07-01`` with ``Metadata: true`` (400
without it) answers ``{"DocumentIncarnation": n, "Events": [{"EventId", "EventType",
"ResourceType", "Resources", "EventStatus", "NotBefore", ...}]}``. ``NotBefore`` is an
RFC 1123 date (``Mon, 19 Sep 2016 18:29:47 GMT``) and is blank once the event has started.
Acknowledging an event (POST ``StartRequests``) is an action, not a signal: not done here.
"""

from __future__ import annotations

from datetime import datetime
from email.utils import parsedate_to_datetime

import httpx2
from pydantic import ConfigDict, Field, ValidationError

from core import errors, logs
from core.schema_base import Model
from core.signals.config import SignalsConfig
from core.signals.metadata import Clock, MetadataHttp, severity_of, unexpected_status
from core.signals.model import (
    InterruptionAction,
    InterruptionNotice,
    Provider,
    UtcDatetime,
    utcnow,
)

log = logs.get_logger("clawpoint.signals.azure")

AZURE_EVENTS_PATH = "/metadata/scheduledevents"
AZURE_HEADERS = {"Metadata": "true"}


class AzureEvent(Model):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    event_id: str = Field(alias="EventId")
    event_type: str = Field(alias="EventType")
    resource_type: str = Field(default="", alias="ResourceType")
    resources: list[str] = Field(default_factory=list, alias="Resources")
    event_status: str = Field(default="", alias="EventStatus")
    not_before: str = Field(default="", alias="NotBefore")


class ScheduledEvents(Model):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    document_incarnation: int = Field(alias="DocumentIncarnation")
    events: list[AzureEvent] = Field(default_factory=list, alias="Events")
    fetched_at: UtcDatetime | None = None


_AZURE_ACTIONS = {
    "Preempt": InterruptionAction.PREEMPT,
    "Terminate": InterruptionAction.TERMINATE,
    "Reboot": InterruptionAction.REBOOT,
    "Redeploy": InterruptionAction.REDEPLOY,
    "Freeze": InterruptionAction.FREEZE,
}


class AzureEventsClient:
    """Azure Scheduled Events (api-version 2020-07-01)."""

    def __init__(
        self, config: SignalsConfig, *, client: httpx2.Client | None = None, clock: Clock = utcnow
    ) -> None:
        self._cfg = config
        self._http = MetadataHttp(config.azure.base_url, config, client=client)
        self._clock = clock

    def close(self) -> None:
        self._http.close()

    def events(self) -> ScheduledEvents:
        resp = self._http.request(
            "GET",
            AZURE_EVENTS_PATH,
            headers=AZURE_HEADERS,
            params={"api-version": self._cfg.azure.api_version},
        )
        if resp.status_code != 200:
            raise unexpected_status(resp, "GET scheduledevents")
        try:
            doc = ScheduledEvents.model_validate_json(resp.text)
        except ValidationError as exc:
            raise errors.OperationFailed(
                f"scheduled events document is malformed: {exc.error_count()} problem(s)",
                hint="check base_url and api_version",
            ) from exc
        return doc.model_copy(update={"fetched_at": self._clock()})

    def notices(self) -> list[InterruptionNotice]:
        doc = self.events()
        now = doc.fetched_at or self._clock()
        vm = self._cfg.azure.vm_name
        out: list[InterruptionNotice] = []
        for ev in doc.events:
            if vm is not None and vm not in ev.resources:
                continue
            action = _AZURE_ACTIONS.get(ev.event_type)
            if action is None:
                log.warning("unknown azure event type; ignored", event_type=ev.event_type)
                continue
            deadline, estimated = self._deadline(ev, now)
            node = self._cfg.node or vm or (ev.resources[0] if ev.resources else None)
            out.append(
                InterruptionNotice(
                    source="azure-scheduled-events",
                    observed_at=now,
                    subject=node,
                    severity=severity_of(action),
                    message=f"Azure scheduled {ev.event_type} ({ev.event_status or 'Scheduled'})",
                    provider=Provider.AZURE,
                    action=action,
                    deadline=deadline,
                    deadline_estimated=estimated,
                    node=node,
                    event_id=ev.event_id,
                    details={
                        "EventStatus": ev.event_status,
                        "ResourceType": ev.resource_type,
                        "Resources": ",".join(ev.resources),
                        "NotBefore": ev.not_before,
                        "DocumentIncarnation": str(doc.document_incarnation),
                    },
                )
            )
        return out

    @staticmethod
    def _deadline(ev: AzureEvent, now: datetime) -> tuple[datetime | None, bool]:
        if not ev.not_before:
            # Azure blanks NotBefore once the event has started: the time is now.
            return (now, True) if ev.event_status == "Started" else (None, False)
        try:
            return parsedate_to_datetime(ev.not_before), False
        except (TypeError, ValueError) as exc:
            raise errors.OperationFailed(
                f"Azure NotBefore {ev.not_before!r} is not an RFC 1123 date",
                hint="report this response; expected e.g. 'Mon, 19 Sep 2016 18:29:47 GMT'",
            ) from exc
