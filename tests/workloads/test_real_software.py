"""Real software through the four operations: the Debian packages themselves, started on
loopback ports in the test's own directory, driven by the installed ``clawpoint`` CLI and real
CRIU, local backend (node-a -> node-b).

Each program goes checkpoint -> migrate -> preempt/resume -> kill -9 + failover, and after
every step the program's *own* data is checked:

- Redis (``redis-server``, AOF on, ``appendfsync always``): every key written before the step
  is there; at the failover the keys written after its checkpoint are gone from memory and
  the AOF's later bytes are kept beside it (``.after-ID``); at the end a fresh redis-server
  loads the AOF on disk and finds exactly the keys the restored one held.
- nginx (master + 2 workers, ``user root``): a 256 KiB file served under a client fetching it
  every 10 ms, byte-identical (sha256) after each step; after the failover the access log's
  lost tail is kept beside it (``access.log.after-ID``), not thrown away.
- Node.js (``node``): an HTTP server whose counter is a 10 ms ``setInterval``; the counter it
  serves never goes back past its checkpoint and the timer keeps firing after each restore.
- A Python training loop (numpy): its metrics file has steps 0..N with no gap and no repeat
  after every step, failover included (the file is rewound with the process).
- MariaDB (InnoDB): as an ordinary user (``clawpoint-alice``, clawpoint's ordinary-user mode:
  the server gets user, mount and PID namespaces and a /proc of its own), and started by
  root with ``--user=mysql`` (a database that drops its privileges), under our init in a
  user namespace of its own (``run --init --user-namespace``); rows counted after each
  step, none duplicated; on failover the rows committed after the checkpoint are gone; at
  the end a fresh server recovers the data directory and counts the same rows. Started by
  root without the init it is refused at plan time naming the uid and ``--init`` (CRIU
  cannot dump a tree whose first process dropped its privileges without a /proc of its
  namespace: core/checkpoint/probe.py).
- PostgreSQL cannot be checkpointed by CRIU here and the tests pin why: as root it must drop
  to another uid (refused as above), and as an ordinary user its System V interlock segment
  cannot be dumped by an unprivileged CRIU; the checkpoint is refused at plan time naming
  the segment. A program keeping a System V segment attached goes through every operation
  in the root mode inside an IPC namespace of its own (``unshare --ipc``), and is refused
  outside one.

A client pings each server every 10 ms (tests/workloads/pinger.py) and the longest gap and
failed requests of each operation are recorded (never asserted: they depend on the machine);
with CLAWPOINT_REALSW_RESULTS=PATH each test appends its row to PATH as a JSON line once all
its checks passed, which scripts/realsw-matrix.py renders for docs/checkpointing.md. The
client reaches the server on the same port after each step on a fresh connection:
established connections are restored closed (``criu_tcp = "close"``).

Limits: one client; each program with one configuration (AOF always, 2 nginx workers, native
AIO off in InnoDB). Skipped, naming why, when CRIU or a program is missing
(``scripts/install-system-deps.sh --all`` installs them); the ordinary-user tests need root
to create the user (tests/tenants).
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core.checkpoint.files import tree_pids
from core.config import load_settings
from core.wrapper.spec import output_files
from tests.tenants import Tenant
from tests.workloads.conftest import PROGRAMS, Cli
from tests.workloads.pinger import (
    Pinger,
    Window,
    http_fetch,
    http_get,
    mysql_ping,
    pg_ping,
    redis_ping,
)
from tests.workloads.servers import mariadb_install_db, mariadb_server
from tests.workloads.test_matrix import cycle

pytestmark = [pytest.mark.criu, pytest.mark.timeout(300)]

LIVE = ("running", "checkpointing")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def need(*programs: str) -> None:
    for p in programs:
        if shutil.which(p) is None and not Path(p).exists():
            pytest.skip(f"{p} is not installed (scripts/install-system-deps.sh installs it)")


def wait_for(what: str, probe: Callable[[], object], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            probe()
            return
        except (OSError, ValueError, AssertionError) as e:
            last = e
        time.sleep(0.05)
    raise AssertionError(f"{what}: not ready after {timeout_s} s: {last}")


@dataclass
class Record:
    """One program's results, appended to CLAWPOINT_REALSW_RESULTS when set."""

    program: str
    checks: str
    ops: dict[str, dict[str, object]] = field(default_factory=dict)

    def add(self, op: str, window: Window | None, **extra: object) -> None:
        self.ops[op] = {**(window.as_dict() if window else {}), **extra, "checked": True}

    def save(self) -> None:
        path = os.environ.get("CLAWPOINT_REALSW_RESULTS")
        if path:
            with open(path, "a") as f:
                f.write(
                    json.dumps({"program": self.program, "checks": self.checks, "ops": self.ops})
                    + "\n"
                )


