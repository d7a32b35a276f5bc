"""Fake cloud metadata servers that answer exactly like the documented endpoints.

Each fake is a Starlette app served by uvicorn on 127.0.0.1 (a free port) in a background
thread; flip its state at run time and point a client at ``fake.url``.

``FakeAwsImds`` (AWS instance metadata service):
    - ``PUT /latest/api/token`` needs ``X-aws-ec2-metadata-token-ttl-seconds`` (1..21600;
      otherwise 400) and is refused (403) when ``X-Forwarded-For`` is present; it returns
      the token as text/plain and echoes the TTL header.
    - ``GET /latest/meta-data/...`` needs a live ``X-aws-ec2-metadata-token`` (401 without
      or with an expired one) unless ``imds_v2_required=False`` (IMDSv1 also accepted).
    - ``spot/instance-action``: 404 (HTML body, like the real one) until
      ``mark_instance_action(action, in_seconds)``; then ``{"action", "time": "...Z"}``.
    - ``events/recommendations/rebalance``: 404 until ``mark_rebalance()``; then
      ``{"noticeTime": "...Z"}``.
    - ``instance-id``: ``fake.instance_id``.
    - ``expire_tokens()`` invalidates every token handed out (the next GET gets 401);
      ``fail_next(n, status)`` answers the next ``n`` requests with ``status`` (e.g. 503);
      ``requests`` logs ``(method, path, headers)`` of everything received.

``FakeGcpMetadata``: ``GET /computeMetadata/v1/instance/preempted`` -> ``TRUE``/``FALSE``
(``set_preempted``); ``instance/name``. 403 without ``Metadata-Flavor: Google`` or with
``X-Forwarded-For``; answers carry ``Metadata-Flavor: Google``.

``FakeAzureEvents``: ``GET /metadata/scheduledevents?api-version=...`` with
``Metadata: true`` (400 JSON error without it or without api-version);
``add_event(...)`` / ``start_event(id)`` / ``clear_events()``; ``DocumentIncarnation``
increases on every change, as on Azure.

Use as context managers (``with FakeAwsImds() as imds:``) or via the conftest fixtures.
"""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

_AWS_404 = (
    '<?xml version="1.0" encoding="iso-8859-1"?>\n'
    '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"\n'
    '\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">\n'
    '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">\n'
    " <head>\n  <title>404 - Not Found</title>\n </head>\n <body>\n"
    "  <h1>404 - Not Found</h1>\n </body>\n</html>\n"
)


