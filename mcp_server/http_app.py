"""The HTTP application: the MCP endpoint (agents, bearer token) and the approval page (people).

Two kinds of credentials, never interchangeable: the agent token (``CLAWPOINT_MCP_TOKEN``,
scope ``agent``) opens ``/mcp`` only; approver tokens (``CLAWPOINT_APPROVER_TOKEN``) open the
approval page only, which also refuses any request carrying an Authorization header. An
approver token equal to the agent token is refused at start-up. Bound to 127.0.0.1 unless
configured otherwise.
"""

from __future__ import annotations

import errno
import hmac
import socket
import sys
from collections.abc import Collection, Sequence

from mcp.server.auth.settings import AuthSettings
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from core import errors
from core.config import Settings
from core.guardrails.approvals import ApprovalView
from core.guardrails.desk import DeskPage, Outcome
from core.guardrails.request_facts import RequestFacts, request_facts
from core.guardrails.tokens import token_problem, weak_token_hint
from core.model import Principal, PrincipalKind
from core.service.desk_views import (
    AuditView,
    ExecutionsView,
    NodesView,
    WorkloadsView,
    audit_view,
    executions_view,
    nodes_view,
    workloads_view,
)
from core.service.facade import Service, bootstrap
from mcp_server.approval_page import approval_routes, host_allowed
from mcp_server.auth import StaticTokenVerifier
from mcp_server.server import build_server