class Ops:
    """The four operations on ``local:NAME`` through a CLI-like callable, each inside a
    client window when a pinger runs."""

    def __init__(self, run: Callable[..., Any], name: str, pinger: Pinger | None) -> None:
        self.run, self.name, self.ref, self.pinger = run, name, f"local:{name}", pinger

    def timed(self, *args: str) -> Window | None:
        if self.pinger is None:
            self.run(*args)
            return None
        with self.pinger.window() as w:
            self.run(*args)
        return w


def real_cycle(
    cli: Cli | TenantCli,
    rec: Record,
    name: str,
    argv: list[str],
    *,
    pinger: Pinger | None,
    write: Callable[[str], None],
    check: Callable[[str], None],
    failover_check: Callable[[str], None],
    start: Callable[[], None] | None = None,
    run_opts: Sequence[str] = (),
) -> None:
    """``write(tag)`` puts data in, ``check(tag)`` verifies all of it is there;
    ``failover_check(checkpoint_id)`` verifies what a failover to that checkpoint keeps.
    ``run_opts``: options of ``clawpoint run`` (``--init``...)."""
    cli("run", "--name", name, "--node", "node-a", "--detach", *run_opts, "--", *argv)
    ops = Ops(cli, name, pinger)
    if start is not None:
        start()
    check("start")
    if pinger is not None:
        pinger.__enter__()
    try:
        write("checkpoint")
        rec.add("checkpoint", ops.timed("checkpoint", ops.ref, "--yes"))
        assert cli.workload(name)["state"] in LIVE
        check("checkpoint")

        write("migrate")
        rec.add("migrate", ops.timed("migrate", ops.ref, "--to", "node-b", "--yes"))
        assert cli.workload(name)["node"] == "node-b"
        check("migrate")

        write("preempt")
        w = None
        if pinger is not None:
            with pinger.window() as w:
                cli("preempt", ops.ref, "--yes")
                assert cli.workload(name)["state"] == "stopped"
                cli("resume", ops.ref, "--yes")
        else:
            cli("preempt", ops.ref, "--yes")
            assert cli.workload(name)["state"] == "stopped"
            cli("resume", ops.ref, "--yes")
        rec.add("preempt/resume", w)
        check("preempt")

        write("failover")
        out = json.loads(cli("checkpoint", ops.ref, "--yes", "--json").stdout)
        ckpt = str(out["execution"]["result"]["checkpoint"]["checkpoint_id"])
        write("lost")  # after the checkpoint: a failover to it loses this
        cli.kill_payload(name)
        w = None
        if pinger is not None:
            with pinger.window() as w:
                cli("failover", ops.ref, "--yes")
        else:
            cli("failover", ops.ref, "--yes")
        assert cli.workload(name)["state"] in LIVE
        failover_check(ckpt)
        rec.add("kill -9 + failover", w)
    finally:
        if pinger is not None:
            pinger.__exit__(None, None, None)
    assert "FAIL " not in cli.log(name), cli.log(name)[-3000:]


def checkpoint_id(cli: Cli, name: str) -> str:
    rows = json.loads(cli("checkpoints", f"local:{name}", "--json").stdout)
    newest = max(rows, key=lambda c: str(c["created_at"]))
    return str(newest["id"]).split(":", 1)[-1]


# --- Redis -----------------------------------------------------------------------------------


