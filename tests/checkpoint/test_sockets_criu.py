"""Real workloads with sockets and deleted files, through the installed CLI and real CRIU.

- ``python3 -m http.server`` answers on the same port after checkpoint, migrate, failover and
  preempt/resume, and the process serving is the checkpointed one (same memory layout,
  startup banner printed once).
- An idle keep-alive client: kept across a leave-running checkpoint, closed by a migration
  (``checkpoint.criu_tcp = "close"``, the default); refused, naming the setting, with "refuse".
- A deleted-but-open file of 5 MiB is carried under the default ghost limit (the program
  re-reads and checks it after the move) and refused, naming the setting, over a small one;
  the program's file lock is carried too.
- A Unix-domain connection to a process outside the workload is refused with that reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.checkpoint import criu
from core.config import load_settings
from core.state.db import Database
from core.state.workloads import WorkloadRegistry
from core.wrapper import fence
from core.wrapper.control import ControlClient
from tests.service_reads import workload_row

pytestmark = pytest.mark.criu

CLI = Path(sys.executable).with_name("clawpoint")


class Cli:
    """``clawpoint`` as a user runs it, in a private CLAWPOINT_HOME."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWPOINT_")}
        self.env["CLAWPOINT_HOME"] = str(home)

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(  # noqa: S603 (argv list, our own console script)
            [str(CLI), *args], capture_output=True, text=True, env=self.env, timeout=180
        )
        if ok:
            assert proc.returncode == 0, (
                f"clawpoint {args} -> {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def config(self, text: str) -> None:
        (self.home / "config.toml").write_text(textwrap.dedent(text))

    def workload(self, name: str) -> dict[str, Any]:
        """Its row of ``clawpoint workloads --json``, read in-process (tests/service_reads.py:
        the checks and polls here would otherwise start an interpreter each)."""
        return workload_row(self.home, name)

    def wait_state(self, name: str, state: str, timeout_s: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            w = self.workload(name)
            if w["state"] == state:
                return w
            time.sleep(0.1)
        raise AssertionError(f"{name} never became {state}: {w}")

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in (self.home / "logs").glob("*"))


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    home = tmp_path / "home"
    home.mkdir()
    c = Cli(home)
    yield c
    settings = load_settings(home)  # never leave a workload behind
    registry = WorkloadRegistry(Database(settings.state_db))
    for record in registry.list():
        with contextlib.suppress(errors.ClawpointError):
            ControlClient(settings.run_dir / f"{record.name}.sock").terminate(timeout_s=3)
        fence.fence(settings, record)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(port: int, path: str = "/", timeout_s: float = 20) -> bytes:
    """A real HTTP GET on loopback, retried while the port is not answering yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:  # noqa: S310 (loopback)
                assert r.status == 200
                return bytes(r.read())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def layout(pid: int) -> list[str]:
    """Where the interpreter and its libraries are mapped: ASLR makes this differ between
    two starts of the same program, and CRIU restores it exactly."""
    rows = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/") and "x" in parts[1]:
            rows.append(f"{parts[0]} {parts[5]}")
    assert rows
    return rows


class KeepAlive:
    """An HTTP/1.1 client holding one connection open, idle between requests."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def get(self) -> bytes:
        """One request on the held connection; the response head (body read and dropped)."""
        self.sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.sock.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            chunk = self.sock.recv(65536)
            assert chunk, "connection closed mid-response"
            body += chunk
        return head

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def serve(cli: Cli, tmp_path: Path, name: str, port: int) -> int:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "index.html").write_text(f"hello from {name}\n")
    cli("run", "--name", name, "--node", "node-a", "--detach", "--", "python3", "-m",
        "http.server", str(port), "--bind", "127.0.0.1", "-p", "HTTP/1.1", "-d", str(site))  # fmt: skip
    assert http_get(port) == f"hello from {name}\n".encode()
    pid = cli.workload(name)["pid"]
    assert isinstance(pid, int)
    return pid


def test_http_server_answers_after_checkpoint_migrate_failover_and_resume(
    cli: Cli, tmp_path: Path
) -> None:
    port = free_port()
    pid = serve(cli, tmp_path, "web", port)
    image = layout(pid)
    client = KeepAlive(port)  # idle keep-alive client, connected throughout
    assert client.get().startswith(b"HTTP/1.1 200")

    cli("checkpoint", "local:web", "--yes")
    assert http_get(port) == b"hello from web\n"
    assert cli.workload("web")["pid"] == pid  # leave-running: the same process goes on
    assert client.get().startswith(b"HTTP/1.1 200")  # and keeps its connections

    cli("migrate", "local:web", "--to", "node-b", "--yes")
    moved = cli.workload("web")
    assert moved["node"] == "node-b" and moved["pid"] != pid
    assert http_get(port) == b"hello from web\n"
    assert layout(moved["pid"]) == image  # the checkpointed process, not a fresh start
    # criu_tcp = "close" (default): established connections are not carried; the client
    # sees its connection closed and a new one is served.
    assert client.closed_by_peer()
    client.close()

    os.kill(moved["pid"], signal.SIGKILL)
    cli.wait_state("web", "failed")
    cli("failover", "local:web", "--yes")
    back = cli.workload("web")
    assert back["state"] == "running" and back["pid"] not in (pid, moved["pid"])
    assert http_get(port) == b"hello from web\n"
    assert layout(back["pid"]) == image

    cli("preempt", "local:web", "--yes")
    with pytest.raises(OSError):
        http_get(port, timeout_s=0)  # stopped: nothing listens on the port
    cli("resume", "local:web", "--yes")
    assert http_get(port) == b"hello from web\n"
    assert layout(cli.workload("web")["pid"]) == image
    # The program started once; every later server was restored, never restarted.
    assert cli.logs().count("Serving HTTP on 127.0.0.1") == 1


