"""Fixtures for the watch tests: the service fixtures, the fake metadata servers, and a
local webhook receiver (127.0.0.1) that records what the notifier posts."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.service.conftest import need_criu, service, settings  # noqa: F401
from tests.signals.conftest import aws_imds, signals_config  # noqa: F401


class Receiver:
    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        received = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.append(json.loads(body or b"{}"))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()
