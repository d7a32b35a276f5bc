"""While a handoff moves a server, its new connections wait instead of being refused.

Real kernel, real iptables (``iptables-legacy``), real CRIU, the installed CLI:
- the mechanism alone: a SYN that arrives while nothing listens is held and delivered to the
  socket that listens next (and is refused without the hold, so the test can fail);
- a holder killed mid-hold leaves a rule that passes packets (``--queue-bypass``), and the
  next hold of that workload deletes it;
- end to end: a Python HTTP server on ``::`` (IPv4 clients reach it through the IPv6
  socket) migrated back and forth while a client makes a request every 10 ms and retries a
  failed one once 10 ms later: no request fails, the checkpoint step says how many
  connections were held, and no rule is left. Before the hold, 2-3 requests per move failed
  (docs/benchmarks.md, "Real software").
- ``[migration] hold_connections = false`` makes no hold.

Root only (CAP_NET_ADMIN); each rule names a workload made here and a port picked free.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.config import load_settings
from core.wrapper import connection_hold
from tests.workloads.conftest import Cli
from tests.workloads.pinger import Pinger, http_get
from tests.workloads.test_handoff import migrate, step_output
from tests.workloads.test_real_software import free_port

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="holding connections needs root"),
    pytest.mark.skipif(
        connection_hold.unavailable() is not None, reason=str(connection_hold.unavailable())
    ),
    pytest.mark.timeout(300),
]


def hold_rules(name: str | None = None) -> list[str]:
    """The hold rules in place (of workload ``name`` only, when given)."""
    out = subprocess.run(
        ["iptables-legacy", "-w", "5", "-t", "raw", "-S", "PREROUTING"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rules = [line for line in out.splitlines() if connection_hold.COMMENT_PREFIX in line]
    if name is None:
        return rules
    return [r for r in rules if f"{connection_hold.COMMENT_PREFIX}{name}" in shlex.split(r)]


def rule_key(cli: Cli, name: str) -> str:
    """What the rules of workload ``name`` of the CLI's home are named after."""
    return connection_hold.hold_key(name, load_settings(cli.home).home)


def listener(port: int = 0) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(16)
    return s