def resp(port: int, *args: str) -> Any:
    """One Redis command over RESP, its reply decoded (simple types and flat arrays)."""
    payload = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload.encode())
        f = s.makefile("rb")

        def read() -> Any:
            line = f.readline().rstrip(b"\r\n").decode()
            kind, rest = line[0], line[1:]
            if kind == "+":
                return rest
            if kind == "-":
                raise ValueError(f"redis error: {rest}")
            if kind == ":":
                return int(rest)
            if kind == "$":
                n = int(rest)
                return None if n < 0 else f.read(n + 2)[:-2].decode()
            if kind == "*":
                return [read() for _ in range(int(rest))]
            raise ValueError(f"unexpected reply {line!r}")

        return read()


def test_redis_with_aof(cli: Cli, tmp_path: Path) -> None:
    need("redis-server")
    port = free_port()
    data = tmp_path / "redis"
    data.mkdir()
    argv = [
        shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1",
        "--dir", str(data), "--appendonly", "yes", "--appendfsync", "always", "--save", "",
        "--daemonize", "no", "--protected-mode", "no", "--logfile", "",
    ]  # fmt: skip
    written: list[str] = []

    def write(tag: str) -> None:
        keys = [f"{tag}:{i}" for i in range(200)]
        for k in keys:
            assert resp(port, "SET", k, hashlib.sha256(k.encode()).hexdigest()) == "OK"
        written.extend(keys)

    def check(tag: str) -> None:
        wait_for("redis", lambda: resp(port, "PING"))
        assert resp(port, "DBSIZE") == len(written), tag
        for k in written[::37]:
            assert resp(port, "GET", k) == hashlib.sha256(k.encode()).hexdigest(), k

    def failover_check(ckpt: str) -> None:
        wait_for("redis after failover", lambda: resp(port, "PING"))
        before = [k for k in written if not k.startswith("lost:")]
        assert resp(port, "DBSIZE") == len(before)
        assert resp(port, "GET", "lost:0") is None
        assert resp(port, "GET", before[-1]) is not None
        tails = list(data.rglob("*.after-*"))
        assert tails, sorted(p.name for p in data.rglob("*"))  # the AOF's lost tail, kept
        assert any(b"lost:0" in p.read_bytes() for p in tails)
        written[:] = before

    rec = Record(
        "Redis 7 (AOF, appendfsync always)",
        "keys present after each step (DBSIZE, GET); AOF reloaded by a fresh server",
    )
    pinger = Pinger(redis_ping(port))
    real_cycle(cli, rec, "redis", argv, pinger=pinger, write=write, check=check,
               failover_check=failover_check)  # fmt: skip

    # Redis's own persistence agrees: a fresh server loading the AOF finds the same keys.
    cli("kill", "local:redis", "--yes")
    port2 = free_port()
    fresh = subprocess.Popen(  # noqa: S603
        [*argv[:2], str(port2), *argv[3:]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for("fresh redis", lambda: resp(port2, "PING"))

        def loaded() -> None:
            assert resp(port2, "DBSIZE") == len(written)

        wait_for("AOF loaded", loaded)
    finally:
        fresh.kill()
        fresh.wait()
    rec.save()


# --- nginx -----------------------------------------------------------------------------------


def test_nginx_workers_serving_a_file(cli: Cli, tmp_path: Path) -> None:
    need("/usr/sbin/nginx")
    port = free_port()
    root = tmp_path / "nginx"
    (root / "www").mkdir(parents=True)
    blob = os.urandom(256 * 1024)
    (root / "www" / "blob.bin").write_bytes(blob)
    digest = hashlib.sha256(blob).hexdigest()
    temp = " ".join(
        f"{k}_temp_path {root / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (root / "nginx.conf").write_text(
        f"daemon off; master_process on; worker_processes 2; user root;\n"
        f"pid {root / 'nginx.pid'}; error_log {root / 'error.log'};\n"
        f"events {{ worker_connections 128; }}\n"
        f"http {{ access_log {root / 'access.log'}; {temp}\n"
        f"  server {{ listen 127.0.0.1:{port}; root {root / 'www'}; }} }}\n"
    )
    argv = [
        "/usr/sbin/nginx",
        "-e",
        str(root / "error.log"),
        "-p",
        str(root),
        "-c",
        str(root / "nginx.conf"),
    ]
    served = [0]

    def write(tag: str) -> None:
        pass

    def check(tag: str) -> None:
        wait_for("nginx", lambda: http_fetch(port, "/blob.bin"))
        got = http_fetch(port, "/blob.bin")
        assert hashlib.sha256(got).hexdigest() == digest, tag
        served[0] += 1

    def failover_check(ckpt: str) -> None:
        check("failover")
        kept = sorted(p.name for p in root.glob("access.log.after-*"))
        assert kept, sorted(p.name for p in root.iterdir())
        assert any(ckpt.split("@")[-1] in k for k in kept), (ckpt, kept)
        text = b"".join(p.read_bytes() for p in root.glob("access.log.after-*"))
        assert b"GET /blob.bin" in text  # the requests served after the checkpoint

    rec = Record(
        "nginx 1.22 (master + 2 workers)",
        "256 KiB file byte-identical (sha256) after each step; access log's lost tail kept beside it",
    )
    real_cycle(cli, rec, "nginx", argv, pinger=Pinger(http_get(port, "/blob.bin")), write=write,
               check=check, failover_check=failover_check)  # fmt: skip
    # The restored tree is the master and its two workers.
    titles = [
        Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        for pid in tree_pids(int(cli.workload("nginx")["pid"]))
    ]
    assert sum(t.startswith("nginx: worker process") for t in titles) == 2, titles
    assert sum(t.startswith("nginx: master process") for t in titles) == 1, titles
    rec.save()


# --- Node.js ---------------------------------------------------------------------------------


def test_node_server_with_timers(cli: Cli, tmp_path: Path) -> None:
    need("node")
    port = free_port()
    argv = [shutil.which("node") or "node", str(PROGRAMS / "timer_server.js"), str(port)]
    last = [0]
    ckpt_ticks = [0]

    def ticks() -> int:
        body = http_fetch(port, "/").decode()
        assert body.startswith("ticks "), body
        return int(body.split()[1])

    def write(tag: str) -> None:
        if tag == "lost":
            ckpt_ticks[0] = last[0]

    def check(tag: str) -> None:
        wait_for("node", ticks)
        now = ticks()
        assert now >= last[0], f"{tag}: counter went back from {last[0]} to {now}"
        time.sleep(0.3)
        assert ticks() > now, f"{tag}: the timer stopped"
        last[0] = ticks()

    def failover_check(ckpt: str) -> None:
        wait_for("node", ticks)
        now = ticks()
        assert now >= ckpt_ticks[0], (now, ckpt_ticks[0])  # the checkpoint's counter or later
        time.sleep(0.3)
        assert ticks() > now, "the timer stopped after the failover"

    rec = Record(
        "Node.js 20 (HTTP server, setInterval)",
        "timer counter never behind its checkpoint and still ticking after each step",
    )
    real_cycle(cli, rec, "node", argv, pinger=Pinger(http_get(port, "/")), write=write,
               check=check, failover_check=failover_check)  # fmt: skip
    rec.save()


# --- Python training loop --------------------------------------------------------------------


def metric_steps(path: Path) -> list[int]:
    return [int(line.split()[1]) for line in path.read_text().splitlines() if line]


def test_python_training_loop_metrics(cli: Cli, tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    metrics = tmp_path / "metrics.txt"
    argv = [sys.executable, str(PROGRAMS / "ml_train.py"), str(metrics)]
    seen = [0]

    def write(tag: str) -> None:
        if tag == "lost":
            seen[0] = cli.wait_progress("ml", seen[0])  # it trained on past the checkpoint

    def check(tag: str) -> None:
        seen[0] = cli.wait_progress("ml", seen[0])
        steps = metric_steps(metrics)
        assert steps == list(range(len(steps))), f"{tag}: metrics steps have a gap or a repeat"

    def failover_check(ckpt: str) -> None:
        check("failover")
        kept = list(tmp_path.glob("metrics.txt.after-*"))
        assert kept, sorted(p.name for p in tmp_path.iterdir())  # the rewound steps, kept aside

    rec = Record(
        "Python training loop (numpy)", "metrics file steps 0..N, no gap or repeat, after each step"
    )
    real_cycle(cli, rec, "ml", argv, pinger=None, write=write, check=check,
               failover_check=failover_check)  # fmt: skip
    rec.save()


# --- Databases, as an ordinary user ----------------------------------------------------------


class TenantCli:
    """The installed CLI run as an ordinary user (tests/tenants), with its own CLAWPOINT_HOME;
    the calls ``real_cycle`` makes of ``Cli``."""

    def __init__(self, who: Tenant, home: Path) -> None:
        self.who, self.home = who, home

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = self.who.run(
            [self.who.clawpoint, *args],
            env=self.who.env(CLAWPOINT_HOME=str(self.home)),
            timeout=240,
        )
        if ok:
            assert done.returncode == 0, (
                f"clawpoint {args} -> {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    def workload(self, name: str) -> dict[str, Any]:
        rows = json.loads(self("workloads", "--json").stdout)
        return next(w for w in rows if w["name"] == name)

    def wait_state(self, name: str, state: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while (w := self.workload(name))["state"] != state:
            assert time.monotonic() < deadline, f"{name} never became {state}: {w}"
            time.sleep(0.2)

    def kill_payload(self, name: str) -> None:
        os.kill(int(self.workload(name)["pid"]), signal.SIGKILL)
        self.wait_state(name, "failed")

    def log(self, name: str) -> str:
        settings = load_settings(self.home)
        paths = [settings.log_dir / f"{name}.log", *output_files(settings, name)]
        return "\n".join(p.read_text(errors="replace") for p in paths if p.exists())


@pytest.fixture
def tenant(request: pytest.FixtureRequest) -> Iterator[tuple[Tenant, Path, TenantCli]]:
    """Alice, a directory of hers for the database, and the CLI as her."""
    from tests.tenants import tenants

    alice, _ = tenants()
    work = alice.mkdtemp(alice.home, f"realsw-{request.node.name[5:25]}-{os.getpid()}")
    cli = TenantCli(alice, work / "cphome")
    yield alice, work, cli
    done = cli("workloads", "--json", ok=False)
    for w in json.loads(done.stdout or "[]"):
        if w["state"] in LIVE:
            cli("kill", w["id"], "--yes", ok=False)
    shutil.rmtree(work, ignore_errors=True)


class MariaDBRows:
    """Rows in, rows counted: 500 per step, tagged, none duplicated; those written after the
    checkpoint a failover restores (``lost``) are gone. ``client`` runs the ``mariadb`` client
    (an argv) as whoever may, returning (code, stdout, stderr)."""

    def __init__(self, client: Callable[[list[str]], tuple[int, str, str]], port: int) -> None:
        self.client, self.port, self.rows = client, port, 0

    def sql(self, query: str, port: int | None = None) -> str:
        argv = ["mariadb", "-u", "root", "-h", "127.0.0.1", f"-P{port or self.port}", "-N",
                "-B", "-e", query]  # fmt: skip
        code, out, err = self.client(argv)
        assert code == 0, f"{query}: {err}"
        return out.strip()

    def start(self) -> None:
        wait_for("mariadb", lambda: self.sql("SELECT 1"), timeout_s=60)
        self.sql("CREATE DATABASE realsw")
        self.sql(
            "CREATE TABLE realsw.t (id INT AUTO_INCREMENT PRIMARY KEY, tag TEXT, i INT) ENGINE=InnoDB"
        )

    def write(self, tag: str) -> None:
        self.sql(f"INSERT INTO realsw.t (tag, i) SELECT '{tag}', seq FROM realsw.seq_1_to_500")
        if tag != "lost":
            self.rows += 500

    def check(self, tag: str) -> None:
        wait_for("mariadb", lambda: self.sql("SELECT 1"), timeout_s=60)
        assert int(self.sql("SELECT count(*) FROM realsw.t")) == self.rows, tag
        assert int(self.sql("SELECT count(DISTINCT tag, i) FROM realsw.t")) == self.rows, tag

    def failover_check(self, ckpt: str) -> None:
        self.check("failover")  # the rows committed after the checkpoint are not there
        assert self.sql("SELECT count(*) FROM realsw.t WHERE tag = 'lost'") == "0"

    def recovered(self, server: subprocess.Popen[bytes], port: int) -> None:
        """InnoDB's own crash recovery agrees: a fresh server on the data directory (started
        by the caller on ``port``) counts the same rows."""
        try:
            wait_for("fresh mariadb", lambda: self.sql("SELECT 1", port), timeout_s=60)
            assert int(self.sql("SELECT count(*) FROM realsw.t", port)) == self.rows
        finally:
            server.terminate()
            server.wait(timeout=60)


def test_mariadb_as_an_ordinary_user(tenant: tuple[Tenant, Path, TenantCli]) -> None:
    """MariaDB, which as root drops to the ``mysql`` user (``--user``; next test), run
    instead as the user it should run as."""
    need("/usr/sbin/mariadbd", "mariadb-install-db", "mariadb")
    alice, work, cli = tenant
    data = work / "data"
    done = alice.run(mariadb_install_db(data))
    assert done.returncode == 0, done.stdout + done.stderr
    port = free_port()

    def client(argv: list[str]) -> tuple[int, str, str]:
        out = alice.run(argv)
        return out.returncode, out.stdout, out.stderr

    db = MariaDBRows(client, port)
    rec = Record("MariaDB 10.11 (InnoDB, as an ordinary user)",
                 "row counts after each step, no duplicates; a fresh server recovers the same rows")  # fmt: skip
    real_cycle(cli, rec, "mariadb", mariadb_server(data, work, port),
               pinger=Pinger(mysql_ping(port)), write=db.write, check=db.check,
               failover_check=db.failover_check, start=db.start)  # fmt: skip
    # The restored server runs as alice, in a user namespace of hers.
    status = Path(f"/proc/{cli.workload('mariadb')['pid']}/status").read_text()
    uid_line = next(x for x in status.splitlines() if x.startswith("Uid:"))
    assert {int(u) for u in uid_line.split()[1:]} == {alice.uid}, uid_line
    cli("kill", "local:mariadb", "--yes")
    port2 = free_port()
    server = mariadb_server(data, work, port2)
    db.recovered(alice.popen(server, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port2)
    rec.save()


def _as_root(argv: list[str]) -> tuple[int, str, str]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)  # noqa: S603
    return out.returncode, out.stdout, out.stderr


def test_mariadb_started_by_root_that_drops_to_mysql(cli: Cli) -> None:
    """MariaDB started by root with ``--user=mysql``, as its package runs it: the server
    switches to the ``mysql`` uid as the first process of its PID namespace. Started plainly,
    its checkpoint is refused at plan time, naming the process, the uid and ``run --init``
    (CRIU cannot dump a tree whose first process dropped its privileges without a /proc of
    its namespace: core/checkpoint/probe.py), and it keeps serving. Under our init, in a user
    namespace of its own (``--user-namespace``: this machine's root lacks CAP_SYS_RESOURCE,
    without which CRIU cannot read another uid's limits), it goes through the four
    operations, judged like the ordinary user's server, and runs as ``mysql`` throughout."""
    need("/usr/sbin/mariadbd", "mariadb-install-db", "mariadb")
    try:
        pw = pwd.getpwnam("mysql")
    except KeyError:
        pytest.skip("no mysql user (the Debian package creates it)")
    work = Path(tempfile.mkdtemp(prefix="clawpoint-mariadb-root-"))
    data = work / "data"
    try:
        os.chown(work, pw.pw_uid, pw.pw_gid)
        subprocess.run(mariadb_install_db(data, "mysql"), check=True, capture_output=True)  # noqa: S603
        port = free_port()
        argv = mariadb_server(data, work, port, "mysql")
        cli("run", "--name", "dbplain", "--node", "node-a", "--detach", "--", *argv)
        wait_for("mariadb", mysql_ping(port), timeout_s=60)
        done = cli("checkpoint", "local:dbplain", "--yes", ok=False)
        assert done.returncode == 8
        text = " ".join((done.stdout + done.stderr).split())
        assert f"running as uid {pw.pw_uid}" in text and "--init" in text, text
        assert cli.workload("dbplain")["state"] == "running"  # left as it was
        assert not json.loads(cli("checkpoints", "local:dbplain", "--json").stdout)
        mysql_ping(port)()  # still serving
        cli("kill", "local:dbplain", "--yes")

        db = MariaDBRows(_as_root, port)
        rec = Record("MariaDB 10.11 (InnoDB, started by root, drops to mysql)",
                     "row counts after each step, no duplicates; a fresh server recovers the "
                     "same rows; the server runs as mysql throughout")  # fmt: skip
        real_cycle(cli, rec, "mariadb-root", argv, pinger=Pinger(mysql_ping(port)),
                   write=db.write, check=db.check, failover_check=db.failover_check,
                   start=db.start, run_opts=("--init", "--user-namespace"))  # fmt: skip
        init = cli.workload("mariadb-root")["pid"]
        assert Path(f"/proc/{init}/comm").read_text().strip() == "clawpoint-init"
        assert Path(f"/proc/{init}/uid_map").read_text().split() == ["0", "0", "4294967295"]
        (server,) = tree_pids(init)[1:]
        uid_line = next(x for x in Path(f"/proc/{server}/status").read_text().splitlines()
                        if x.startswith("Uid:"))  # fmt: skip
        assert {int(u) for u in uid_line.split()[1:]} == {pw.pw_uid}, uid_line
        cli("kill", "local:mariadb-root", "--yes")
        port2 = free_port()
        fresh = mariadb_server(data, work, port2, "mysql")
        db.recovered(
            subprocess.Popen(fresh, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),  # noqa: S603
            port2,
        )
        rec.save()
    finally:
        cli("kill", "local:dbplain", "--yes", ok=False)
        cli("kill", "local:mariadb-root", "--yes", ok=False)
        shutil.rmtree(work, ignore_errors=True)


def test_postgresql_is_refused_for_its_system_v_memory(
    tenant: tuple[Tenant, Path, TenantCli],
) -> None:
    """PostgreSQL keeps a System V shared memory segment attached (its interlock, even with
    ``shared_memory_type = mmap``), and an ordinary user's CRIU cannot dump System V memory
    (criu/ipc_ns.c reads it through /proc/PID/map_files, which the kernel opens only for
    CAP_CHECKPOINT_RESTORE in the initial user namespace); as root it must not drop to the
    ``postgres`` user (previous test). So PostgreSQL is refused at plan time, naming the
    segment, rather than failing in CRIU at every checkpoint; it keeps serving."""
    bindir = pg_bin()
    alice, work, cli = tenant
    data = work / "pgdata"
    done = alice.run([bindir / "initdb", "-D", data, "-A", "trust", "--no-sync"])
    assert done.returncode == 0, done.stderr
    port = free_port()
    cli("run", "--name", "pg", "--node", "node-a", "--detach", "--",
        str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(work),
        "-c", "listen_addresses=127.0.0.1")  # fmt: skip
    wait_for("postgres", pg_ping(port), timeout_s=60)
    done = cli("checkpoint", "local:pg", "--yes", ok=False)
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0, text
    assert "System V shared memory /SYSV" in text, text
    assert "criu dump" not in text, text  # refused before CRIU ran
    assert cli.workload("pg")["state"] == "running"
    pg_ping(port)()


def pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
    if not found:
        pytest.skip("PostgreSQL is not installed")
    return found[-1].parent


def test_system_v_shared_memory_needs_an_ipc_namespace_of_its_own(cli: Cli) -> None:
    """A program that keeps a System V segment attached (as PostgreSQL does) is refused at
    plan time in the root mode when it shares the host's IPC namespace (CRIU: "doesn't live
    in IPC ns"), dry run and run alike, and left running; started through ``unshare --ipc``
    it goes through every operation with the segment's contents (its own check: the
    segment's counter and the process's agree after each restore)."""
    if os.geteuid() != 0:
        pytest.skip("the root mode: a payload started as root")
    need("unshare")
    argv = [sys.executable, str(PROGRAMS / "sysv_shm.py")]
    cli("run", "--name", "shm-host", "--node", "node-a", "--detach", "--", *argv)
    cli.wait_progress("shm-host", 1)
    for extra in (["--dry-run"], []):
        proc = cli("checkpoint", "local:shm-host", "--yes", "--json", *extra, ok=False)
        assert proc.returncode == 8, proc.stdout + proc.stderr
        text = json.dumps(json.loads(proc.stdout))
        assert "System V shared memory /SYSV" in text and "unshare --ipc" in text, text
    assert cli.workload("shm-host")["state"] == "running"  # left as it was
    cycle(cli, "shm-ipcns", ["unshare", "--ipc", "--", *argv])
