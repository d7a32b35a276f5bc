"""Root without the capabilities CRIU uses (a container's bounding set): ``config check``
says which and what the user loses, and CRIU's harmless complaint about them never becomes
the message of a failed checkpoint or restore.

A workload that ended says how, whatever it said while it ran.

Run as root: the command is started through ``setpriv --bounding-set -sys_resource``, as a
container runtime whose default set lacks CAP_SYS_RESOURCE starts it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from core.checkpoint import criu, criu_setup
from tests.cli.conftest import CLAWPOINT, Cli


def _privileges(cli: Cli, *prefix: str, item: str = "privileges") -> dict[str, str]:
    got = subprocess.run(  # noqa: S603 (argv list)
        [*prefix, str(CLAWPOINT), "config", "check", "--json"],
        capture_output=True, text=True, env=cli.env(), timeout=120,
    )  # fmt: skip
    items = {i["name"]: i for i in json.loads(got.stdout)["items"]}
    return items[item]  # type: ignore[no-any-return]


def _effective() -> int:
    status = Path("/proc/self/status").read_text()
    return next(int(ln.split()[1], 16) for ln in status.splitlines() if ln.startswith("CapEff:"))


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_config_check_names_the_capabilities_root_lacks(cli: Cli) -> None:
    dropped = _privileges(cli, "setpriv", "--bounding-set", "-sys_resource,-net_admin")
    assert dropped["level"] == "warn", dropped
    assert "CAP_SYS_RESOURCE" in dropped["message"] and "CAP_NET_ADMIN" in dropped["message"]
    # As this process is: only what it really lacks is named.
    lacks = {name for bit, name in ((24, "CAP_SYS_RESOURCE"), (12, "CAP_NET_ADMIN"))
             if not _effective() >> bit & 1}  # fmt: skip
    here = _privileges(cli)
    assert here["level"] == ("warn" if lacks else "ok"), here
    for name in ("CAP_SYS_RESOURCE", "CAP_NET_ADMIN"):
        assert (name in here["message"]) == (name in lacks), here


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("iptables-legacy"),
    reason="needs root and iptables-legacy",
)
def test_config_check_says_whether_a_moving_server_keeps_its_new_connections(cli: Cli) -> None:
    here = _privileges(cli, item="connection-hold")
    assert here == {"name": "connection-hold", "level": "ok", "message": here["message"]}
    dropped = _privileges(cli, "setpriv", "--bounding-set", "-net_admin", item="connection-hold")
    assert dropped["level"] == "warn" and "CAP_NET_ADMIN" in dropped["message"], dropped
    (cli.home / "config.toml").write_text("[migration]\nhold_connections = false\n")
    off = _privileges(cli, item="connection-hold")
    assert off["level"] == "ok" and "hold_connections = false" in off["message"], off


def test_a_harmless_criu_error_line_never_leads_a_failure_message(tmp_path: Path) -> None:
    log = tmp_path / "criu-restore.log"
    log.write_text(
        "(00.000010) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: "
        "Operation not permitted\n"
        "(00.004000) Warn  (criu/files-reg.c:2094): File a.log has bad size 10 (expect 4)\n"
        "(00.004100) Error (criu/files-reg.c:2107): Can't open file a.log on restore\n"
    )
    tail = criu_setup.log_tail(log)
    assert "RLIMIT_NOFILE" not in tail
    assert tail.startswith("(00.004100) Error") and "Can't open file a.log" in tail


def test_a_dump_that_cannot_read_a_process_limits_names_cap_sys_resource(tmp_path: Path) -> None:
    # Root without CAP_SYS_RESOURCE, a task whose uids or gids are not root's (it changed them
    # after the plan was made): CRIU's prlimit(2) fails. The refusal says why and what to give.
    log = tmp_path / "criu-dump.log"
    log.write_text(
        "(00.000010) Error (criu/util.c:1534): rlimit: Can't setup RLIMIT_NOFILE for self: "
        "Operation not permitted\n"
        "(00.030000) Error (criu/cr-dump.c:389): Can't get rlimit 0: Operation not permitted\n"
        "(00.030100) Error (criu/cr-dump.c:1584): Dump core (pid: 17249) failed with -1\n"
        "(00.040000) Error (criu/cr-dump.c:1975): Dumping FAILED.\n"
    )
    refused = criu._refusal(log, criu.CriuOptions())
    assert refused is not None
    message, hint = refused
    assert "pid 17249" in message and "CAP_SYS_RESOURCE" in message
    assert "--cap-add SYS_RESOURCE" in hint and "left as it was" in hint


def test_a_workload_that_ended_says_so_not_what_it_said_while_running(cli: Cli) -> None:
    # The checkpoint's news ("checkpointed ...") must not outlive the process.
    ref = cli.start_counter("brief", node="node-a")
    cli("checkpoint", ref, "--yes")
    w = cli.workload(ref)
    assert w["message"].startswith("checkpointed "), w
    os.kill(int(w["pid"]), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while (w := cli.workload(ref))["state"] != "failed":
        assert time.monotonic() < deadline, w
        time.sleep(0.1)
    assert w["message"] == "ended: signal SIGKILL" and w["exit_status"] == "signal SIGKILL", w
