"""An ordinary user (no sudo, no group, no file capability) gets transparent CRIU checkpoints.

Everything goes through the installed ``clawpoint`` run as that user (``tests.tenants``): the
200 MiB self-checking counter is started, checkpointed, preempted and resumed, migrated to
another node, and failed over after a ``kill -9`` of its processes; after each restore it
must count on from at least the step its checkpoint holds, and its own check (every page
verified each step) must never fail. The restored processes must be the user's, in user
namespaces the user owns: CRIU never ran as root on the user's images.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tenants import Tenant, tenants

pytestmark = [pytest.mark.criu, pytest.mark.timeout(600)]

PROGRAMS = Path(__file__).resolve().parents[1] / "workloads" / "programs"


class As:
    """The installed CLI as one user, with a CLAWPOINT_HOME of its own."""

    def __init__(self, who: Tenant, home: Path) -> None:
        self.who = who
        self.home = home

    def __call__(
        self, *args: str, timeout: float = 240, cwd: Path | None = None
    ) -> tuple[int, Any, str]:
        done = self.who.run(
            [self.who.clawpoint, *args],
            env=self.who.env(CLAWPOINT_HOME=str(self.home)),
            timeout=timeout,
            cwd=cwd,
        )
        assert "Traceback" not in done.stdout + done.stderr, done.stderr
        try:
            out = json.loads(done.stdout)
        except ValueError:
            out = done.stdout
        return done.returncode, out, done.stderr

    def progress(self, name: str) -> dict[str, Any]:
        try:
            return dict(json.loads((self.home / "run" / f"{name}.progress.json").read_text()))
        except (OSError, ValueError):
            return {}

    def wait_step(self, name: str, at_least: int, *, since: float = 0, timeout: float = 90) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.progress(name)
            if float(p.get("ts", 0)) > since and int(p.get("step", 0)) >= at_least:
                return int(p["step"])
            time.sleep(0.1)
        raise AssertionError(f"{name} did not reach step {at_least}: {self.progress(name)}")

    def start_counter(
        self, name: str, *, mb: int, init: bool = False, cwd: Path | None = None
    ) -> None:
        """The self-checking counter, detached on node-a, once it has made progress (run
        from ``cwd``, else the user's home)."""
        code, _, err = self(
            "run", "--name", name, "--node", "node-a", "--detach", "--json",
            *(["--init"] if init else []), "--",
            str(self.who.python), "-m", "core.workloads.counter",
            "--state-mb", str(mb), "--step-seconds", "0.05", cwd=cwd,
        )  # fmt: skip
        assert code == 0, err
        self.wait_step(name, 10)

    def workload(self, name: str) -> dict[str, Any]:
        code, found, err = self("workloads", "--json")
        assert code == 0, err
        return next(w for w in found if w["name"] == name)


@pytest.fixture
def alice(request: pytest.FixtureRequest) -> Iterator[As]:
    user, _ = tenants()
    home = user.home / f"cp-{request.node.name[:40]}-{os.getpid()}"
    shutil.rmtree(home, ignore_errors=True)
    cli = As(user, home)
    yield cli
    for w in cli("workloads", "--json")[1] or []:
        if w["state"] in ("running", "checkpointing"):
            cli("kill", w["id"], "--yes", "--json")
    shutil.rmtree(home, ignore_errors=True)


def _said(out: Any, err: str) -> str:
    """What a failed command said, whole: its message and hint first (the result's plan would
    push them past what an assertion shows), then its stderr."""
    if isinstance(out, dict):
        inner = out.get("result")
        result: dict[str, Any] = inner if isinstance(inner, dict) else out
        said = {k: result.get(k) for k in ("status", "message", "hint", "error")}
        return f"{said} stderr: {err[-2000:]}"
    return f"{out!r} stderr: {err[-2000:]}"


def _ns_owner_uid(pid: int) -> int:
    """The uid that owns ``pid``'s user namespace (ioctl NS_GET_OWNER_UID)."""
    import fcntl
    import struct

    fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    try:
        buf = fcntl.ioctl(fd, 0xB704, b"\0" * 4)  # NS_GET_OWNER_UID = _IO(0xb7, 0x4)
    finally:
        os.close(fd)
    return int(struct.unpack("I", buf)[0])


def _assert_users_own(alice: As, name: str) -> None:
    """The payload runs as the user, in a user namespace the user owns (not the host's)."""
    w = alice.workload(name)
    pid = int(w["pid"])
    status = Path(f"/proc/{pid}/status").read_text()
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    assert {int(u) for u in uids} == {alice.who.uid}, status
    assert os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
    assert _ns_owner_uid(pid) == alice.who.uid


def test_an_ordinary_user_checkpoints_moves_and_fails_over(alice: As) -> None:
    code, checks, err = alice("config", "check", "--json")
    criu = next(i for i in checks["items"] if i["name"] == "criu")
    assert criu["level"] == "ok", criu  # no setcap, no sudo, no group: it works as it is
    hold = next(i for i in checks["items"] if i["name"] == "connection-hold")
    assert hold["level"] == "warn" and "needs root" in hold["message"], hold  # said, not hidden

    name = "tenant-counter"
    alice.start_counter(name, mb=200)
    _assert_users_own(alice, name)

    # A checkpoint, left running; its images belong to the user.
    code, out, err = alice("checkpoint", f"local:{name}", "--json")
    assert code == 0 and out["status"] == "executed", _said(out, err)
    code, cps, err = alice("checkpoints", f"local:{name}", "--json")
    assert code == 0 and cps and cps[0]["status"] == "good", (cps, err)
    images = alice.home / "checkpoints" / name / f"{cps[0]['seq']:08d}" / "images"
    assert all(f.stat().st_uid == alice.who.uid for f in images.iterdir())

    # Preempt and resume: it counts on from the checkpoint.
    code, out, err = alice("preempt", f"local:{name}", "--yes", "--json")
    assert code == 0, _said(out, err)
    saved = alice.progress(name)
    t = time.time()
    code, out, err = alice("resume", f"local:{name}", "--yes", "--json")
    assert code == 0, _said(out, err)
    alice.wait_step(name, int(saved["step"]) + 5, since=t)
    _assert_users_own(alice, name)

    # Migrate to the other node: the handoff restores in fresh namespaces of the user's.
    t = time.time()
    code, out, err = alice("migrate", f"local:{name}", "--to", "node-b", "--yes", "--json")
    assert code == 0, _said(out, err)
    assert alice.workload(name)["node"] == "node-b"
    alice.wait_step(name, 5, since=t)
    _assert_users_own(alice, name)

    # Periodic checkpoints set while it runs, through her own wrapper's socket: every 2 s
    # (a new one comes, hers), then auto, then off again.
    code, cps, err = alice("checkpoints", f"local:{name}", "--json")
    before = cps[0]["seq"]
    code, out, err = alice("checkpoint-interval", f"local:{name}", "--every", "2s", "--json")
    assert code == 0 and out["status"] == "executed", _said(out, err)
    deadline = time.monotonic() + 60
    while (cps := alice("checkpoints", f"local:{name}", "--json")[1])[0]["seq"] <= before:
        assert time.monotonic() < deadline, "no periodic checkpoint after --every 2s"
        time.sleep(0.5)
    assert cps[0]["status"] == "good", cps[0]
    _assert_users_own(alice, name)
    # auto: her wrapper takes the hazard and bounds and re-times itself from her own
    # checkpoints' measured cost (the interval it starts from is within the bounds).
    code, out, err = alice(
        "checkpoint-interval", f"local:{name}", "--every", "auto", "--yes", "--json"
    )
    assert code == 0 and out["status"] == "executed", _said(out, err)
    row = alice.workload(name)
    assert row["checkpoint_auto"] is True and 10 <= row["checkpoint_every"] <= 86400, row
    code, out, err = alice(
        "checkpoint-interval", f"local:{name}", "--every", "off", "--yes", "--json"
    )
    row = alice.workload(name)
    assert code == 0 and row["checkpoint_every"] is None, (out, err)
    assert not row.get("checkpoint_auto"), row

    # kill -9 of the workload's processes (not its wrapper): fail over from the newest
    # checkpoint, which the migrate just made.
    code, cps, err = alice("checkpoints", f"local:{name}", "--json")
    newest_step = int(cps[0]["extra"]["progress"]["step"])
    os.kill(int(alice.workload(name)["pid"]), signal.SIGKILL)  # the namespace's init: all of it
    deadline = time.monotonic() + 60
    while alice.workload(name)["state"] not in ("failed", "lost"):
        assert time.monotonic() < deadline, alice.workload(name)
        time.sleep(0.2)
    t = time.time()
    code, out, err = alice("failover", f"local:{name}", "--yes", "--json")
    assert code == 0, _said(out, err)
    assert alice.wait_step(name, newest_step, since=t) >= newest_step
    alice.wait_step(name, newest_step + 10, since=t)
    _assert_users_own(alice, name)

    log = (alice.home / "logs" / f"{name}.out").read_text()
    assert "STATE CHECK FAILED" not in log


def test_an_ordinary_users_report_held_between_write_and_rename_survives_a_second_restore(
    alice: As,
) -> None:
    """The progress protocol's window as the user is (tests/workloads/test_progress_protocol.py
    as root): preempted between its temporary report's write and its rename, resumed, run on
    (the file renamed away), killed and failed over from the same checkpoint, her program
    finds its temporary file, put back as hers."""
    work = alice.who.mkdtemp(alice.who.home, f"held-{os.getpid()}")
    for program in ("held_report.py", "_selfcheck.py"):
        shutil.copy(PROGRAMS / program, work / program)
        os.chown(work / program, alice.who.uid, alice.who.gid)
    try:
        name, ref = "tenant-held", "local:tenant-held"
        code, out, err = alice(
            "run", "--name", name, "--node", "node-a", "--detach", "--json", "--",
            str(alice.who.python), str(work / "held_report.py"), str(work), "5",
        )  # fmt: skip
        assert code == 0, _said(out, err)
        deadline = time.monotonic() + 60
        while not (work / "held").exists():
            assert time.monotonic() < deadline, "it never reached its held step"
            time.sleep(0.05)
        code, out, err = alice("preempt", ref, "--yes", "--json")
        assert code == 0, _said(out, err)
        (work / "go").touch()
        code, out, err = alice("resume", ref, "--yes", "--json")
        assert code == 0, _said(out, err)
        seen = alice.wait_step(name, 8)
        os.kill(int(alice.workload(name)["pid"]), signal.SIGKILL)
        while alice.workload(name)["state"] not in ("failed", "lost"):
            assert time.monotonic() < deadline + 60, alice.workload(name)
            time.sleep(0.2)
        t = time.time()
        code, out, err = alice("failover", ref, "--yes", "--json")
        assert code == 0, _said(out, err)
        alice.wait_step(name, seen + 1, since=t)
        assert "FAIL " not in (alice.home / "logs" / f"{name}.out").read_text()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_an_ordinary_users_workload_under_our_init_checkpoints_and_moves(alice: As) -> None:
    # The init (run --init) in the user-namespace mode: the user's own, owning nothing more;
    # CRIU joins the namespaces through it and the handoff restores it with the counter.
    name = "tenant-init"
    alice.start_counter(name, mb=16, init=True)
    pid = int(alice.workload(name)["pid"])
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "clawpoint-init"
    _assert_users_own(alice, name)
    code, out, err = alice("checkpoint", f"local:{name}", "--json")
    assert code == 0 and out["status"] == "executed", _said(out, err)
    t = time.time()
    code, out, err = alice("migrate", f"local:{name}", "--to", "node-b", "--yes", "--json")
    assert code == 0, _said(out, err)
    alice.wait_step(name, 5, since=t)
    pid = int(alice.workload(name)["pid"])
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "clawpoint-init"
    _assert_users_own(alice, name)
    assert "STATE CHECK FAILED" not in (alice.home / "logs" / f"{name}.out").read_text()


@pytest.mark.anyio
async def test_an_agent_checkpoints_and_moves_an_ordinary_users_workload_over_mcp(
    alice: As,
) -> None:
    """Alice's own MCP server (stdio, run as alice) with a real MCP client: an agent
    checkpoints and migrates her CRIU workload, and it counts on, still hers."""
    from mcp import Client, StdioServerParameters

    name = "mcp-counter"
    alice.home.mkdir(exist_ok=True)
    os.chown(alice.home, alice.who.uid, alice.who.gid)
    config = alice.home / "config.toml"
    config.write_text('[policy.defaults]\ndisruptive = "allow"\n')  # no person in this test
    os.chown(config, alice.who.uid, alice.who.gid)
    alice.start_counter(name, mb=50)
    params = StdioServerParameters(
        command="setpriv",
        args=[f"--reuid={alice.who.uid}", f"--regid={alice.who.gid}", "--clear-groups", "--",
              str(alice.who.clawpoint), "serve"],
        env=alice.who.env(CLAWPOINT_HOME=str(alice.home)),
        cwd=str(alice.who.home),
    )  # fmt: skip
    async with Client(params) as client:
        done = await client.call_tool("checkpoint_workload", {"workload": f"local:{name}"})
        assert not done.is_error, done.content
        assert done.structured_content["status"] == "executed", done.structured_content
        t = time.time()
        moved = await client.call_tool(
            "migrate_workload", {"workload": f"local:{name}", "to": "local:node-b"}
        )
        assert not moved.is_error, moved.content
        assert moved.structured_content["status"] == "executed", moved.structured_content
    assert alice.workload(name)["node"] == "node-b"
    alice.wait_step(name, 5, since=t)
    _assert_users_own(alice, name)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_a_parasite_directory_left_in_the_users_cwd_does_not_block_checkpoints(
    alice: As,
) -> None:
    """As the user: a ``proc.crtools`` a killed dump left in the payload's working directory
    is cleared by the user's own clawpoint before the next dump. The directory is this
    test's own: planted in the user's home, the name would break a dump of the user's other
    workloads started there (the other tests', in parallel) mid-way, which no lock orders."""
    name = "tenant-stale"
    cwd = alice.home / "cwd"
    assert alice.who.run(["mkdir", "-p", str(cwd)]).returncode == 0
    alice.start_counter(name, mb=8, cwd=cwd)
    stale = cwd / "proc.crtools"
    done = alice.who.run(["mkdir", "-p", str(stale)])
    assert done.returncode == 0 and stale.stat().st_uid == alice.who.uid, done.stderr
    code, out, err = alice("checkpoint", f"local:{name}", "--json")
    assert code == 0 and out["status"] == "executed", _said(out, err)
    assert not stale.exists()


def test_an_ordinary_users_workload_with_a_file_open_moves_staged_and_fails_over(
    alice: As,
) -> None:
    """A checkpoint that carries the workload's files is staged for the handoff as an ordinary
    user too: the file copies are hers, the standby restores before publishing, and a failover
    from that checkpoint puts her journal back so that memory and file agree. Her move holds
    no connections (that needs root) and says nothing of it."""
    from tests.workloads.test_handoff import JOURNAL

    work = alice.home / "journal"
    work.mkdir(parents=True)
    os.chown(alice.home, alice.who.uid, alice.who.uid)
    os.chown(work, alice.who.uid, alice.who.uid)
    name = "tenant-journal"
    code, _, err = alice(
        "run", "--name", name, "--node", "node-a", "--detach", "--json", "--",
        str(alice.who.python), "-c", JOURNAL, str(work),
    )  # fmt: skip
    assert code == 0, err
    alice.wait_step(name, 10)
    code, out, err = alice("migrate", f"local:{name}", "--to", "node-b", "--yes", "--json")
    assert code == 0, _said(out, err)
    steps = {s["name"]: s["output"] for s in out["execution"]["steps"]}
    assert (
        steps["checkpoint"]["handoff"] == "sent" and "connections_held" not in steps["checkpoint"]
    )
    assert steps["start"]["handoff"]["staged"] is True, steps["start"]
    ckpt = steps["checkpoint"]["checkpoint_id"]
    seq = int(ckpt.split("@")[1])
    images = alice.home / "checkpoints" / name / f"{seq:08d}" / "images"
    copies = [f for f in images.iterdir() if f.name.startswith("clawpoint-file-")]
    assert copies and all(f.stat().st_uid == alice.who.uid for f in copies), copies
    _assert_users_own(alice, name)
    t = time.time()
    os.kill(int(alice.workload(name)["pid"]), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while alice.workload(name)["state"] not in ("failed", "lost"):
        assert time.monotonic() < deadline, alice.workload(name)
        time.sleep(0.2)
    code, out, err = alice("failover", f"local:{name}", "--yes", "--json")
    assert code == 0, _said(out, err)
    alice.wait_step(name, 5, since=t)
    log = (alice.home / "logs" / f"{name}.log").read_text()
    assert "STATE CHECK FAILED" not in log, log[-2000:]


def test_an_inotify_watch_is_refused_by_name_and_the_workload_runs_on(alice: As) -> None:
    """CRIU names a watched inode by its file handle, which only a process with
    CAP_DAC_READ_SEARCH can reopen (criu/fsnotify.c): an ordinary user's checkpoint of a
    program holding an inotify watch fails. It says why and what to do, and the workload
    goes on (as root the same program checkpoints: tests/workloads/test_inotify_queue.py)."""
    watched = alice.who.mkdtemp(alice.home.parent, f"{alice.home.name}-watched")
    try:
        _refused_and_running_on(alice, watched)
    finally:
        shutil.rmtree(watched, ignore_errors=True)


def _refused_and_running_on(alice: As, watched: Path) -> None:
    code, _, err = alice(
        "run", "--name", "ino", "--node", "node-a", "--detach", "--json", "--",
        str(alice.who.python), str(PROGRAMS / "inotify_backlog.py"), "backlog", str(watched),
    )  # fmt: skip
    assert code == 0, err
    step = alice.wait_step("ino", 10)
    code, out, err = alice("checkpoint", "local:ino", "--yes", "--json")
    said = _said(out, err)
    assert code == 8, said
    assert "inotify (or fanotify) watch that CRIU could not name" in said, said
    assert "close its watch before a checkpoint" in said, said
    assert alice.workload("ino")["state"] == "running"
    alice.wait_step("ino", step + 5)
    # Her kill of a program with no SIGTERM handler (the init of her PID namespace, which
    # the kernel shields from it) is a SIGKILL at once, not after the kill's 30 s grace.
    code, out, err = alice("kill", "local:ino", "--yes", "--json")
    assert code == 0, _said(out, err)
    log = (alice.home / "logs" / "ino.log").read_text()
    assert "payload.sigkill_for_lost_sigterm" in log and "sigkill_after_grace" not in log, log
