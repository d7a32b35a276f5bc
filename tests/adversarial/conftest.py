"""The adversarial suite's harness: the real server in a subprocess, driven as an agent would.

``lab(config)`` makes a fresh ``CLAWPOINT_HOME`` with that ``config.toml`` and a service on
it for the people side of each test (a person approves, reveals codes, reads the journal).
``agent(lab, transport)`` opens an SDK client to ``clawpoint serve`` over stdio or over
streamable HTTP (agent bearer token) and records every tool result's text and structured
content, so a test can check that nothing an agent saw held a secret.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import Implementation

from core import errors
from core.config import Settings, load_settings
from core.model import Action, Principal, PrincipalKind, WorkloadState
from core.service.facade import Service, bootstrap
from tests.service.conftest import counter, need_criu, wait_step  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
PERSON = Principal(id="alice", kind=PrincipalKind.PERSON)
TRANSPORTS = ["stdio", "http"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class HttpServer:
    url: str  # base, e.g. http://127.0.0.1:PORT
    agent_token: str
    approver_token: str | None
    proc: subprocess.Popen[bytes]

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp"


@dataclass
class Lab:
    settings: Settings
    service: Service
    _servers: list[HttpServer] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return self.settings.home

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
        env.update(CLAWPOINT_HOME=str(self.home), PYTHONPATH=str(ROOT), **extra)
        return env

    def start(self, name: str, *, node: str = "node-a", mb: int = 8) -> str:
        """A small counter under CRIU; returns its id once it makes progress."""
        spec = counter(self.settings, name, mb=mb, node=node)
        self.service.run_workload(spec, detach=True, principal=PERSON)
        wait_step(self.settings, name, 2)
        return f"local:{name}"

    def node_of(self, workload: str) -> str | None:
        return self.service.get_workload(workload).node

    def executions(self, plan_hash: str | None = None) -> list[dict[str, Any]]:
        with self.service.db.read() as conn:
            rows = conn.execute("SELECT * FROM executions ORDER BY started_at").fetchall()
        found = [dict(r) for r in rows]
        return [r for r in found if plan_hash is None or r["plan_hash"] == plan_hash]

    def http_server(self, *, approver_token: str | None = None) -> HttpServer:
        port = free_port()
        agent_token = "agent-" + os.urandom(16).hex()
        extra = {"CLAWPOINT_MCP_TOKEN": agent_token}
        if approver_token:
            extra["CLAWPOINT_APPROVER_TOKEN"] = approver_token
        log = (self.home / f"serve-{port}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "core.cli", "serve", "--http", "--port", str(port)],
            env=self.env(**extra), stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
        log.close()
        server = HttpServer(f"http://127.0.0.1:{port}", agent_token, approver_token, proc)
        self._servers.append(server)
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(
                    f"server exited: {(self.home / f'serve-{port}.log').read_text()}"
                )
            try:
                httpx2.get(server.mcp_url, timeout=1)
                return server
            except httpx2.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close(self) -> None:
        for server in self._servers:
            server.proc.terminate()
            try:
                server.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait()
        for w in self.service.workloads("local"):  # never leave a workload behind
            if w.state in (WorkloadState.RUNNING, WorkloadState.CHECKPOINTING):
                try:
                    self.service.act(Action.KILL, w.id, {}, principal=PERSON, confirmed=True)
                except errors.ClawpointError:
                    pass


@pytest.fixture
def lab_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Lab]]:
    labs: list[Lab] = []

    def make(config: str = "") -> Lab:
        home = tmp_path / f"h{len(labs)}"
        home.mkdir()
        (home / "config.toml").write_text(config)
        monkeypatch.setenv("CLAWPOINT_HOME", str(home))
        monkeypatch.setenv("PYTHONPATH", str(ROOT))
        settings = load_settings(home)
        lab = Lab(settings, bootstrap(settings))
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        lab.close()


@pytest.fixture
def lab(lab_factory: Callable[[str], Lab]) -> Lab:
    return lab_factory("")


def result_text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


class Agent:
    """One MCP session as an agent, remembering everything the server said to it."""

    def __init__(self, client: Client, transport: str) -> None:
        self.client = client
        self.transport = transport
        self.seen: list[str] = []

    def _record(self, result: Any) -> None:
        self.seen.append(result_text(result))
        if getattr(result, "structured_content", None) is not None:
            self.seen.append(json.dumps(result.structured_content))

    async def call(self, tool: str, args: dict[str, Any]) -> Any:
        result = await self.client.call_tool(tool, args)
        self._record(result)
        return result

    async def ok(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Call a tool that must succeed; its structured content."""
        result = await self.call(tool, args)
        assert not result.is_error, f"{tool} failed: {result_text(result)}"
        assert isinstance(result.structured_content, dict)
        return result.structured_content

    async def error(self, tool: str, args: dict[str, Any]) -> str:
        """Call a tool that must fail; its error text."""
        result = await self.call(tool, args)
        assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
        return result_text(result)

    async def read_everything(self) -> None:
        """List tools, resources and prompts and read each fixed resource (all recorded)."""
        tools = await self.client.list_tools()
        self.seen.append(tools.model_dump_json())
        resources = await self.client.list_resources()
        for res in resources.resources:
            content = await self.client.read_resource(res.uri)
            self.seen.append(content.model_dump_json())
        prompts = await self.client.list_prompts()
        self.seen.append(prompts.model_dump_json())

    @property
    def principal(self) -> str:
        """The agent's identity; over stdio each server process adds its session
        (``mcp:stdio/SESSION``)."""
        return "mcp:stdio" if self.transport == "stdio" else "mcp:clawpoint-agent"


@asynccontextmanager
async def agent_session(
    lab: Lab,
    transport: str,
    *,
    server: HttpServer | None = None,
    elicitation_callback: Any = None,
    mode: str | None = None,
    token: str | None = None,
    client_name: str | None = None,
    serve_args: tuple[str, ...] = (),
) -> AsyncIterator[Agent]:
    """An SDK client to the lab's server over ``transport`` ("stdio" or "http").

    ``token``: another agent token than the server's main one; ``client_name``: the name the
    client declares (clientInfo.name); ``serve_args``: more arguments of ``serve`` (stdio)."""
    kwargs: dict[str, Any] = {} if mode is None else {"mode": mode}
    if elicitation_callback is not None:
        kwargs["elicitation_callback"] = elicitation_callback
    if client_name is not None:
        kwargs["client_info"] = Implementation(name=client_name, version="1.0")
    if transport == "stdio":
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "core.cli", "serve", *serve_args], env=lab.env()
        )
        async with Client(params, **kwargs) as client:
            yield Agent(client, transport)
        return
    server = server or lab.http_server()
    headers = {"Authorization": f"Bearer {token or server.agent_token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
        async with Client(streamable_http_client(server.mcp_url, http_client=http), **kwargs) as c:
            yield Agent(c, transport)


def approval_id_of(out: dict[str, Any]) -> str:
    assert out["status"] == "approval_required", out
    assert out["approval"] and out["approval"]["id"].startswith("apr-"), out
    return str(out["approval"]["id"])
