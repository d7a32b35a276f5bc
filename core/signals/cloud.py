"""Interruption notice clients for the cloud metadata services: AWS, GCP and Azure.

Each client asks its provider's instance metadata endpoint, exactly as documented:

- AWS IMDSv2: ``PUT /latest/api/token`` (header ``X-aws-ec2-metadata-token-ttl-seconds``)
  then ``GET /latest/meta-data/spot/instance-action`` (404 until the instance is marked,
  then ``{"action": "terminate"|"stop"|"hibernate", "time": "...Z"}``) and
  ``GET /latest/meta-data/events/recommendations/rebalance`` (404 or
  ``{"noticeTime": "...Z"}``), each with ``X-aws-ec2-metadata-token``. A 401 means the
  token expired or was revoked: we fetch a new one once and ask again.
- GCP: ``GET /computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor: Google``;
  the body is ``TRUE`` or ``FALSE`` and the real server answers with the same header.
- Azure: ``GET /metadata/scheduledevents?api-version=2020-07-01`` with ``Metadata: true``;
  ``NotBefore`` is an RFC 1123 date (``Mon, 19 Sep 2016 18:29:47 GMT``), empty once started.

Limits: timeouts are short because metadata endpoints answer in milliseconds; a refused or
timed-out connection means "not on that cloud" and is reported as an unavailable provider
(``ProviderStatus``), never raised out of ``poll``. Transient faults (5xx, 429, read
timeouts) are retried a bounded number of times. Acknowledging Azure events (POST
``StartRequests``) is an action, not a signal, and is not done here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import httpx2
import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from core import errors
from core.signals.config import SignalsConfig
from core.signals.model import (
    InterruptionAction,
    InterruptionNotice,
    Provider,
    Severity,
    UtcDatetime,
    utcnow,
)

log = structlog.get_logger("clawpoint.signals.cloud")

AWS_TOKEN_PATH = "/latest/api/token"
AWS_TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
AWS_TOKEN_HEADER = "X-aws-ec2-metadata-token"
AWS_INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
AWS_REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
AWS_INSTANCE_ID_PATH = "/latest/meta-data/instance-id"
GCP_PREEMPTED_PATH = "/computeMetadata/v1/instance/preempted"
GCP_NAME_PATH = "/computeMetadata/v1/instance/name"
AZURE_EVENTS_PATH = "/metadata/scheduledevents"
GCP_HEADERS = {"Metadata-Flavor": "Google"}
AZURE_HEADERS = {"Metadata": "true"}

Clock = Callable[[], datetime]


class ProviderStatus(BaseModel):
    """How one provider's poll went: ``available`` False = not on that cloud (or broken)."""

    provider: Provider
    available: bool
    reason: str = ""
    notices: int = 0


class PollResult(BaseModel):
    notices: list[InterruptionNotice] = Field(default_factory=list)
    providers: list[ProviderStatus] = Field(default_factory=list)


class _Transient(Exception):
    """A fault worth one more try (5xx, 429, read timeout); never escapes this module."""


def severity_of(action: InterruptionAction) -> Severity:
    # Freeze pauses the VM for seconds and rebalance is advice: both leave time to react.
    if action in (InterruptionAction.FREEZE, InterruptionAction.REBALANCE):
        return Severity.WARNING
    if action is InterruptionAction.DRAIN:
        return Severity.WARNING
    return Severity.CRITICAL


def _parse_iso(value: str, *, what: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError) as exc:
        raise errors.OperationFailed(
            f"{what}: {value!r} is not an ISO 8601 time",
            hint="the metadata endpoint answered in an unexpected format; report it",
        ) from exc


