"""The approval page defends itself before any login: the installed ``clawpoint serve --http``
on loopback, reached with a real HTTP client and raw sockets.

- a 1 GiB login body is refused with 413 without being read: declared, answered at once;
  streamed (chunked), the server answers and closes while the client is still sending, and
  its memory does not grow;
- wrong tokens from one address are throttled (429 with Retry-After), even the right one;
- a request for another Host name is refused (421);
- weak tokens: ``serve --http`` refuses to start, ``config check`` reports an error.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from core.guardrails.tokens import MIN_TOKEN_CHARS

ROOT = Path(__file__).resolve().parents[2]
CLAWPOINT = ROOT / ".venv" / "bin" / "clawpoint"
GIB = 1 << 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(CLAWPOINT_HOME=str(home), PYTHONPATH=str(ROOT), COLUMNS="300", **extra)
    return env


@dataclass
class Page:
    port: int
    approver: str
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/approvals"

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    port = _free_port()
    approver = "approver-" + os.urandom(16).hex()
    env = _env(
        tmp_path, CLAWPOINT_MCP_TOKEN="agent-" + os.urandom(16).hex(),
        CLAWPOINT_APPROVER_TOKEN=approver,
    )  # fmt: skip
    proc = subprocess.Popen(
        [str(CLAWPOINT), "serve", "--http", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    server = Page(port, approver, proc)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, "the server exited"
        try:
            httpx2.get(server.url, timeout=1)
            break
        except httpx2.TransportError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    yield server
    proc.terminate()
    proc.wait(timeout=10)


def _raw(port: int, head: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head.encode())
    return sock


def _status_line(sock: socket.socket) -> str:
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, "connection closed without an answer"
        data += chunk
    return data.split(b"\r\n", 1)[0].decode()


def test_huge_declared_body_is_refused_before_it_is_read(page: Page) -> None:
    sock = _raw(
        page.port,
        f"POST /approvals/login HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {GIB}\r\n\r\n",
    )
    with sock:
        # Not one byte of the body was sent: only a server that does not wait for it answers.
        assert _status_line(sock).startswith("HTTP/1.1 413")


def test_huge_streamed_body_is_cut_off_and_costs_no_memory(page: Page) -> None:
    before = page.rss_kib()
    sock = _raw(
        page.port,
        f"POST /approvals/login HTTP/1.1\r\nHost: 127.0.0.1:{page.port}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    chunk = b"%x\r\n%s\r\n" % (1 << 16, b"t" * (1 << 16))
    sent = 0
    closed = False
    with sock:
        try:
            while sent < GIB:  # the whole GiB, unless the server hangs up first
                sock.sendall(chunk)
                sent += 1 << 16
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        if not closed:
            sock.sendall(b"0\r\n\r\n")
        answer = b""
        try:
            answer = sock.recv(4096)
        except ConnectionResetError:
            pass
    assert closed, f"the server read all {sent >> 20} MiB"
    assert sent < 64 << 20, f"the server read {sent >> 20} MiB before closing"
    assert not answer or answer.startswith(b"HTTP/1.1 413")
    grown = page.rss_kib() - before
    assert grown < 32 * 1024, f"the server grew by {grown} KiB"
    # And it still serves.
    assert httpx2.get(page.url, timeout=10).status_code == 200


def test_wrong_tokens_are_throttled_per_address(page: Page) -> None:
    with httpx2.Client(timeout=30, follow_redirects=False) as http:
        for i in range(5):
            r = http.post(f"{page.url}/login", data={"token": f"wrong-{i}"})
            assert r.status_code == 401, r.status_code
        r = http.post(f"{page.url}/login", data={"token": "wrong-again"})
        assert r.status_code == 429
        assert 1 <= int(r.headers["retry-after"]) <= 60
        # Even the right token waits: guessing cannot go on at any speed.
        r = http.post(f"{page.url}/login", data={"token": page.approver})
        assert r.status_code == 429 and "set-cookie" not in r.headers


def test_other_host_names_are_refused(page: Page) -> None:
    with httpx2.Client(timeout=30, follow_redirects=False) as http:
        for host in ("evil.example", f"evil.example:{page.port}", "127.0.0.1.nip.example"):
            r = http.get(page.url, headers={"Host": host})
            assert r.status_code == 421, (host, r.status_code)
            r = http.post(f"{page.url}/login", headers={"Host": host},
                          data={"token": page.approver})  # fmt: skip
            assert r.status_code == 421 and "set-cookie" not in r.headers
        for host in (f"127.0.0.1:{page.port}", f"localhost:{page.port}"):
            assert http.get(page.url, headers={"Host": host}).status_code == 200
        r = http.post(f"{page.url}/login", data={"token": page.approver})
        assert r.status_code == 303  # the control: the right name and token log in


@pytest.mark.parametrize(
    ("agent", "approver"),
    [
        ("x", None),  # a 1-character agent token
        ("a" * 40, None),  # long but one character repeated
        ("agent-" + "0123456789abcdef" * 2, "approver"),  # a weak approver token
    ],
)
def test_weak_tokens_are_refused(tmp_path: Path, agent: str, approver: str | None) -> None:
    extra = {"CLAWPOINT_MCP_TOKEN": agent} | (
        {"CLAWPOINT_APPROVER_TOKEN": approver} if approver else {}
    )
    env = _env(tmp_path, **extra)
    serve = subprocess.run(
        [str(CLAWPOINT), "serve", "--http", "--port", str(_free_port())],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert serve.returncode == 2, serve.stderr
    assert "too weak" in serve.stderr and "secrets.token_urlsafe(32)" in serve.stderr
    check = subprocess.run(
        [str(CLAWPOINT), "config", "check"], env=env, capture_output=True, text=True, timeout=60
    )
    assert check.returncode != 0
    assert "too weak" in check.stdout and "HTTP bearer token configured" not in check.stdout
    assert len("agent-" + os.urandom(16).hex()) >= MIN_TOKEN_CHARS  # what the tests use