class ServiceDesk:
    """The approval page's view of the service: people-side operations only."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def desk_page(self, page: int, size: int) -> DeskPage:
        return self.service.desk_page(page=page, size=size)

    def facts(self, view: ApprovalView) -> RequestFacts:
        return request_facts(view, self.service.situation(view.plan))

    def outcome(self, view: ApprovalView) -> Outcome:
        return self.service.request_outcome(view.id)

    def get(self, approval_id: str) -> ApprovalView:
        return self.service.get_approval(approval_id)

    def approve(self, approval_id: str, principal: Principal) -> ApprovalView:
        return self.service.approve(approval_id, principal=principal, via="page")

    def deny(self, approval_id: str, principal: Principal, why: str) -> ApprovalView:
        return self.service.deny(approval_id, principal=principal, why=why, via="page")

    def reveal_code(self, approval_id: str) -> str:
        page = Principal(id="approval-page", kind=PrincipalKind.PERSON)
        return self.service.guard.approvals.reveal_code(approval_id, principal=page)

    # The desk's read views (``approval_page.DeskViews``).
    def workloads(self, page: int) -> WorkloadsView:
        return workloads_view(self.service, page)

    def nodes(self, page: int) -> NodesView:
        return nodes_view(self.service, page)

    def executions(self, page: int) -> ExecutionsView:
        return executions_view(self.service, page)

    def audit(self, page: int) -> AuditView:
        return audit_view(self.service, page)


class HostCheck:
    """ASGI middleware: answer 421 to a request whose ``Host`` header, parsed into name and
    port (``approval_page.host_allowed``), is not one this server answers to (DNS
    rebinding: ``127.0.0.1:1@evil.example`` is not ``127.0.0.1`` on some port)."""

    def __init__(self, app: ASGIApp, *, allowed: Sequence[str]) -> None:
        self.app = app
        self.allowed = list(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not host_allowed(
            Headers(scope=scope).get("host"), self.allowed
        ):
            refused = PlainTextResponse(
                "This server does not answer to that name.\n",
                status_code=421,
                headers={"Connection": "close"},
            )
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)


def build_http_app(
    settings: Settings, service: Service, *, host: str, port: int,
    toolsets: Collection[str] | None = None, read_only: bool = False,
) -> Starlette:  # fmt: skip
    agent_tokens = settings.agent_tokens
    if not agent_tokens:
        raise errors.InvalidInput(
            "refusing to serve HTTP without a bearer token",
            hint="set CLAWPOINT_MCP_TOKEN (or [mcp] token in the config) to a long random secret",
        )
    if len(set(agent_tokens.values())) != len(agent_tokens):
        raise errors.InvalidInput(
            "two agents share a token ([mcp] token and an entry of [mcp] agent_tokens)",
            hint="give each agent its own token: the token is the agent's identity",
        )
    approver = settings.approver_token
    if approver and any(
        hmac.compare_digest(approver.encode(), t.encode()) for t in agent_tokens.values()
    ):
        raise errors.InvalidInput(
            "the approver token equals the agent token: an agent could approve its own requests",
            hint="set CLAWPOINT_APPROVER_TOKEN to a different secret and give it only to people",
        )
    _refuse_weak_tokens(
        {f"agent {name}'s token": t for name, t in agent_tokens.items()}
        | ({"approver token": approver} if approver else {})
    )
    base = f"http://{url_host(host)}:{port}"
    mcp = build_server(
        service,
        toolsets=toolsets,
        read_only=read_only,
        token_verifier=StaticTokenVerifier(agent_tokens=agent_tokens),
        # Our tokens are this server's own static secrets, which the verifier knows; none
        # is issued for an audience (RFC 8707), so there is no resource to check it against.
        auth=AuthSettings(
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
            required_scopes=["agent"],
            validate_token_resource=False,
        ),
    )
    app = mcp.streamable_http_app(host=host)
    hosts = page_hosts(host)
    if hosts is not None:
        # In front of everything, /mcp included: the SDK's own check compares prefixes.
        app.add_middleware(HostCheck, allowed=hosts)
    if approver:

        def approver_ok(token: str) -> bool:
            raw = token.encode()
            if any(hmac.compare_digest(raw, t.encode()) for t in agent_tokens.values()):
                return False
            return hmac.compare_digest(raw, approver.encode())

        app.router.routes.extend(
            approval_routes(
                desk := ServiceDesk(service),
                approver_token_ok=approver_ok,
                allowed_hosts=hosts,
                views=desk,
            )
        )
    return app


GIL_SWITCH_S = 0.0005  # see serve_http

_LOOPBACK = ("127.0.0.1", "localhost", "::1")
_WILDCARD = ("0.0.0.0", "::", "")


def page_hosts(host: str) -> list[str] | None:
    """Host header values the approval page answers to, as ``/mcp`` does on loopback: the
    loopback names on any port; bound to one address, that address too. Bound to every
    interface (0.0.0.0) there is no one right name: None, and a proxy in front must check."""
    names = ["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"]
    if host in _LOOPBACK:
        return names
    if host in _WILDCARD:
        return None
    bracketed = url_host(host)
    return [bracketed, f"{bracketed}:*", *names]


def _refuse_weak_tokens(tokens: dict[str, str]) -> None:
    """Start no HTTP server whose tokens could be guessed (see core.guardrails.tokens)."""
    for what, token in tokens.items():
        problem = token_problem(token)
        if problem is not None:
            raise errors.InvalidInput(
                f"refusing to serve HTTP: the {what} is too weak: {problem}",
                hint=weak_token_hint(),
            )


def serve_http(
    settings: Settings, *, host: str, port: int, toolsets: Collection[str] | None = None,
    read_only: bool = False,
) -> None:  # fmt: skip
    import uvicorn

    from core import logs

    logs.configure()
    # Tool calls run in worker threads and share the GIL with the event loop that parses,
    # routes and answers every request. At Python's default switch interval (5 ms) each
    # handoff to the loop can wait 5 ms behind a busy call, so a short read queued behind
    # dry-run plans waited tens of milliseconds; in interleaved paced runs 0.5 ms cut the
    # p99 by a third to a half (docs/benchmarks.md, "MCP load"). Only this process changes.
    sys.setswitchinterval(GIL_SWITCH_S)
    listener = listen(host, port)  # before any work: a bad address changes nothing
    service_ = _service(settings)
    app = build_http_app(settings, service_, host=host, port=port, toolsets=toolsets,
                         read_only=read_only)  # fmt: skip
    if settings.approvals.page_url is None and settings.approver_token:
        # Tell agents and notifications where people approve.
        service_.guard.approvals.config.page_url = f"http://{url_host(host)}:{port}/approvals"
    # log_config=None: uvicorn's records go to the root logger, our JSON lines (core.logs).
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", log_config=None)
    server = uvicorn.Server(config)
    server.run(sockets=[listener])


def url_host(host: str) -> str:
    """``host`` as a URL spells it: an IPv6 address in brackets (RFC 3986, 3.2.2)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``, or InvalidInput/Conflict saying why not (an
    address that does not resolve or is not this machine's, a port out of range or in use),
    in place of the server library's own log line and exit code."""
    where = f"{host}:{port}"
    if not 1 <= port <= 65535:
        raise errors.InvalidInput(
            f"port {port} is out of range", hint="pass a port from 1 to 65535 (default 8765)"
        )
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise errors.InvalidInput(
            f"cannot serve on {where}: {host!r} is no address of this machine ({exc})",
            hint="pass an address this machine has, e.g. 127.0.0.1 (the default)",
        ) from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart right after a stop
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise errors.Conflict(
                f"cannot serve on {where}: something else listens there",
                hint="stop it (ss -ltnp shows what) or pass another --port",
            ) from None
        raise errors.InvalidInput(
            f"cannot serve on {where}: {exc.strerror or exc}",
            hint="pass an address this machine has (ip -brief address lists them) and a port "
            "you may bind (below 1024 needs privileges)",
        ) from None
    sock.set_inheritable(True)
    return sock


def _service(settings: Settings) -> Service:
    service = bootstrap(settings)
    service.recover()
    return service