def _iso_z(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeServer:
    """Serve a Starlette app with uvicorn on 127.0.0.1:<free port> in a daemon thread."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._fail: list[int] = []
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def routes(self) -> list[Route]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail_next(self, count: int, status: int = 503) -> None:
        with self._lock:
            self._fail.extend([status] * count)

    def _wrap(self, handler: Callable[[Request], Response]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            with self._lock:
                self.requests.append(
                    (
                        request.method,
                        request.url.path,
                        {k.lower(): v for k, v in request.headers.items()},
                    )
                )
                status = self._fail.pop(0) if self._fail else None
            if status is not None:
                return PlainTextResponse("injected failure", status_code=status)
            with self._lock:
                return handler(request)

        return endpoint

    def start(self) -> Self:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        app = Starlette(routes=self.routes())
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        server = self._server
        self._thread = threading.Thread(target=lambda: server.run(sockets=[sock]), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("fake server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeAwsImds(FakeServer):
    def __init__(
        self, *, imds_v2_required: bool = True, instance_id: str = "i-0abc123def4567890"
    ) -> None:
        super().__init__()
        self.imds_v2_required = imds_v2_required
        self.instance_id = instance_id
        self._tokens: dict[str, float] = {}  # token -> monotonic expiry
        self._action: dict[str, str] | None = None
        self._rebalance: dict[str, str] | None = None
        self.tokens_issued = 0

    # -- run-time flips
    def mark_instance_action(self, action: str = "terminate", in_seconds: float = 120) -> datetime:
        when = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=in_seconds)
        with self._lock:
            self._action = {"action": action, "time": _iso_z(when)}
        return when

    def clear_instance_action(self) -> None:
        with self._lock:
            self._action = None

    def mark_rebalance(self, at: datetime | None = None) -> datetime:
        when = (at or datetime.now(UTC)).replace(microsecond=0)
        with self._lock:
            self._rebalance = {"noticeTime": _iso_z(when)}
        return when

    def clear_rebalance(self) -> None:
        with self._lock:
            self._rebalance = None

    def expire_tokens(self) -> None:
        with self._lock:
            self._tokens.clear()

    # -- endpoints
    def routes(self) -> list[Route]:
        return [
            Route("/latest/api/token", self._wrap(self._token), methods=["PUT", "GET", "POST"]),
            Route("/latest/meta-data/{path:path}", self._wrap(self._meta), methods=["GET"]),
        ]

    def _token(self, request: Request) -> Response:
        if request.method != "PUT":
            return PlainTextResponse("", status_code=405)
        if "x-forwarded-for" in request.headers:
            return PlainTextResponse("", status_code=403)
        raw = request.headers.get("x-aws-ec2-metadata-token-ttl-seconds")
        if raw is None or not raw.isdigit() or not 1 <= int(raw) <= 21600:
            return PlainTextResponse("", status_code=400)
        token = secrets.token_urlsafe(42)
        self._tokens[token] = time.monotonic() + int(raw)
        self.tokens_issued += 1
        return PlainTextResponse(token, headers={"X-aws-ec2-metadata-token-ttl-seconds": raw})

    def _authorised(self, request: Request) -> bool:
        token = request.headers.get("x-aws-ec2-metadata-token")
        if token is None:
            return not self.imds_v2_required
        expiry = self._tokens.get(token)
        return expiry is not None and time.monotonic() < expiry

    def _meta(self, request: Request) -> Response:
        if not self._authorised(request):
            return PlainTextResponse("", status_code=401)
        path = request.path_params["path"]
        if path == "spot/instance-action" and self._action is not None:
            return PlainTextResponse(_compact(self._action))
        if path == "events/recommendations/rebalance" and self._rebalance is not None:
            return PlainTextResponse(_compact(self._rebalance))
        if path == "instance-id":
            return PlainTextResponse(self.instance_id)
        return Response(_AWS_404, status_code=404, media_type="text/html")


def _compact(body: dict[str, str]) -> str:
    return json.dumps(body)


class FakeGcpMetadata(FakeServer):
    def __init__(self, *, instance_name: str = "gpu-worker-1") -> None:
        super().__init__()
        self.instance_name = instance_name
        self._preempted = False

    def set_preempted(self, value: bool = True) -> None:
        with self._lock:
            self._preempted = value

    def routes(self) -> list[Route]:
        return [Route("/computeMetadata/v1/{path:path}", self._wrap(self._meta), methods=["GET"])]

    def _meta(self, request: Request) -> Response:
        if (
            "x-forwarded-for" in request.headers
            or request.headers.get("metadata-flavor") != "Google"
        ):
            # The real server refuses requests that lack the header (SSRF protection).
            return Response(
                "Missing required header: Metadata-Flavor\n",
                status_code=403,
                media_type="text/html",
            )
        headers = {"Metadata-Flavor": "Google"}
        path = request.path_params["path"]
        if path == "instance/preempted":
            body = "TRUE" if self._preempted else "FALSE"
        elif path == "instance/name":
            body = self.instance_name
        else:
            return Response("Not Found\n", status_code=404, media_type="text/html", headers=headers)
        return Response(body, media_type="application/text", headers=headers)


class FakeAzureEvents(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.incarnation = 1
        self._events: list[dict[str, Any]] = []

    def add_event(
        self,
        event_type: str = "Preempt",
        *,
        in_seconds: float = 30,
        resources: list[str] | None = None,
        resource_type: str = "VirtualMachine",
        status: str = "Scheduled",
    ) -> str:
        not_before = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=in_seconds)
        event_id = str(uuid.uuid4()).upper()
        with self._lock:
            self._events.append(
                {
                    "EventId": event_id,
                    "EventType": event_type,
                    "ResourceType": resource_type,
                    "Resources": resources or ["vmss_vm1"],
                    "EventStatus": status,
                    "NotBefore": format_datetime(not_before, usegmt=True),
                    "Description": "",
                    "EventSource": "Platform",
                    "DurationInSeconds": -1,
                }
            )
            self.incarnation += 1
        return event_id

    def start_event(self, event_id: str) -> None:
        with self._lock:
            for ev in self._events:
                if ev["EventId"] == event_id:
                    ev["EventStatus"] = "Started"
                    ev["NotBefore"] = ""  # Azure blanks it once the event starts
            self.incarnation += 1

    def clear_events(self) -> None:
        with self._lock:
            self._events = []
            self.incarnation += 1

    def routes(self) -> list[Route]:
        return [Route("/metadata/scheduledevents", self._wrap(self._events_doc), methods=["GET"])]

    def _events_doc(self, request: Request) -> Response:
        if request.headers.get("metadata") != "true":
            return JSONResponse(
                {"error": "Bad request. Required metadata header not specified"}, status_code=400
            )
        if "api-version" not in request.query_params:
            return JSONResponse(
                {"error": "Bad request. api-version was not specified in the request"},
                status_code=400,
            )
        return JSONResponse(
            {"DocumentIncarnation": self.incarnation, "Events": [dict(e) for e in self._events]}
        )


class BlackHole:
    """A TCP port that accepts connections and never answers (a hung metadata service)."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)  # the kernel completes handshakes; nobody reads
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def close(self) -> None:
        self._sock.close()


def closed_port_url() -> str:
    """A 127.0.0.1 URL where nothing listens (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class FakeFeed(FakeServer):
    """Serve one document (a price feed) at ``/feed`` with a given content type."""

    def __init__(self, body: str, media_type: str = "application/json") -> None:
        super().__init__()
        self.body = body
        self.media_type = media_type

    def routes(self) -> list[Route]:
        return [Route("/feed", self._wrap(self._feed), methods=["GET"])]

    def _feed(self, request: Request) -> Response:
        return Response(self.body, media_type=self.media_type)
