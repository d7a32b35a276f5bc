"""The MCP server through the SDK's own client over real transports (stdio and HTTP)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from core.config import Settings
from core.service.facade import Service
from tests.service.conftest import PERSON, counter, wait_step

ROOT = Path(__file__).resolve().parents[2]
READ_TOOLS = {
    "cluster_status", "list_nodes", "list_workloads", "get_workload", "list_checkpoints",
}  # fmt: skip


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _params(settings: Settings) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update({"CLAWPOINT_HOME": str(settings.home), "PYTHONPATH": str(ROOT)})
    return StdioServerParameters(command=sys.executable, args=["-m", "core.cli", "serve"], env=env)


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.anyio
@pytest.mark.criu
async def test_stdio_lists_tools_with_annotations_and_calls_each(
    service: Service, settings: Settings, need_criu: None
) -> None:
    service.run_workload(counter(settings, "mcp-w", mb=30), detach=True, principal=PERSON)
    wait_step(settings, "mcp-w", 5)
    async with Client(_params(settings)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert READ_TOOLS | {"checkpoint_workload"} <= set(tools)
        assert not any("approve" in name and name != "execute_approved" for name in tools)
        for name in READ_TOOLS:
            ann = tools[name].annotations
            assert (
                ann is not None and ann.read_only_hint is True and ann.destructive_hint is False
            ), name
            assert tools[name].output_schema is None, f"{name} publishes an output schema"
        ann = tools["checkpoint_workload"].annotations
        assert ann is not None and not ann.read_only_hint and ann.destructive_hint is False

        status = await client.call_tool("cluster_status", {})
        assert not status.is_error and status.structured_content
        assert status.structured_content["nodes_by_health"] == {"healthy": 2}
        listed = await client.call_tool("list_workloads", {})
        assert [w["id"] for w in listed.structured_content["workloads"]] == ["local:mcp-w"]  # type: ignore[index]
        nodes = await client.call_tool("list_nodes", {"backend": "local"})
        assert len(nodes.structured_content["nodes"]) == 2  # type: ignore[index]
        one = await client.call_tool("get_workload", {"workload": "local:mcp-w"})
        assert one.structured_content["state"] in ("running", "checkpointing")  # type: ignore[index]

        seen: list[tuple[float, float | None, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            seen.append((done, total, message))

        ck = await client.call_tool(
            "checkpoint_workload",
            {"workload": "local:mcp-w", "reason": "test"},
            progress_callback=on_progress,
        )
        assert not ck.is_error, _text(ck)
        assert ck.structured_content["status"] == "executed"  # type: ignore[index]
        assert seen, "no progress notifications during the checkpoint"
        cks = await client.call_tool("list_checkpoints", {"workload": "local:mcp-w"})
        assert len(cks.structured_content["checkpoints"]) == 1  # type: ignore[index]
        # with a timed checkpoint, get_workload says which interval pays (on-demand node)
        one = await client.call_tool("get_workload", {"workload": "local:mcp-w"})
        pays = one.structured_content["checkpoint_interval"]  # type: ignore[index]
        # (in_force_s, the workload's checkpoint_every, is left out: it has none)
        assert set(pays) == {"interval_s", "loss_s_per_h", "overhead_s_per_h", "why"}
        assert pays["interval_s"] >= 10 and pays["loss_s_per_h"] > 0
        assert pays["why"].startswith("On-demand node, MTBF 720 h")

        plan = await client.call_tool(
            "migrate_workload", {"workload": "local:mcp-w", "dry_run": True}
        )
        assert not plan.is_error, _text(plan)
        assert plan.structured_content["status"] == "planned"  # type: ignore[index]
        assert plan.structured_content["plan"]["risk"] == "disruptive"  # type: ignore[index]
        assert plan.structured_content["plan"]["to"] == "node-b"  # type: ignore[index]
        fo = await client.call_tool(
            "failover_workload", {"workload": "local:mcp-w", "dry_run": True}
        )
        assert fo.is_error or fo.structured_content["status"] == "denied"  # type: ignore[index]
        assert "migrate" in _text(fo)  # it is alive: failover is refused with the next step

    # Planning changed nothing: still running on node-a, one checkpoint.
    w = service.get_workload("local:mcp-w")
    assert w.node == "node-a" and len(service.checkpoints("local:mcp-w")) == 1


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tool", "args", "expect"),
    [
        ("get_workload", {"workload": "local:missing"}, "no workload"),
        ("get_workload", {"workload": "train-1"}, "malformed"),
        ("get_workload", {"workload": "local:../x"}, "invalid workload name"),
        ("list_checkpoints", {"workload": "../../etc"}, "malformed"),
        ("checkpoint_workload", {"workload": "local:a;rm -rf /"}, "invalid workload name"),
        ("migrate_workload", {"workload": "nope:w1", "dry_run": True}, "no backend"),
        ("get_workload", {}, "workload"),
    ],
)
async def test_invalid_arguments_give_clear_errors_and_change_nothing(
    settings: Settings, service: Service, tool: str, args: dict[str, Any], expect: str
) -> None:
    before = len(service.audit.entries())
    async with Client(_params(settings)) as client:
        result = await client.call_tool(tool, args)
    assert result.is_error
    assert expect in _text(result).lower() or expect in _text(result)
    assert len(service.audit.entries()) == before
    assert not any(settings.checkpoint_dir.iterdir())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(settings: Settings) -> Iterator[tuple[str, str]]:
    port = _free_port()
    token = "t0k-" + os.urandom(16).hex()
    env = dict(
        os.environ,
        CLAWPOINT_HOME=str(settings.home),
        CLAWPOINT_MCP_TOKEN=token,
        PYTHONPATH=str(ROOT),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "serve", "--http", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx2.get(url, timeout=1)
            break
        except httpx2.TransportError:
            time.sleep(0.1)
    try:
        yield url, token
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    # Whatever the server and its libraries said went out as JSON lines (core.logs), never
    # a library's own console format or a warning printed at start-up.
    for line in err.decode().splitlines():
        assert isinstance(json.loads(line), dict), line


@pytest.mark.anyio
async def test_http_requires_bearer_token(http_server: tuple[str, str]) -> None:
    url, token = http_server
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    assert httpx2.post(url, json=body, headers=headers).status_code == 401
    bad = httpx2.post(url, json=body, headers={**headers, "Authorization": "Bearer wrong"})
    assert bad.status_code == 401
    assert "www-authenticate" in {k.lower() for k in bad.headers}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "cluster_status" in names
            status = await client.call_tool("cluster_status", {})
            assert not status.is_error


def test_http_refuses_to_start_without_token(settings: Settings) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CLAWPOINT_MCP_TOKEN"}
    env.update(CLAWPOINT_HOME=str(settings.home), PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "core.cli", "serve", "--http", "--port", str(_free_port())],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "CLAWPOINT_MCP_TOKEN" in proc.stderr


CLAWPOINT = Path(sys.executable).parent / "clawpoint"
# A command of the case marked offline runs in a new network namespace (only a loopback that is
# down): the host name must not resolve, tests talk only to loopback, and outside such a
# namespace the lookup of even a .invalid name is sent to the machine's DNS server.
NEW_NETNS = ["unshare", "--net", "--map-root-user"]


@pytest.mark.parametrize(
    ("where", "code", "says", "offline"),
    [
        (["--port", "0"], 2, "port 0 is out of range", False),
        (["--port", "70000"], 2, "port 70000 is out of range", False),
        (["--host", "no-such-host.invalid"], 2, "is no address of this machine", True),
        (["--host", "192.0.2.1"], 2, "cannot serve on 192.0.2.1:", False),  # TEST-NET-1
        (["--port", "IN-USE"], 10, "something else listens there", False),
    ],
)  # fmt: skip
def test_http_refuses_an_address_it_cannot_serve(
    settings: Settings, where: list[str], code: int, says: str, offline: bool
) -> None:
    """The installed command, as a person types it: exit 2 (or 10 for a port in use) with
    our message and hint, no traceback and no library log line; before a port was taken
    as given, 0 meant the default port, an out-of-range one was a traceback of the SDK's
    URL validation, and a wrong host uvicorn's own "ERROR:" line with exit 3."""
    env = dict(os.environ, CLAWPOINT_HOME=str(settings.home), PYTHONPATH=str(ROOT),
               CLAWPOINT_MCP_TOKEN="t0k-" + os.urandom(16).hex())  # fmt: skip
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        argv = [a.replace("IN-USE", str(taken.getsockname()[1])) for a in where]
        proc = subprocess.run(
            [*(NEW_NETNS if offline else []), str(CLAWPOINT), "serve", "--http", *argv],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert proc.returncode == code, proc.stderr
    assert says in proc.stderr and "hint:" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "ERROR:" not in proc.stderr, proc.stderr


def test_an_ipv6_host_is_bracketed_in_the_servers_urls() -> None:
    """RFC 3986, 3.2.2; before, ``--host ::1`` ended in the SDK's URL validation traceback."""
    from mcp_server.http_app import url_host

    assert url_host("::1") == "[::1]" and url_host("[::1]") == "[::1]"
    assert url_host("127.0.0.1") == "127.0.0.1" and url_host("localhost") == "localhost"


def test_stdio_refuses_an_address_it_would_not_use(settings: Settings) -> None:
    """``serve --port 9000`` without ``--http`` served stdio and ignored the port, exit 0."""
    env = dict(os.environ, CLAWPOINT_HOME=str(settings.home), PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [str(CLAWPOINT), "serve", "--port", "9000"],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "--host and --port are for --http" in proc.stderr and "hint:" in proc.stderr
