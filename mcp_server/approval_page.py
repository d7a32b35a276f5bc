"""The approval web page: people log in with an approver token, read a request, approve or deny.

Server-rendered HTML, no JavaScript, nothing loaded from elsewhere (a strict CSP says so).
The list is the people's desk (``core.guardrails.desk``: grouped by workload, the soonest
deadline from the evidence first, a page at a time); a request shows its facts
(``core.guardrails.request_facts``) and, once decided, the execution's steps and result,
reloading itself while it moves (``mcp_server.desk_html`` renders them). Given a
``DeskViews``, the same login also opens the read views (workloads, nodes, executions, the
audit trail; ``core.service.desk_views``, rendered by ``mcp_server.desk_views_html``), linked
from every desk page.
Login posts the approver token once; the page then keeps a random session id in an
HttpOnly, SameSite=Strict cookie scoped to the page's path. Every state-changing form
carries a per-session CSRF token that is checked, and cross-origin posts are refused.
Requests carrying an ``Authorization`` header are refused outright: that is how agents and
MCP clients authenticate, and no agent credential should ever work here (the caller's
``approver_token_ok`` must also reject agent tokens). The page only calls an
``ApprovalDesk``; the approval store behind it enforces that approvers are people other than
the requester.

Before any login is believed, the page defends itself: a request whose ``Host`` is not one
the server answers to is refused with 421 (DNS rebinding: a web page in the approver's
browser cannot reach it under another name); a form body is read as a stream and reading
stops past ``MAX_FORM_BYTES`` (413, connection closed), so a huge unauthenticated POST costs
nothing; and each client address gets ``LOGIN_FAILURES`` wrong tokens per
``LOGIN_WINDOW_S`` before logins from it are answered 429 with ``Retry-After``. Everything
shown is HTML-escaped (an agent's reason is data). Limits: sessions and the throttle live in
this process's memory (a restart logs people out and forgets failures); behind a reverse
proxy every client has the proxy's address, so the throttle is shared; serve it over HTTPS or
on 127.0.0.1 only, since the token crosses the wire at login.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import math
import re
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from core import errors
from core.guardrails.approvals import ApprovalStatus, ApprovalView
from core.guardrails.desk import PAGE_SIZE, DeskPage, Outcome
from core.guardrails.prompts import format_code
from core.guardrails.request_facts import RequestFacts
from core.model import Principal, PrincipalKind
from core.service.desk_views import AuditView, ExecutionsView, NodesView, WorkloadsView
from mcp_server import desk_html, desk_views_html

COOKIE = "clawpoint_approver"
SESSION_LIFETIME = timedelta(hours=8)
MAX_FORM_BYTES = 16 * 1024  # the page's own forms are a few hundred bytes
LOGIN_FAILURES = 5  # wrong tokens per client address per window, then 429
LOGIN_GLOBAL_FAILURES = 20  # wrong tokens from all addresses together per window, then 429
LOGIN_WINDOW_S = 60.0
_MAX_CLIENTS = 10_000  # addresses remembered by the throttle (oldest forgotten first)
_PAGE_RE = re.compile(r"^[1-9][0-9]{0,6}$")
_ID_RE = re.compile(r"^apr-[0-9a-f]{1,32}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}$")
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)


class ApprovalDesk(Protocol):
    """What the page needs from the service (people-side operations only)."""

    def desk_page(self, page: int, size: int) -> DeskPage:
        """Page ``page`` (from 1) of the pending requests, grouped, urgent first."""
        ...

    def facts(self, view: ApprovalView) -> RequestFacts:
        """What the request says, with the situation now."""
        ...

    def outcome(self, view: ApprovalView) -> Outcome:
        """After a decision: its execution and the workload now."""
        ...

    def get(self, approval_id: str) -> ApprovalView: ...
    def approve(self, approval_id: str, principal: Principal) -> ApprovalView: ...
    def deny(self, approval_id: str, principal: Principal, why: str) -> ApprovalView: ...
    def reveal_code(self, approval_id: str) -> str: ...


class DeskViews(Protocol):
    """The read views a person may open next to the requests (pages from 1)."""

    def workloads(self, page: int) -> WorkloadsView: ...
    def nodes(self, page: int) -> NodesView: ...
    def executions(self, page: int) -> ExecutionsView: ...
    def audit(self, page: int) -> AuditView: ...


class _TooLarge(Exception):
    """The form body is larger than MAX_FORM_BYTES (raised before it is all read)."""


class LoginThrottle:
    """Login attempts per client address, and all together, in a sliding window.

    An attempt is counted when it starts (``attempt``), before its body is read, so many
    attempts sent at once are counted at once: the ``limit``-th attempt of one address and
    the ``global_limit``-th of all addresses together within ``window_s`` are the last let
    through; the rest wait (429). A successful login takes its own attempt back
    (``succeeded``). The global budget bounds guessing from many addresses (or behind one
    proxy) at the price that a flood of wrong tokens also makes a real approver wait, at
    most ``window_s``; people already logged in are not affected.

    ``clock`` is injectable so tests need not sleep. Memory is bounded: at most
    ``_MAX_CLIENTS`` addresses, each with at most ``limit`` timestamps, and ``global_limit``
    timestamps in all.
    """

    def __init__(
        self,
        *,
        limit: int = LOGIN_FAILURES,
        global_limit: int = LOGIN_GLOBAL_FAILURES,
        window_s: float = LOGIN_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.global_limit = global_limit
        self.window_s = window_s
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._everyone: deque[float] = deque()

    def _prune(self, times: deque[float]) -> deque[float]:
        now = self._clock()
        while times and now - times[0] >= self.window_s:
            times.popleft()
        return times

    def _recent(self, client: str) -> deque[float]:
        failures = self._prune(self._failures.get(client, deque()))
        if not failures:
            self._failures.pop(client, None)
        return failures

    def retry_after(self, client: str) -> int | None:
        """Seconds this client must wait before it may try again; None when it may now."""
        waits = []
        failures = self._recent(client)
        if len(failures) >= self.limit:
            waits.append(failures[0])
        if len(self._prune(self._everyone)) >= self.global_limit:
            waits.append(self._everyone[0])
        if not waits:
            return None
        return max(1, math.ceil(max(waits) + self.window_s - self._clock()))

    def attempt(self, client: str) -> int | None:
        """Count an attempt now, before anything the client sent is read; the seconds to
        wait instead when it is over a budget (then nothing is counted)."""
        wait = self.retry_after(client)
        if wait is None:
            self.failed(client)
        return wait

    def failed(self, client: str) -> None:
        now = self._clock()
        failures = self._recent(client)
        failures.append(now)
        while len(failures) > self.limit:
            failures.popleft()
        self._failures.pop(client, None)
        self._failures[client] = failures  # newest last: the oldest are forgotten first
        while len(self._failures) > _MAX_CLIENTS:
            self._failures.pop(next(iter(self._failures)))
        self._prune(self._everyone).append(now)
        while len(self._everyone) > self.global_limit:
            self._everyone.popleft()

    def succeeded(self, client: str) -> None:
        """The right token: forget this address's failures and give its attempt back."""
        mine = self._failures.pop(client, None)
        if mine and mine[-1] in self._everyone:
            self._everyone.remove(mine[-1])