class MetadataHttp:
    """One provider's HTTP access: short timeouts, no proxies, bounded retries."""

    def __init__(
        self, base_url: str, config: SignalsConfig, *, client: httpx2.Client | None = None
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._attempts = config.attempts
        # trust_env=False: an HTTP(S)_PROXY must never see metadata requests (or tokens).
        self._client = client or httpx2.Client(
            timeout=httpx2.Timeout(config.read_timeout_s, connect=config.connect_timeout_s),
            trust_env=False,
            follow_redirects=False,
        )

    def close(self) -> None:
        self._client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> httpx2.Response:
        url = self.base_url + path
        retrying = Retrying(
            stop=stop_after_attempt(self._attempts),
            wait=wait_exponential(multiplier=0.05, max=0.5),
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self._once(method, url, headers, params)
        except _Transient as exc:
            raise errors.BackendUnavailable(
                f"metadata endpoint {url} keeps failing: {exc}",
                hint="the metadata service is unhealthy; the next poll tries again",
            ) from exc
        raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover

    def _once(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str] | None,
        params: Mapping[str, str] | None,
    ) -> httpx2.Response:
        try:
            resp = self._client.request(method, url, headers=dict(headers or {}), params=params)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            # Nothing listens there (or nothing routes there): this is not that cloud.
            raise errors.BackendUnavailable(
                f"metadata endpoint {url} is unreachable ({type(exc).__name__})",
                hint="not running on this cloud, or the endpoint is blocked; disable the provider",
                code="metadata-unreachable",
            ) from exc
        except httpx2.TimeoutException as exc:
            raise _Transient(f"{type(exc).__name__} from {url}") from exc
        except httpx2.HTTPError as exc:
            raise _Transient(f"{type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 500 or resp.status_code == 429:
            raise _Transient(f"HTTP {resp.status_code} from {url}")
        return resp


def _unexpected(resp: httpx2.Response, what: str) -> errors.OperationFailed:
    return errors.OperationFailed(
        f"{what}: unexpected HTTP {resp.status_code} from {resp.request.url}",
        hint="check the provider's base_url and that the metadata service is enabled",
        details={"status": resp.status_code, "body": resp.text[:200]},
    )


# --- AWS --------------------------------------------------------------------------------


class AwsImdsClient:
    """AWS IMDSv2: spot instance-action and rebalance recommendation."""

    def __init__(
        self, config: SignalsConfig, *, client: httpx2.Client | None = None, clock: Clock = utcnow
    ) -> None:
        self._cfg = config
        self._http = MetadataHttp(config.aws.base_url, config, client=client)
        self._clock = clock
        self._token: str | None = None
        self._token_expires = 0.0  # time.monotonic() deadline
        self._instance_id: str | None = None

    def close(self) -> None:
        self._http.close()

    def _fetch_token(self) -> str:
        ttl = self._cfg.aws.token_ttl_s
        resp = self._http.request("PUT", AWS_TOKEN_PATH, headers={AWS_TOKEN_TTL_HEADER: str(ttl)})
        if resp.status_code != 200 or not resp.text:
            raise _unexpected(resp, "IMDSv2 token request")
        # Renew before expiry so a token never dies between our check and the server's.
        self._token_expires = time.monotonic() + ttl - min(60.0, ttl / 10)
        self._token = resp.text.strip()
        return self._token

    def _token_now(self) -> str:
        if self._token is None or time.monotonic() >= self._token_expires:
            return self._fetch_token()
        return self._token

    def _get(self, path: str) -> httpx2.Response:
        resp = self._http.request("GET", path, headers={AWS_TOKEN_HEADER: self._token_now()})
        if resp.status_code == 401:
            # Expired or revoked token (IMDS restarted, TTL shorter than we thought): renew once.
            log.info("imds token rejected; renewing", path=path)
            self._token = None
            resp = self._http.request("GET", path, headers={AWS_TOKEN_HEADER: self._token_now()})
        return resp

    def _json(self, path: str) -> dict[str, Any] | None:
        resp = self._get(path)
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise _unexpected(resp, f"GET {path}")
        try:
            body = json.loads(resp.text)
        except json.JSONDecodeError as exc:
            raise errors.OperationFailed(
                f"GET {path}: body is not JSON: {resp.text[:120]!r}",
                hint="the endpoint answered in an unexpected format; check base_url",
            ) from exc
        if not isinstance(body, dict):
            raise errors.OperationFailed(
                f"GET {path}: expected a JSON object", hint="check base_url"
            )
        return body

    def instance_id(self) -> str | None:
        if self._instance_id is None:
            try:
                resp = self._get(AWS_INSTANCE_ID_PATH)
            except errors.ClawpointError:
                return None
            if resp.status_code == 200:
                self._instance_id = resp.text.strip() or None
        return self._instance_id

    def _node(self) -> str | None:
        return self._cfg.node or self.instance_id()

    def instance_action(self) -> InterruptionNotice | None:
        body = self._json(AWS_INSTANCE_ACTION_PATH)
        if body is None:
            return None
        raw = str(body.get("action", ""))
        try:
            action = InterruptionAction(raw.lower())
        except ValueError as exc:
            raise errors.OperationFailed(
                f"spot instance-action has unknown action {raw!r}",
                hint="expected terminate, stop or hibernate; report this response",
            ) from exc
        deadline = _parse_iso(str(body.get("time", "")), what="spot instance-action time")
        node = self._node()
        return InterruptionNotice(
            source="aws-imds",
            observed_at=self._clock(),
            subject=node,
            severity=severity_of(action),
            message=f"AWS will {action.value} this spot instance at {deadline.isoformat()}",
            provider=Provider.AWS,
            action=action,
            deadline=deadline,
            node=node,
            details={"endpoint": AWS_INSTANCE_ACTION_PATH},
        )

    def rebalance_recommendation(self) -> InterruptionNotice | None:
        body = self._json(AWS_REBALANCE_PATH)
        if body is None:
            return None
        notice_time = _parse_iso(str(body.get("noticeTime", "")), what="rebalance noticeTime")
        node = self._node()
        return InterruptionNotice(
            source="aws-imds",
            observed_at=self._clock(),
            subject=node,
            severity=Severity.WARNING,
            message="AWS recommends rebalancing: this spot instance is at elevated risk",
            provider=Provider.AWS,
            action=InterruptionAction.REBALANCE,
            deadline=None,
            node=node,
            details={"endpoint": AWS_REBALANCE_PATH, "noticeTime": notice_time.isoformat()},
        )

    def notices(self) -> list[InterruptionNotice]:
        found = [self.instance_action(), self.rebalance_recommendation()]
        return [n for n in found if n is not None]


# --- GCP --------------------------------------------------------------------------------


class GcpMetadataClient:
    """GCP: the instance's ``preempted`` flag (``TRUE`` once preemption has begun)."""

    def __init__(
        self, config: SignalsConfig, *, client: httpx2.Client | None = None, clock: Clock = utcnow
    ) -> None:
        self._cfg = config
        self._http = MetadataHttp(config.gcp.base_url, config, client=client)
        self._clock = clock
        self._first_seen: datetime | None = None
        self._name: str | None = None

    def close(self) -> None:
        self._http.close()

    def _get_text(self, path: str) -> str:
        resp = self._http.request("GET", path, headers=GCP_HEADERS)
        if resp.status_code != 200:
            raise _unexpected(resp, f"GET {path}")
        # The real server always echoes the flavor header; without it this is not GCP.
        if resp.headers.get("Metadata-Flavor") != "Google":
            raise errors.OperationFailed(
                f"GET {path}: answer lacks 'Metadata-Flavor: Google'",
                hint="something other than the GCP metadata server answered; check base_url",
            )
        return resp.text.strip()

    def preempted(self) -> bool:
        value = self._get_text(GCP_PREEMPTED_PATH)
        if value not in ("TRUE", "FALSE"):
            raise errors.OperationFailed(
                f"GCP preempted flag is {value!r}, expected TRUE or FALSE",
                hint="check base_url points at the metadata server",
            )
        return value == "TRUE"

    def _node(self) -> str | None:
        if self._cfg.node:
            return self._cfg.node
        if self._name is None:
            try:
                self._name = self._get_text(GCP_NAME_PATH) or None
            except errors.ClawpointError:
                return None
        return self._name

    def notices(self) -> list[InterruptionNotice]:
        if not self.preempted():
            self._first_seen = None
            return []
        now = self._clock()
        # The flag carries no time: the 30 s grace counts from when we first saw TRUE.
        self._first_seen = self._first_seen or now
        node = self._node()
        return [
            InterruptionNotice(
                source="gcp-metadata",
                observed_at=now,
                subject=node,
                severity=Severity.CRITICAL,
                message="GCP is preempting this instance",
                provider=Provider.GCP,
                action=InterruptionAction.PREEMPT,
                deadline=self._first_seen + timedelta(seconds=self._cfg.gcp.grace_s),
                deadline_estimated=True,
                node=node,
                details={"endpoint": GCP_PREEMPTED_PATH},
            )
        ]


# --- Azure ------------------------------------------------------------------------------


class AzureEvent(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    event_id: str = Field(alias="EventId")
    event_type: str = Field(alias="EventType")
    resource_type: str = Field(default="", alias="ResourceType")
    resources: list[str] = Field(default_factory=list, alias="Resources")
    event_status: str = Field(default="", alias="EventStatus")
    not_before: str = Field(default="", alias="NotBefore")


class ScheduledEvents(BaseModel):
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
            raise _unexpected(resp, "GET scheduledevents")
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


# --- polling ----------------------------------------------------------------------------


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