def test_established_connection_refused_when_configured(cli: Cli, tmp_path: Path) -> None:
    cli.config('[checkpoint]\ncriu_tcp = "refuse"\n')
    port = free_port()
    pid = serve(cli, tmp_path, "web", port)
    client = KeepAlive(port)
    assert client.get().startswith(b"HTTP/1.1 200")

    for action in (["checkpoint", "local:web"], ["migrate", "local:web", "--to", "node-b"]):
        proc = cli(*action, "--yes", "--json", ok=False)
        assert proc.returncode == 8, proc.stdout + proc.stderr
        err = json.loads(proc.stdout)
        assert "established TCP connection" in err["message"]
        assert "checkpoint.criu_tcp" in err["message"]  # with the hint: what to change
        # Nothing disturbed: same process, still serving, the connection still open.
        assert cli.workload("web")["pid"] == pid
        assert client.get().startswith(b"HTTP/1.1 200")
    client.close()
    cli("checkpoint", "local:web", "--yes")  # no connection left: nothing to refuse


GHOST = """
    import fcntl, hashlib, http.server, json, os, sys, tempfile

    port, size, lock = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    token = os.urandom(8).hex()  # this process's identity, in its memory only
    data = os.urandom(size)
    want = hashlib.sha256(data).hexdigest()
    fd, path = tempfile.mkstemp(dir=os.path.dirname(lock))
    os.write(fd, data)
    os.unlink(path)  # deleted but open: only the open fd keeps it
    del data
    lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)

    def check():
        os.lseek(fd, 0, os.SEEK_SET)
        h, n = hashlib.sha256(), 0
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            n += len(chunk)
        return {"token": token, "ok": h.hexdigest() == want and n == size}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(check()).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def test_deleted_open_file_within_and_over_the_ghost_limit(cli: Cli, tmp_path: Path) -> None:
    program = tmp_path / "ghost.py"
    program.write_text(textwrap.dedent(GHOST))
    lock = tmp_path / "ghost.lock"
    port = free_port()
    cli("run", "--name", "ghost", "--node", "node-a", "--detach", "--", sys.executable,
        str(program), str(port), str(5 * 2**20), str(lock))  # fmt: skip
    first = json.loads(http_get(port))
    assert first["ok"]
    pid = cli.workload("ghost")["pid"]

    # Default ghost limit (64 MiB): the 5 MiB deleted file travels with the checkpoint.
    cli("migrate", "local:ghost", "--to", "node-b", "--yes")
    moved = cli.workload("ghost")
    assert moved["node"] == "node-b" and moved["pid"] != pid
    after = json.loads(http_get(port))
    assert after == first  # same process (token), and its deleted file reads back intact
    with open(lock, "rb") as f, pytest.raises(BlockingIOError):
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the restored program holds its lock

    # Over a small configured limit: refused with the setting named; nothing disturbed. The
    # running wrapper reads the setting at each checkpoint.
    cli.config("[checkpoint]\ncriu_ghost_limit_mib = 1\n")
    pid = cli.workload("ghost")["pid"]
    proc = cli("checkpoint", "local:ghost", "--yes", "--json", ok=False)
    assert proc.returncode == 8, proc.stdout + proc.stderr
    err = json.loads(proc.stdout)
    assert "deleted file" in err["message"] and "1 MiB" in err["message"]
    assert "raise checkpoint.criu_ghost_limit_mib" in err["message"]  # the hint
    assert cli.workload("ghost")["pid"] == pid
    assert json.loads(http_get(port)) == first


def test_minimum_criu_version_follows_the_kernel(tmp_path: Path) -> None:
    assert criu.required_version("6.18.44-fc") == (4, 2, 1)  # TCP sockets need 4.2.1
    assert criu.required_version("6.16.0") == (4, 2, 1)
    assert criu.required_version("6.13.2-arch1") == (4, 1)
    fake = tmp_path / "criu"
    fake.write_text('#!/bin/sh\necho "Version: 4.1.1"\n')
    fake.chmod(0o755)
    status = criu.criu_status(str(fake))
    if criu.required_version() == (4, 2, 1):
        assert not status.available and "older than 4.2.1" in (status.reason or "")


def test_dump_arguments_follow_the_options() -> None:
    default = criu.CriuOptions().dump_args()
    assert default[:2] == ["--ghost-limit", "64M"]
    assert "--tcp-close" in default and "--file-locks" in default
    strict = criu.CriuOptions(ghost_limit_mib=1, tcp="refuse", file_locks=False).dump_args()
    assert strict == ["--ghost-limit", "1M"]


def test_unix_connection_to_an_outside_process_is_refused(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "outside.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        client = (
            "import socket, sys, time\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b'hi')\n"
            "while True: time.sleep(1)\n"
        )
        cli("run", "--name", "ux", "--node", "node-a", "--detach", "--", sys.executable,
            "-c", client, str(path))  # fmt: skip
        conn, _ = server.accept()
        with conn:
            assert conn.recv(2) == b"hi"
            pid = cli.workload("ux")["pid"]
            proc = cli("checkpoint", "local:ux", "--yes", "--json", ok=False)
            assert proc.returncode == 8, proc.stdout + proc.stderr
            err = json.loads(proc.stdout)
            assert "Unix-domain socket connected to a process outside" in err["message"]
            # The log the error points at outlives the aborted checkpoint.
            log = Path(err["execution"]["result"]["error"]["details"]["log"])
            assert log.parent.name == ".last-failed" and "Error" in log.read_text()
            assert cli.workload("ux")["pid"] == pid and cli.workload("ux")["state"] == "running"
