"""GCP metadata client: the instance's ``preempted`` flag.

``GET /computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor: Google`` answers
``TRUE`` or ``FALSE`` (the real server refuses requests without the header with 403, and
always answers with the header; an answer without it is not from GCP). The flag carries no
time: the documented 30 s grace is counted from when we first saw ``TRUE`` and the notice
says so (``deadline_estimated``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import httpx2

from core import errors
from core.signals.config import SignalsConfig
from core.signals.metadata import Clock, MetadataHttp, unexpected_status
from core.signals.model import (
    InterruptionAction,
    InterruptionNotice,
    Provider,
    Severity,
    utcnow,
)

GCP_PREEMPTED_PATH = "/computeMetadata/v1/instance/preempted"
GCP_NAME_PATH = "/computeMetadata/v1/instance/name"
GCP_HEADERS = {"Metadata-Flavor": "Google"}


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
            raise unexpected_status(resp, f"GET {path}")
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
