"""The approval page under floods: the installed ``clawpoint serve --http``, raw sockets.

- wrong logins sent all at once are counted when they arrive, before their bodies are read:
  60 at once from one address get at most 5 x 401, the rest 429;
- wrong logins from many addresses share one budget: past it even a fresh address waits;
- a Host header is parsed into name and port (``127.0.0.1:1@evil.example`` is refused with
  421, on the page and on ``/mcp``);
- the list of pending requests comes a page at a time, with links to the next page.
"""

# ruff: noqa: F811 (the tests take the imported ``page`` fixture as their argument)
from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import httpx2

from core.config import load_settings
from core.guardrails.approvals import ApprovalsConfig
from core.guardrails.desk import PAGE_SIZE
from core.model import Principal, PrincipalKind
from core.service.facade import bootstrap
from mcp_server.approval_page import LOGIN_FAILURES, LOGIN_GLOBAL_FAILURES
from tests.guardrails.conftest import make_plan

# That module's ``page`` fixture (a server per test), used here by its name.
from tests.mcp.test_approval_page_http import Page, _status_line, page  # noqa: F401


def _login_head(port: int, length: int) -> bytes:
    return (
        f"POST /approvals/login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
    ).encode()


def _login(port: int, token: str, *, source: str = "127.0.0.1") -> int:
    """POST a login from ``source`` (any 127.x address is this machine); the status code."""
    body = f"token={token}".encode()
    with socket.socket() as sock:
        sock.settimeout(30)
        sock.bind((source, 0))
        sock.connect(("127.0.0.1", port))
        sock.sendall(_login_head(port, len(body)) + body)
        return int(_status_line(sock).split()[1])


def test_logins_sent_at_once_are_counted_before_their_bodies(page: Page) -> None:
    body = b"token=wrong-token"
    socks = []
    try:
        for _ in range(60):  # 60 logins whose headers arrive before any body
            sock = socket.create_connection(("127.0.0.1", page.port), timeout=30)
            sock.sendall(_login_head(page.port, len(body)))
            socks.append(sock)
        time.sleep(1.0)  # the server has read every request's headers by now
        for sock in socks:
            try:
                sock.sendall(body)
            except OSError:  # refused and closed before its body: what a 429 does
                pass
        codes = [int(_status_line(sock).split()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    assert codes.count(401) <= LOGIN_FAILURES, codes
    assert codes.count(429) >= 60 - LOGIN_FAILURES, codes
    assert set(codes) <= {401, 429}, codes


def test_wrong_logins_from_many_addresses_share_one_budget(page: Page) -> None:
    per_address = LOGIN_FAILURES - 1  # never enough for one address's own limit
    codes = []
    for n in range(2, 2 + LOGIN_GLOBAL_FAILURES // per_address + 1):
        codes += [_login(page.port, "wrong", source=f"127.0.0.{n}") for _ in range(per_address)]
    assert codes[:LOGIN_GLOBAL_FAILURES] == [401] * LOGIN_GLOBAL_FAILURES, codes
    assert set(codes[LOGIN_GLOBAL_FAILURES:]) == {429}, codes
    # A fresh address waits too, even with the right token.
    assert _login(page.port, page.approver, source="127.0.0.99") == 429


def test_host_headers_are_parsed_not_prefix_matched(page: Page) -> None:
    bad = ("127.0.0.1:1@evil.example", f"127.0.0.1:{page.port}@evil.example",
           "127.0.0.1:80/evil", "localhost:1 evil", "127.0.0.1:99999", "[::1]:1@evil.example")  # fmt: skip
    with httpx2.Client(timeout=30, follow_redirects=False) as http:
        for host in bad:
            r = http.get(page.url, headers={"Host": host})
            assert r.status_code == 421, (host, r.status_code)
            r = http.post(f"http://127.0.0.1:{page.port}/mcp", headers={"Host": host}, json={})
            assert r.status_code == 421, (host, r.status_code)
        for host in (f"127.0.0.1:{page.port}", f"localhost:{page.port}", "LOCALHOST", "127.0.0.1"):
            assert http.get(page.url, headers={"Host": host}).status_code == 200, host


def test_the_pending_list_comes_a_page_at_a_time(page: Page, tmp_path: Path) -> None:
    service = bootstrap(load_settings(tmp_path))
    store = service.guard.approvals
    store.config = ApprovalsConfig(max_pending_per_principal=100)
    agent = Principal(id="mcp:flood", kind=PrincipalKind.AGENT)
    count = PAGE_SIZE + 10
    ids = [store.create(make_plan(target=f"local:j{i}"), agent, "x").id for i in range(count)]
    with httpx2.Client(timeout=30, follow_redirects=True) as http:
        r = http.post(f"{page.url}/login", data={"token": page.approver, "name": "alice"})
        assert r.status_code == 200 and f"Pending approvals ({count})" in r.text
        shown = re.findall(r'href="/approvals/(apr-[0-9a-f]+)"', r.text)
        assert len(shown) == PAGE_SIZE and 'rel="next" href="/approvals?page=2"' in r.text
        r = http.get(page.url, params={"page": "2"})
        assert r.status_code == 200
        rest = re.findall(r'href="/approvals/(apr-[0-9a-f]+)"', r.text)
        assert sorted(shown + rest) == sorted(ids)  # each once, none skipped
        assert 'rel="next"' not in r.text and 'rel="prev" href="/approvals?page=1"' in r.text
        assert http.get(page.url, params={"page": "<script>"}).status_code == 400
        assert http.get(page.url, params={"page": "0"}).status_code == 400
