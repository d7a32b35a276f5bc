"""AWS IMDSv2 client: spot instance-action and rebalance recommendation notices.

``PUT /latest/api/token`` with ``X-aws-ec2-metadata-token-ttl-seconds`` gives a session
token; every ``GET`` carries it in ``X-aws-ec2-metadata-token``. A 401 means the token
expired or was revoked: one new token is fetched and the request repeated.
``spot/instance-action`` is 404 until the instance is marked, then
``{"action": "terminate"|"stop"|"hibernate", "time": "...Z"}`` (about two minutes ahead);
``events/recommendations/rebalance`` is 404 or ``{"noticeTime": "...Z"}`` (no deadline).
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx2

from core import errors, logs
from core.signals.config import SignalsConfig
from core.signals.metadata import Clock, MetadataHttp, parse_iso, severity_of, unexpected_status
from core.signals.model import (
    InterruptionAction,
    InterruptionNotice,
    Provider,
    Severity,
    utcnow,
)

log = logs.get_logger("clawpoint.signals.aws")

AWS_TOKEN_PATH = "/latest/api/token"
AWS_TOKEN_TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
AWS_TOKEN_HEADER = "X-aws-ec2-metadata-token"
AWS_INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
AWS_REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
AWS_INSTANCE_ID_PATH = "/latest/meta-data/instance-id"


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
            raise unexpected_status(resp, "IMDSv2 token request")
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
            raise unexpected_status(resp, f"GET {path}")
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
        deadline = parse_iso(str(body.get("time", "")), what="spot instance-action time")
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
        notice_time = parse_iso(str(body.get("noticeTime", "")), what="rebalance noticeTime")
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