_HOST_RE = re.compile(
    r"^(?P<name>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?)"
    r"(?::(?P<port>[0-9]{1,5}))?$"
)


def parse_host(host: str) -> tuple[str, int | None] | None:
    """A ``Host`` header as (name, port): a DNS name or IPv4 address, or a bracketed IPv6
    address, then an optional port from 0 to 65535. Anything else (userinfo such as
    ``127.0.0.1:1@evil.example``, a path, spaces, two colons) is None: not a host."""
    match = _HOST_RE.fullmatch(host)
    if match is None:
        return None
    port = match["port"]
    if port is not None and int(port) > 65535:
        return None
    return match["name"].lower(), (int(port) if port is not None else None)


def host_allowed(host: str | None, allowed: Sequence[str]) -> bool:
    """Whether a Host header names this server: an exact entry (``NAME`` without a port or
    ``NAME:PORT``), or ``NAME:*`` for NAME with any port. Both sides are parsed into name and
    port and compared as such, never as prefixes of each other."""
    parsed = parse_host(host) if host else None
    if parsed is None:
        return False
    name, port = parsed
    for entry in allowed:
        if entry.endswith(":*"):
            want = parse_host(entry[:-2])
            if want is not None and want[1] is None and want[0] == name and port is not None:
                return True
        elif parse_host(entry) == parsed:
            return True
    return False


