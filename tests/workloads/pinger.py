"""A client that pings a real server every 10 ms and records what a user of it would see.

``Pinger(request)`` runs ``request()`` (one round trip to the server: a Redis PING, an HTTP GET,
a MariaDB greeting, a PostgreSQL SSLRequest) on a thread every ``interval_s``. A request that
raises is retried once after ``retry_after_s`` (default ``interval_s``; reconnecting: the
request functions open a fresh connection each time, since a checkpoint restores TCP
connections closed); a request whose retry also fails counts as failed. ``window()`` measures one operation: the longest gap between two successful
round trips, and the requests that failed, while it was open.

Used by tests/workloads/test_real_software.py (which records the figures, never asserts on
them) and bench/real_software.py (which reports them). Limits: one client, one request in
flight; the gap includes the request's own round trip, so it is a client's view, not the
server's frozen time.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class Window:
    """What the client saw while one operation ran."""

    longest_gap_s: float = 0.0
    ok: int = 0
    failed: int = 0  # the request and its one retry both failed
    retried: int = 0  # the request failed, its retry succeeded
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "gap_ms": round(self.longest_gap_s * 1000, 1),
            "ok": self.ok,
            "failed": self.failed,
            "retried": self.retried,
            "errors": sorted(set(self.errors))[:5],
        }


class Pinger:
    def __init__(
        self,
        request: Callable[[], None],
        interval_s: float = 0.01,
        retry_after_s: float | None = None,
    ) -> None:
        self.request = request
        self.interval_s = interval_s
        self.retry_after_s = interval_s if retry_after_s is None else retry_after_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._window: Window | None = None
        self._last_ok: float | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name="pinger")

    def __enter__(self) -> Pinger:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _attempt(self) -> str | None:
        try:
            self.request()
        except (OSError, ValueError) as e:
            return f"{type(e).__name__}: {e}"[:120]
        return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            err = self._attempt()
            retried = False
            if err is not None:
                time.sleep(self.retry_after_s)
                retried = True
                err2 = self._attempt()
            now = time.monotonic()
            with self._lock:
                w = self._window
                if err is None or (retried and err2 is None):
                    if w is not None:
                        w.ok += 1
                        w.retried += retried
                        if self._last_ok is not None:
                            w.longest_gap_s = max(w.longest_gap_s, now - self._last_ok)
                    self._last_ok = now
                elif w is not None:
                    w.failed += 1
                    w.errors.append(err2 or err or "")
            time.sleep(self.interval_s)

    @contextlib.contextmanager
    def window(self) -> Iterator[Window]:
        """Measure what happens inside the ``with`` block; the window closes at the first
        successful request after the block (the client saw the server back)."""
        w = Window()
        with self._lock:
            self._window = w
        try:
            yield w
        finally:
            mark = time.monotonic()
            deadline = mark + 30
            while time.monotonic() < deadline:
                with self._lock:
                    if self._last_ok is not None and self._last_ok > mark:
                        break
                time.sleep(self.interval_s)
            with self._lock:
                self._window = None


def _connect(port: int, timeout_s: float) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=timeout_s)


def _read_until(sock: socket.socket, done: Callable[[bytes], bool]) -> bytes:
    buf = b""
    while not done(buf):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} bytes")
        buf += chunk
    return buf


def redis_ping(port: int, timeout_s: float = 5.0) -> Callable[[], None]:
    def request() -> None:
        with _connect(port, timeout_s) as s:
            s.sendall(b"PING\r\n")
            reply = _read_until(s, lambda b: b.endswith(b"\r\n"))
            if reply != b"+PONG\r\n":
                raise ValueError(f"redis replied {reply!r}")

    return request


def http_get(port: int, path: str = "/", timeout_s: float = 5.0) -> Callable[[], None]:
    """GET ``path`` and read the whole body (Content-Length), status 200 required."""

    def request() -> None:
        http_fetch(port, path, timeout_s)

    return request


def http_fetch(port: int, path: str = "/", timeout_s: float = 5.0) -> bytes:
    with _connect(port, timeout_s) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        head = _read_until(s, lambda b: b"\r\n\r\n" in b)
        header, _, body = head.partition(b"\r\n\r\n")
        lines = header.decode("latin-1").split("\r\n")
        if " 200 " not in lines[0] + " ":
            raise ValueError(f"HTTP status {lines[0]!r}")
        length = next(
            (
                int(v)
                for k, _, v in (x.partition(":") for x in lines[1:])
                if k.lower() == "content-length"
            ),
            None,
        )
        if length is None:
            raise ValueError("no Content-Length in the reply")
        while len(body) < length:
            chunk = s.recv(min(1 << 20, length - len(body)))
            if not chunk:
                raise ConnectionError(f"body cut at {len(body)} of {length} bytes")
            body += chunk
        return body


def pg_ping(port: int, timeout_s: float = 5.0) -> Callable[[], None]:
    """PostgreSQL's postmaster answers an SSLRequest with one byte ('N': no SSL here): a
    round trip through the server's accept loop and a forked backend, without a login."""

    def request() -> None:
        with _connect(port, timeout_s) as s:
            s.sendall((8).to_bytes(4, "big") + (80877103).to_bytes(4, "big"))
            reply = _read_until(s, lambda b: len(b) >= 1)
            if reply[:1] not in (b"N", b"S"):
                raise ValueError(f"postgres replied {reply!r}")

    return request


def mysql_ping(port: int, timeout_s: float = 5.0) -> Callable[[], None]:
    """A MySQL/MariaDB server speaks first: its handshake packet (protocol version 10) is
    one round trip through the server's accept loop and a connection thread, without a
    login."""

    def request() -> None:
        with _connect(port, timeout_s) as s:
            head = _read_until(s, lambda b: len(b) >= 5)
            if head[4] != 10:
                raise ValueError(f"mariadb sent {head[:16]!r}")

    return request
