"""Shared HTTP access to cloud instance metadata endpoints (used by aws, gcp, azure).

Short timeouts (metadata endpoints answer in milliseconds), no proxies (``trust_env=False``:
tokens must never reach an HTTP proxy), no redirects, and bounded retries of transient
faults (5xx, 429, read timeouts) with tenacity. A refused or timed-out *connection* is not
retried: it means "not on that cloud" and surfaces as ``BackendUnavailable`` with code
``metadata-unreachable``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

import httpx2
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from core import errors, logs
from core.signals.config import SignalsConfig
from core.signals.model import (
    InterruptionAction,
    Severity,
)

log = logs.get_logger("clawpoint.signals.metadata")

Clock = Callable[[], datetime]


class _Transient(Exception):
    """A fault worth one more try (5xx, 429, read timeout); never escapes this module."""


def severity_of(action: InterruptionAction) -> Severity:
    # Freeze pauses the VM for seconds and rebalance is advice: both leave time to react.
    if action in (InterruptionAction.FREEZE, InterruptionAction.REBALANCE):
        return Severity.WARNING
    if action is InterruptionAction.DRAIN:
        return Severity.WARNING
    return Severity.CRITICAL


def parse_iso(value: str, *, what: str) -> datetime:
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


def unexpected_status(resp: httpx2.Response, what: str) -> errors.OperationFailed:
    return errors.OperationFailed(
        f"{what}: unexpected HTTP {resp.status_code} from {resp.request.url}",
        hint="check the provider's base_url and that the metadata service is enabled",
        details={"status": resp.status_code, "body": resp.text[:200]},
    )