@dataclass
class _Session:
    principal: Principal
    csrf: str
    created: datetime = field(default_factory=lambda: datetime.now(UTC))


def approval_routes(
    desk: ApprovalDesk,
    *,
    approver_token_ok: Callable[[str], bool],
    prefix: str = "/approvals",
    allowed_hosts: Sequence[str] | None = None,
    throttle: LoginThrottle | None = None,
    views: DeskViews | None = None,
) -> list[Route]:
    """The page's routes, to add to the HTTP app next to the MCP endpoint.

    ``allowed_hosts``: Host header values answered (``NAME`` or ``NAME:*``); None = any
    (only for an app that checks Host in front of the page). ``views``: the read views
    (``{prefix}/workloads``, ``/nodes``, ``/executions``, ``/audit``); None = none."""
    sessions: dict[str, _Session] = {}
    prefix = "/" + prefix.strip("/")
    throttle = throttle or LoginThrottle()

    def session_of(request: Request) -> _Session | None:
        sid = request.cookies.get(COOKIE)
        session = sessions.get(sid) if sid else None
        if session is None or datetime.now(UTC) - session.created > SESSION_LIFETIME:
            if sid:
                sessions.pop(sid, None)
            return None
        return session

    def guarded(
        handler: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if allowed_hosts is not None and not host_allowed(
                request.headers.get("host"), allowed_hosts
            ):
                return _page("Wrong address", "<p>This server does not answer to that name.</p>",
                             421, close=True)  # fmt: skip
            if "authorization" in request.headers:
                return _page("Not here", "<p>Agent and API credentials are not accepted.</p>", 403)
            origin = request.headers.get("origin")
            if request.method == "POST" and origin and origin != "null":
                if urlsplit(origin).netloc != request.url.netloc:
                    return _page("Refused", "<p>Cross-site form posts are refused.</p>", 403)
            try:
                return await handler(request)
            except _TooLarge:
                # The rest of the body is never read; closing the connection discards it.
                return _page("Too large", "<p>Submit the page's own form.</p>", 413, close=True)
            except errors.ClawpointError as exc:
                status = {3: 404, 5: 403, 10: 409}.get(exc.exit_code, 400)
                body = f"<p>{_e(exc.message)}</p><p>{_e(exc.hint)}</p>"
                return _page("Cannot do that", body + _back(prefix), status)

        return endpoint

    async def index(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return _page("Approver login", _login_form(prefix))
        number = request.query_params.get("page", "1")
        if not _PAGE_RE.fullmatch(number):
            return _page("Cannot do that", "<p>That is not a page of this list.</p>"
                         + _back(prefix), 400)  # fmt: skip
        listed = await run_in_threadpool(desk.desk_page, int(number), PAGE_SIZE)
        body = desk_html.listing(prefix, listed)
        if views is not None:
            body = desk_views_html.nav(prefix, "") + body
        title = f"Pending approvals ({listed.total})"
        return _page(title, body + _logout_form(prefix, session),
                     refresh=desk_html.LIST_REFRESH_S)  # fmt: skip

    async def login(request: Request) -> Response:
        client = request.client.host if request.client else "unknown"
        # Counted before anything the client sent is read (no await before this line), so
        # attempts sent at once are counted at once; a right token gives it back below.
        wait = throttle.attempt(client)
        if wait is not None:
            body = f"<p>Too many wrong tokens; try again in {wait} s.</p>"
            refused = _page("Approver login", body, 429, close=True)
            refused.headers["Retry-After"] = str(wait)
            return refused
        form = await _form(request)
        token = form.get("token", "")
        name = form.get("name", "").strip()
        if not token or not approver_token_ok(token):
            return _page("Approver login", "<p>Wrong token.</p>" + _login_form(prefix), 401)
        throttle.succeeded(client)
        if name and not _NAME_RE.fullmatch(name):
            return _page("Approver login", "<p>Use a plain name.</p>" + _login_form(prefix), 400)
        fingerprint = hashlib.sha256(token.encode()).hexdigest()[:8]
        principal = Principal(id=f"page:{name or fingerprint}", kind=PrincipalKind.PERSON)
        sid = secrets.token_urlsafe(32)
        sessions[sid] = _Session(principal=principal, csrf=secrets.token_urlsafe(32))
        response = RedirectResponse(prefix, status_code=303)
        response.set_cookie(
            COOKIE,
            sid,
            max_age=int(SESSION_LIFETIME.total_seconds()),
            path=prefix,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(request: Request) -> Response:
        session = session_of(request)
        form = await _form(request)
        if session is not None and _csrf_ok(session, form):
            sessions.pop(request.cookies.get(COOKIE, ""), None)
        response = RedirectResponse(prefix, status_code=303)
        response.delete_cookie(COOKIE, path=prefix)
        return response

    async def detail(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return RedirectResponse(prefix, status_code=303)
        approval_id = request.path_params["approval_id"]
        view = await run_in_threadpool(desk.get, approval_id)
        return await _request_page(desk, prefix, view, session)

    async def decide(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return _page("Log in first", _login_form(prefix), 401)
        form = await _form(request)
        if not _csrf_ok(session, form):
            return _page("Refused", "<p>The form expired or did not come from this page.</p>", 403)
        approval_id = request.path_params["approval_id"]
        verb = request.path_params["verb"]
        if verb == "approve":
            view = await run_in_threadpool(desk.approve, approval_id, session.principal)
        else:
            why = form.get("why", "").strip() or "denied on the approval page"
            view = await run_in_threadpool(desk.deny, approval_id, session.principal, why)
        said = f"<p>Request {_e(view.id)} is now <b>{_e(view.status.value)}</b>.</p>"
        return await _request_page(desk, prefix, view, session, said=said)

    def read_view(slug: str) -> Callable[[Request], Awaitable[Response]]:
        """A read view's page: logged in only, paged by ``?page=N``; the nodes view reloads
        itself for its countdowns."""
        title = dict(desk_views_html.VIEWS)[slug]

        async def endpoint(request: Request) -> Response:
            session = session_of(request)
            if session is None:
                return RedirectResponse(prefix, status_code=303)
            assert views is not None  # routes exist only with views
            number = request.query_params.get("page", "1")
            if not _PAGE_RE.fullmatch(number):
                return _page("Cannot do that", "<p>That is not a page of this list.</p>"
                             + _back(prefix), 400)  # fmt: skip
            url = f"{prefix}/{slug}"
            read: Callable[[int], object] = getattr(views, slug)
            data = await run_in_threadpool(read, int(number))
            render: Callable[[str, object], str] = getattr(desk_views_html, slug)
            body = desk_views_html.nav(prefix, slug) + render(url, data)
            refresh = desk_html.LIST_REFRESH_S if slug == "nodes" else None
            return _page(title, body + _logout_form(prefix, session), refresh=refresh)

        return endpoint

    viewed = [
        Route(f"{prefix}/{slug}", guarded(read_view(slug)), methods=["GET"])
        for slug, _ in desk_views_html.VIEWS
        if slug and views is not None
    ]  # before the request route: a view's name is never a request id (apr-...)
    return [
        Route(prefix, guarded(index), methods=["GET"]),
        *viewed,
        Route(f"{prefix}/login", guarded(login), methods=["POST"]),
        Route(f"{prefix}/logout", guarded(logout), methods=["POST"]),
        Route(f"{prefix}/{{approval_id}}", guarded(detail), methods=["GET"]),
        Route(
            f"{prefix}/{{approval_id}}/{{verb:str}}", guarded(_only_verbs(decide)), methods=["POST"]
        ),
    ]


def _only_verbs(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        if request.path_params["verb"] not in ("approve", "deny"):
            return _page("Not found", "<p>No such action.</p>", 404)
        return await handler(request)

    return endpoint


async def _form(request: Request) -> dict[str, str]:
    # Parsed by hand: a small urlencoded body, so no multipart dependency and a hard size cap.
    # Read as a stream and stop at the cap: an oversized body is never held in memory.
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise _TooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise _TooLarge
    parsed = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items() if v}


def _csrf_ok(session: _Session, form: dict[str, str]) -> bool:
    return hmac.compare_digest(session.csrf.encode(), form.get("csrf", "").encode())


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _back(prefix: str) -> str:
    return f'<p><a href="{prefix}">Back to pending approvals</a></p>'


def _login_form(prefix: str) -> str:
    return (
        f'<form method="post" action="{prefix}/login">'
        '<label>Approver token <input type="password" name="token" autocomplete="off" required>'
        '</label><label>Your name (optional) <input name="name" maxlength="63"></label>'
        '<button type="submit">Log in</button></form>'
    )


def _logout_form(prefix: str, session: _Session) -> str:
    return (
        f'<form method="post" action="{prefix}/logout">'
        f'<input type="hidden" name="csrf" value="{_e(session.csrf)}">'
        f"<small>Logged in as {_e(session.principal.id)}</small> "
        '<button type="submit">Log out</button></form>'
    )


async def _request_page(
    desk: ApprovalDesk, prefix: str, view: ApprovalView, session: _Session, *, said: str = ""
) -> Response:
    """A request: its facts, then the decision form (pending) or what happened (decided);
    reloaded every few seconds while its execution is awaited or running."""
    facts = await run_in_threadpool(desk.facts, view)
    code, refresh = "", None
    if view.status is ApprovalStatus.PENDING:
        code = await run_in_threadpool(desk.reveal_code, view.id)
        # Never reloaded while pending: a person may be typing a reason to deny; the
        # deadline also gives its clock time, so a countdown read a minute ago still helps.
        body = _detail(prefix, view, facts, code, session)
    else:
        result = await run_in_threadpool(desk.outcome, view)
        after, moving = desk_html.outcome(view, result)
        body = _detail(prefix, view, facts, code, session, after=after)
        refresh = desk_html.RUNNING_REFRESH_S if moving else None
    url = f"{prefix}/{view.id}"  # after a decision (a POST), reload the request, not the form
    return _page(view.summary or view.action, said + body, refresh=refresh, refresh_url=url)


def _detail(
    prefix: str,
    view: ApprovalView,
    facts: RequestFacts,
    code: str,
    session: _Session,
    *,
    after: str = "",
) -> str:
    steps = "".join(f"<li>{_e(s.description)}</li>" for s in view.plan.steps)
    body = (
        f"{desk_html.facts_table(facts)}<p><small>Plan hash {_e(view.plan_hash[:16])}</small>"
        f"</p>{after}<h2>Planned steps</h2><ol>{steps}</ol>"
    )
    if view.status is ApprovalStatus.PENDING:
        csrf = f'<input type="hidden" name="csrf" value="{_e(session.csrf)}">'
        body += (
            f"<p>One-time code for the chat: <code>{_e(format_code(code))}</code></p>"
            f'<form method="post" action="{prefix}/{_e(view.id)}/approve">{csrf}'
            '<button type="submit">Approve</button></form>'
            f'<form method="post" action="{prefix}/{_e(view.id)}/deny">{csrf}'
            '<label>Reason <input name="why" maxlength="500"></label>'
            '<button type="submit">Deny</button></form>'
        )
    return body + _back(prefix)


def _page(
    title: str,
    body: str,
    status: int = 200,
    *,
    close: bool = False,
    refresh: int | None = None,
    refresh_url: str | None = None,
) -> HTMLResponse:
    again = ""
    if refresh is not None:  # a meta refresh: no script needed, inside the strict CSP
        to = f";url={_e(refresh_url)}" if refresh_url else ""
        again = f'<meta http-equiv="refresh" content="{refresh}{to}">'
    doc = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">{again}'
        f"<title>{_e(title)} · clawpoint</title><style>{desk_html.STYLE}"
        f"</style></head><body><main><h1>{_e(title)}</h1>{body}</main></body></html>"
    )
    headers = {
        "Content-Security-Policy": _CSP,
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
    }
    if close:  # refused before the body was read: end the connection rather than drain it
        headers["Connection"] = "close"
    return HTMLResponse(doc, status_code=status, headers=headers)
