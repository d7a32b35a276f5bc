"""Another user of the same machine cannot act on a user's workload, by any path.

Alice runs a CRIU-wrapped counter with her own installed ``clawpoint``. Bob, an ordinary user
of the same host, tries what a curious or hostile neighbour would: read her state and
checkpoints, connect to her wrapper's control socket (also after root loosened its modes,
which the wrapper must survive: it checks the caller's uid with SO_PEERCRED), and act on her
workload through his own CLI and through an MCP client talking to his own server. Every try
fails with a clear error and a documented exit code, and nothing of alice's changes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from tests.tenants import Tenant, tenants

pytestmark = [pytest.mark.criu, pytest.mark.timeout(300)]


def _cli(who: Tenant, home: Path, *args: str) -> tuple[int, str, str]:
    done = who.run([who.clawpoint, *args], env=who.env(CLAWPOINT_HOME=str(home)))
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


@pytest.fixture
def alices_workload() -> Iterator[tuple[Tenant, Tenant, Path, str]]:
    alice, bob = tenants()
    # Not in her home: the test loosens this directory's modes, and her home's are reset by
    # every pytest worker that starts a session (scripts/test-tenants.sh up).
    home = Path(tempfile.mkdtemp(prefix="cp-iso-", dir="/tmp"))
    os.chown(home, alice.uid, alice.gid)
    name = "private-counter"
    code, _, err = _cli(
        alice, home, "run", "--name", name, "--detach", "--json", "--",
        str(alice.python), "-m", "core.workloads.counter", "--state-mb", "8",
        "--step-seconds", "0.05",
    )  # fmt: skip
    assert code == 0, err
    code, _out, err = _cli(alice, home, "checkpoint", f"local:{name}", "--json")
    assert code == 0, err
    yield alice, bob, home, name
    _cli(alice, home, "kill", f"local:{name}", "--yes", "--json")
    shutil.rmtree(home, ignore_errors=True)


def _checkpoints(alice: Tenant, home: Path, name: str) -> list[str]:
    code, out, err = _cli(alice, home, "checkpoints", f"local:{name}", "--json")
    assert code == 0, err
    return [c["id"] for c in json.loads(out)]


# Sends one request (argv[2]) to a wrapper's control socket (argv[1]) and prints the answer;
# exit 3 with the error's name when the socket cannot be reached.
PROBE = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX)\n"
    "try:\n    s.connect(sys.argv[1])\n"
    "except OSError as e:\n    print(type(e).__name__); sys.exit(3)\n"
    "try:\n"
    "    s.sendall(sys.argv[2].encode() + b'\\n')\n"
    "except BrokenPipeError:\n    pass\n"
    "print(s.makefile().readline())\n"
)


def test_bob_cannot_reach_alices_state_socket_or_checkpoints(
    alices_workload: tuple[Tenant, Tenant, Path, str],
) -> None:
    alice, bob, home, name = alices_workload
    before = _checkpoints(alice, home, name)
    sock = home / "run" / f"{name}.sock"
    assert sock.exists()
    for path in (home / "state.db", home / "checkpoints"):
        assert bob.run(["ls", "-l", str(path)]).returncode != 0  # her home is 0700
    probe = PROBE
    checkpoint = '{"op": "checkpoint"}'
    # The op that re-times periodic checkpoints: off, or every second (a flood of dumps).
    interval = '{"op": "interval", "every_s": 1}'
    done = bob.run([bob.python, "-c", probe, str(sock), checkpoint])
    assert done.returncode == 3 and "PermissionError" in done.stdout, done

    # A deployment that loosened the modes (root does it here): the wrapper itself refuses.
    os.chmod(home, 0o755)
    os.chmod(home / "run", 0o755)
    os.chmod(sock, 0o666)
    try:
        answers = [
            bob.run([bob.python, "-c", probe, str(sock), op]) for op in (checkpoint, interval)
        ]
    finally:
        os.chmod(sock, 0o600)
        os.chmod(home, 0o700)
    for done in answers:
        assert done.returncode == 0, done
        answer = json.loads(done.stdout)
        assert answer["error"]["error"] == "policy-denied", answer
        assert f"uid {bob.uid}" in answer["error"]["message"]
    time.sleep(0.5)
    assert _checkpoints(alice, home, name) == before  # nothing was taken for bob


def test_bob_cannot_act_on_alices_workload_through_his_cli(
    alices_workload: tuple[Tenant, Tenant, Path, str],
) -> None:
    alice, bob, home, name = alices_workload
    before = _checkpoints(alice, home, name)
    own = bob.home / f"cp-iso-{os.getpid()}"
    try:
        code, out, err = _cli(bob, own, "checkpoint", f"local:{name}", "--json")
        assert code == 3, (out, err)  # not found: his clawpoint knows only his workloads
        code, out, err = _cli(bob, own, "kill", f"local:{name}", "--yes", "--json")
        assert code == 3, (out, err)
        # Pointed at her home: refused by the file system, said clearly, exit non-zero.
        code, out, err = _cli(bob, home, "workloads", "--json")
        assert code != 0 and "ermission" in out + err, (code, out, err)
    finally:
        shutil.rmtree(own, ignore_errors=True)
    assert alice_running(alice, home, name)
    assert _checkpoints(alice, home, name) == before


def test_bob_cannot_switch_alices_wrapper_to_auto(
    alices_workload: tuple[Tenant, Tenant, Path, str],
) -> None:
    """The auto form of the ``interval`` op passes the same peer-uid gate: with the modes
    loosened, bob's request is refused and alice's wrapper stays as it was; hers is taken."""
    alice, bob, home, name = alices_workload
    sock = home / "run" / f"{name}.sock"
    # A harmless auto for alice (at most hourly); bob's would re-time her every second.
    auto = '{{"op": "interval", "every_s": {s}, "auto": {{"mtbf_h": 0.001, "min_s": {s}, "max_s": {s}}}}}'
    status = '{"op": "status"}'
    os.chmod(home, 0o755)
    os.chmod(home / "run", 0o755)
    os.chmod(sock, 0o666)
    try:
        done = bob.run([bob.python, "-c", PROBE, str(sock), auto.format(s=1)])
    finally:
        os.chmod(sock, 0o600)
        os.chmod(home, 0o700)
    assert done.returncode == 0, done
    answer = json.loads(done.stdout)
    assert answer["error"]["error"] == "policy-denied", answer
    assert f"uid {bob.uid}" in answer["error"]["message"]

    said = json.loads(alice.run([alice.python, "-c", PROBE, str(sock), status]).stdout)
    assert said["result"]["auto"] is False and said["result"]["checkpoint_every"] is None, said
    done = alice.run([alice.python, "-c", PROBE, str(sock), auto.format(s=3600)])
    assert json.loads(done.stdout)["result"]["auto"] is True, done  # hers: taken


def alice_running(alice: Tenant, home: Path, name: str) -> bool:
    _code, out, _err = _cli(alice, home, "workloads", "--json")
    return any(w["name"] == name and w["state"] == "running" for w in json.loads(out))


@pytest.mark.anyio
async def test_bob_cannot_act_on_alices_workload_through_mcp(
    alices_workload: tuple[Tenant, Tenant, Path, str],
) -> None:
    alice, bob, home, name = alices_workload
    own = bob.home / f"cp-iso-mcp-{os.getpid()}"
    own.mkdir(exist_ok=True)
    os.chown(own, bob.uid, bob.gid)
    params = StdioServerParameters(
        command="setpriv",
        args=[f"--reuid={bob.uid}", f"--regid={bob.gid}", "--clear-groups", "--",
              str(bob.clawpoint), "serve"],
        env=bob.env(CLAWPOINT_HOME=str(own)),
        cwd=str(bob.home),
    )  # fmt: skip
    try:
        async with Client(params) as client:
            listed = await client.call_tool("list_workloads", {})
            assert name not in json.dumps(listed.structured_content), listed.structured_content
            result = await client.call_tool("checkpoint_workload", {"workload": f"local:{name}"})
            assert result.is_error
            text = " ".join(getattr(c, "text", "") for c in result.content)
            assert "not-found" in text, text
    finally:
        shutil.rmtree(own, ignore_errors=True)
    assert alice_running(alice, home, name)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