@contextlib.contextmanager
def server_process(*socks: socket.socket) -> Iterator[int]:
    """A process holding ``socks`` (as a server's processes hold theirs), so a hold covers
    exactly their ports and never another listener of this test process; killed on exit."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        pass_fds=[s.fileno() for s in socks],
    )  # fmt: skip
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


def connect_in_background(port: int) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def client() -> None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                result["ok"] = True
        except OSError as exc:
            result["error"] = exc

    thread = threading.Thread(target=client)
    thread.start()
    return thread, result


def test_a_syn_while_nothing_listens_waits_for_the_next_listener() -> None:
    server = listener()
    port = server.getsockname()[1]
    with server_process(server) as pid:
        hold, said = connection_hold.start("hold-unit", [pid])
    assert hold is not None, said
    assert said == f"holding new connections to port {port}"
    try:
        server.close()  # nothing listens now: without the hold the kernel refuses
        thread, result = connect_in_background(port)
        time.sleep(0.3)
        assert thread.is_alive() and not result  # the SYN waits in the queue
        server = listener(port)
        assert hold.release() >= 1
        thread.join(10)
        assert result == {"ok": True}
        assert not hold_rules("hold-unit")
    finally:
        hold.release()
        server.close()
    # The same gap without a hold: refused. This is what the hold is for.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_server_with_more_ports_than_one_rule_takes_is_held_on_all_of_them() -> None:
    servers = [listener() for _ in range(connection_hold.MULTIPORT_MAX + 5)]
    ports = sorted(s.getsockname()[1] for s in servers)
    with server_process(*servers) as pid:
        hold, said = connection_hold.start("hold-many", [pid])
    assert hold is not None, said
    try:
        assert said == f"holding new connections to port {', '.join(map(str, ports))}"
        assert len(hold_rules("hold-many")) == 2  # 15 + 5 ports
        last = next(s for s in servers if s.getsockname()[1] == ports[-1])
        last.close()
        thread, result = connect_in_background(ports[-1])  # a port of the second rule
        time.sleep(0.3)
        assert thread.is_alive() and hold.held == 1
        servers.append(listener(ports[-1]))
        hold.release()
        thread.join(10)
        assert result == {"ok": True}
        assert not hold_rules("hold-many")
    finally:
        hold.release()
        for s in servers:
            s.close()


def test_two_homes_workloads_of_one_name_keep_their_own_rules(tmp_path: Path) -> None:
    """A hold drops the stale rules of its own workload only: the same name in another
    clawpoint home (another user's root install, a second CLAWPOINT_HOME) keeps its rule.
    Both holds start from the same queue number (one process): the second finds it taken
    (the kernel answers EPERM) and binds the next one."""
    server = listener()
    keys = [connection_hold.hold_key("same", tmp_path / home) for home in ("a", "b")]
    assert keys[0] != keys[1]
    holds = []
    try:
        with server_process(server) as pid:
            for key in keys:
                hold, said = connection_hold.start(key, [pid])
                assert hold is not None, said
                holds.append(hold)
        assert [len(hold_rules(k)) for k in keys] == [1, 1]  # b's start left a's in place
    finally:
        for hold in holds:
            hold.release()
        server.close()
    assert not hold_rules(keys[0]) and not hold_rules(keys[1])


def test_until_the_server_is_frozen_its_connections_pass_unheld() -> None:
    """The hold is set before the dump starts, but the server serves until CRIU seizes it:
    SYNs pass on until ``frozen()`` says so, and only then wait."""
    server = listener()
    port = server.getsockname()[1]
    frozen = threading.Event()
    with server_process(server) as pid:
        hold, said = connection_hold.start("hold-pass", [pid], frozen.is_set)
    assert hold is not None, said
    try:
        t0 = time.monotonic()
        socket.create_connection(("127.0.0.1", port), timeout=3).close()  # not frozen: passes
        assert time.monotonic() - t0 < 0.5 and hold.held == 0
        frozen.set()
        thread, result = connect_in_background(port)
        time.sleep(0.3)
        assert thread.is_alive() and hold.held == 1  # frozen: waits
        assert hold.release() == 1
        thread.join(10)
        assert result == {"ok": True}  # the listener was there all along: accepted at once
    finally:
        hold.release()
        server.close()


def test_stopped_says_whether_criu_has_seized_a_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not connection_hold.stopped(child.pid)
        child.send_signal(signal.SIGSTOP)  # a stop, as ptrace's seize shows one ("T"/"t")
        deadline = time.monotonic() + 5
        while not connection_hold.stopped(child.pid):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait()
    assert connection_hold.stopped(child.pid)  # gone counts as stopped


def test_a_killed_holder_leaves_a_rule_that_passes_and_the_next_hold_drops_it() -> None:
    server = listener()
    port = server.getsockname()[1]
    keeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"], pass_fds=[server.fileno()]
    )
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys, time\nfrom core.wrapper import connection_hold as h\n"
         f"hold, said = h.start('hold-killed', [{keeper.pid}])\n"
         "print(said, flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("holding"), "the holder did not hold"
        (stale,) = hold_rules("hold-killed")
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        t0 = time.monotonic()
        socket.create_connection(("127.0.0.1", port), timeout=3).close()  # passes at once
        assert time.monotonic() - t0 < 1.0
        assert stale in hold_rules()  # left, harmless
        hold, said = connection_hold.start("hold-killed", [keeper.pid])
        assert hold is not None, said
        (fresh,) = hold_rules("hold-killed")
        assert fresh != stale  # the stale one dropped, ours (its own queue) in place
        hold.release()
        assert not hold_rules("hold-killed")
    finally:
        child.kill()
        keeper.kill()
        keeper.wait()
        server.close()
        connection_hold.drop_stale_rules("hold-killed")


def start_server(cli: Cli, name: str, port: int, root: Path) -> None:
    (root / "index.html").write_text("hello\n")
    cli("run", "--name", name, "--node", "node-a", "--detach", "--", sys.executable, "-m",
        "http.server", "--bind", "::", "--directory", str(root), str(port))  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            http_get(port, "/index.html")()
            return
        except OSError:
            assert time.monotonic() < deadline, cli.log(name)[-2000:]
            time.sleep(0.1)


def test_a_migrating_server_refuses_no_client(cli: Cli, tmp_path: Path) -> None:
    port = free_port()
    start_server(cli, "web", port, tmp_path)
    with Pinger(http_get(port, "/index.html")) as pinger:
        for to in ("node-b", "node-a"):
            with pinger.window() as seen:
                done = migrate(cli, "web", to)
            assert seen.failed == 0, seen.as_dict()
            assert seen.ok > 0, seen.as_dict()
            checkpoint = step_output(done, "checkpoint")
            assert checkpoint["handoff"] == "sent", checkpoint
            assert checkpoint["connections_held"] >= 0, checkpoint
            assert not hold_rules(rule_key(cli, "web"))
    assert "wrapper.connections_released" in cli.log("web")


def test_hold_connections_off_makes_no_hold(cli: Cli, tmp_path: Path) -> None:
    cli.config("[migration]\nhold_connections = false\n")
    port = free_port()
    start_server(cli, "web-off", port, tmp_path)
    done = migrate(cli, "web-off", "node-b")
    checkpoint = step_output(done, "checkpoint")
    assert checkpoint["handoff"] == "sent" and "connections_held" not in checkpoint
    assert "wrapper.connection_hold" not in cli.log("web-off")
    assert json.loads(cli("workloads", "--json").stdout)  # still listed, still running
    http_get(port, "/index.html")()


def test_the_source_killed_while_holding_leaves_nobody_waiting_and_no_hold(
    cli: Cli, tmp_path: Path
) -> None:
    """The source wrapper dies right after the handoff, its hold still in place: its queue
    goes with it (what it held is dropped, and those clients' SYNs come again a second
    later), the rule left passes packets (``--queue-bypass``), so no client waits on a dead
    holder: until the standby's server listens they are refused as without a hold, then
    served. The next move deletes the rule and refuses nobody."""
    port = free_port()
    plain_env = dict(cli.env)
    cli.env["CLAWPOINT_TEST_DIE_AFTER_HANDOFF"] = "1"  # the source wrapper inherits it
    start_server(cli, "web-die", port, tmp_path)
    cli.env = plain_env
    try:
        with Pinger(http_get(port, "/index.html")) as pinger:
            with pinger.window() as seen:
                proc = cli("migrate", "local:web-die", "--to", "node-b", "--yes", "--json",
                           ok=False)  # fmt: skip
                assert proc.returncode != 0, proc.stdout  # the source died: not reported done
                assert cli.wait_state("web-die", "running")["node"] == "node-b"
            assert seen.longest_gap_s < 3, seen.as_dict()  # a dropped SYN's 1 s, not more
            assert hold_rules(rule_key(cli, "web-die"))  # left by the dead source, passing
            with pinger.window() as seen:
                done = migrate(cli, "web-die", "node-a")  # a fresh source wrapper
            assert seen.failed == 0, seen.as_dict()
            assert step_output(done, "checkpoint")["handoff"] == "sent"
        assert not hold_rules(rule_key(cli, "web-die"))
        http_get(port, "/index.html")()
    finally:
        connection_hold.drop_stale_rules(rule_key(cli, "web-die"))
