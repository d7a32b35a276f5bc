"""The files a workload writes and the memory it shares, through the installed CLI and CRIU.

- A program that rewrites its own state file (opened without O_APPEND) and checks on every
  step that the file matches its in-memory counter survives failover (SIGKILL, then
  ``clawpoint failover``) and a restore from an older checkpoint: the file is put back as it
  was at the checkpoint, so CRIU accepts it and the program's check holds.
- Two processes sharing a 32 MiB ``multiprocessing.shared_memory`` segment (a /dev/shm file)
  check that it matches the counter in their memory: after failover the segment is the
  checkpoint's, not the newer one the killed processes left.
- A workload holding a device CRIU cannot carry: a dry-run (and a real run) of migrate is
  refused at plan time, naming the device, and the workload is never paused.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.checkpoint import test_sockets_criu as sockets
from tests.checkpoint.test_sockets_criu import Cli

pytestmark = pytest.mark.criu
cli = sockets.cli  # the fixture: clawpoint in a private CLAWPOINT_HOME, cleaned up after

STATE_PROGRAM = textwrap.dedent(
    """
    import os, sys, time
    path = sys.argv[1]
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o640)  # no O_APPEND
    n = 0
    while True:
        expected = "".join(f"{i}\\n" for i in range(n)).encode()
        got = os.pread(fd, len(expected) + 4096, 0)
        if got != expected:
            print(f"CHECK FAILED at {n}: file has {len(got)} bytes, memory says "
                  f"{len(expected)}", flush=True)
            os._exit(3)
        os.pwrite(fd, f"{n}\\n".encode(), len(expected))
        n += 1
        time.sleep(0.02)
    """
)

SHM_PROGRAM = textwrap.dedent(
    """
    import os, struct, sys, time
    from multiprocessing import shared_memory
    SIZE = 32 * 2**20
    shm = shared_memory.SharedMemory(create=True, size=SIZE)
    buf = shm.buf
    buf[:8] = struct.pack("q", 0)
    buf[SIZE - 8:] = struct.pack("q", 0)
    def fail(who, n, a, b):
        print(f"CHECK FAILED in {who} at {n}: segment says {a}/{b}", flush=True)
        os._exit(3)
    if os.fork() == 0:  # the reader: the segment never goes backwards, both ends agree
        last = 0
        while True:
            a = struct.unpack("q", bytes(buf[:8]))[0]
            b = struct.unpack("q", bytes(buf[SIZE - 8:]))[0]
            if a < last or b < a - 1:
                fail("reader", last, a, b)
            last = a
            time.sleep(0.01)
    n = 0
    with open(sys.argv[1], "w") as status:
        pass
    while True:  # the writer: the segment holds exactly its own counter
        a = struct.unpack("q", bytes(buf[:8]))[0]
        b = struct.unpack("q", bytes(buf[SIZE - 8:]))[0]
        if a != n or b != n:
            fail("writer", n, a, b)
        n += 1
        buf[SIZE - 8:] = struct.pack("q", n)
        buf[:8] = struct.pack("q", n)
        if n % 10 == 0:
            print(f"step {n}", flush=True)
        time.sleep(0.02)
    """
)


def lines(path: Path) -> int:
    """How many counter lines the state file holds; asserts they are 0..n-1 in order."""
    text = path.read_text()
    rows = text.splitlines()
    assert text == "".join(f"{i}\n" for i in range(len(rows))), f"torn state file: {text[-40:]}"
    return len(rows)


def wait_for(cond: object, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(cond) and cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def grows_and_holds(cli: Cli, name: str, path: Path, pid: int) -> None:
    """The restored program keeps counting with its check intact (it exits 3 otherwise)."""
    start = lines(path)
    wait_for(lambda: lines(path) >= start + 30, f"{path} to grow")
    w = cli.workload(name)
    assert w["state"] == "running" and w["pid"] == pid, w
    assert "CHECK FAILED" not in cli.logs()


def test_state_file_survives_failover_and_an_older_checkpoint(cli: Cli, tmp_path: Path) -> None:
    program = tmp_path / "state.py"
    program.write_text(STATE_PROGRAM)
    state = tmp_path / "work" / "state.txt"
    state.parent.mkdir()
    cli("run", "--name", "st", "--node", "node-a", "--detach", "--",
        sys.executable, str(program), str(state))  # fmt: skip
    wait_for(lambda: state.exists() and lines(state) > 20, "the first steps")
    pid = cli.workload("st")["pid"]

    cli("checkpoint", "local:st", "--yes")
    at_first = lines(state)
    wait_for(lambda: lines(state) > at_first + 50, "progress after the checkpoint")
    assert cli.workload("st")["pid"] == pid  # leave-running: it went on
    assert "CHECK FAILED" not in cli.logs()

    # Failover: the file is now longer than at the checkpoint; CRIU alone refuses that.
    os.kill(pid, signal.SIGKILL)
    cli.wait_state("st", "failed")
    cli("failover", "local:st", "--yes")
    back = cli.workload("st")
    assert back["state"] == "running" and back["pid"] != pid
    grows_and_holds(cli, "st", state, back["pid"])

    # An older checkpoint: preempt (a newer checkpoint), then restore the first one.
    cli("preempt", "local:st", "--yes")
    listed = json.loads(cli("checkpoints", "local:st", "--json").stdout)
    assert len(listed) >= 2
    older = min(listed, key=lambda c: c["seq"])["id"]
    cli("restore", older, "--yes")
    again = cli.workload("st")
    assert again["state"] == "running"
    grows_and_holds(cli, "st", state, again["pid"])
    manifest = next(
        c for c in json.loads(cli("checkpoints", "local:st", "--json").stdout) if c["id"] == older
    )
    saved = manifest["extra"]["file_state"]["saved"]
    assert [s["path"] for s in saved] == [str(state)]


@pytest.fixture
def shm_segments() -> Iterator[None]:
    """Remove the /dev/shm segments the test's program made: it is killed, never unlinks
    them, and 32 MiB of RAM each would pile up in the tmpfs run after run."""
    before = set(Path("/dev/shm").glob("psm_*"))
    yield
    for path in set(Path("/dev/shm").glob("psm_*")) - before:
        path.unlink(missing_ok=True)


@pytest.mark.usefixtures("shm_segments")
def test_shared_memory_segment_is_saved_with_the_checkpoint(cli: Cli, tmp_path: Path) -> None:
    program = tmp_path / "shm.py"
    program.write_text(SHM_PROGRAM)
    started = tmp_path / "started"
    cli("run", "--name", "shm", "--node", "node-a", "--detach", "--",
        sys.executable, str(program), str(started))  # fmt: skip
    wait_for(lambda: "step 20" in cli.logs(), "the first steps")
    pid = cli.workload("shm")["pid"]

    cli("checkpoint", "local:shm", "--yes")
    wait_for(lambda: "step 100" in cli.logs(), "progress after the checkpoint")
    os.kill(pid, signal.SIGKILL)
    cli.wait_state("shm", "failed")
    cli("failover", "local:shm", "--yes")
    back = cli.workload("shm")
    assert back["state"] == "running" and back["pid"] != pid
    seen = cli.logs().count("step ")
    wait_for(lambda: cli.logs().count("step ") >= seen + 5, "progress after failover")
    w = cli.workload("shm")
    assert w["state"] == "running" and w["pid"] == back["pid"], w
    assert "CHECK FAILED" not in cli.logs()
    saved = json.loads(cli("checkpoints", "local:shm", "--json").stdout)[0]["extra"]["file_state"]
    shm = [s for s in saved["saved"] if s["path"].startswith("/dev/shm/")]
    assert shm and shm[0]["size"] == 32 * 2**20 and shm[0]["shared_map"]

    # Beyond the budget, shared memory is refused at plan time, before anything is paused.
    cli.config("[checkpoint]\nfile_budget_mib = 16\n")
    for action in (["checkpoint", "local:shm", "--dry-run"], ["migrate", "local:shm"]):
        proc = cli(*action, "--yes", "--json", ok=False)
        assert proc.returncode == 8, proc.stdout + proc.stderr
        err = json.loads(proc.stdout)
        assert shm[0]["path"] in err["message"] and "file_budget_mib" in err["message"], err
    assert cli.workload("shm")["pid"] == back["pid"]
    assert len(json.loads(cli("checkpoints", "local:shm", "--json").stdout)) == 1


DEVICE = next((d for d in ("/dev/fuse", "/dev/loop-control", "/dev/kvm") if Path(d).exists()), "")


@pytest.mark.skipif(not DEVICE, reason="no device CRIU cannot carry exists here")
def test_migrate_dry_run_refuses_an_unsupported_device_and_pauses_nothing(
    cli: Cli, tmp_path: Path
) -> None:
    program = tmp_path / "dev.py"
    program.write_text(
        "import sys, time\n"
        f"dev = open({DEVICE!r}, 'rb', buffering=0)\n"
        "n = 0\n"
        "while True:\n"
        "    n += 1\n"
        "    print(f'tick {n}', flush=True)\n"
        "    time.sleep(0.05)\n"
    )
    cli("run", "--name", "dev", "--node", "node-a", "--detach", "--",
        sys.executable, str(program))  # fmt: skip
    wait_for(lambda: "tick 5" in cli.logs(), "the first ticks")
    pid = cli.workload("dev")["pid"]
    switches = Path(f"/proc/{pid}/status").read_text()

    for extra in (["--dry-run"], []):
        proc = cli("migrate", "local:dev", "--to", "node-b", "--yes", "--json", *extra, ok=False)
        assert proc.returncode == 8, proc.stdout + proc.stderr
        err = json.loads(proc.stdout)
        assert DEVICE in err["message"] and "cannot carry" in err["message"], err
        assert "nothing was paused" in err["message"] or "nothing was paused" in json.dumps(err)
    # Never paused: the same process, still running, no checkpoint was taken.
    assert cli.workload("dev")["pid"] == pid and cli.workload("dev")["state"] == "running"
    assert json.loads(cli("checkpoints", "local:dev", "--json").stdout) == []
    assert "State:\tS" in switches or "State:\tR" in switches
    assert not any(line.startswith("State:\tT") for line in Path(f"/proc/{pid}/status").open())


def test_beyond_the_budget_the_checkpoint_is_kept_and_the_restore_says_why(
    cli: Cli, tmp_path: Path
) -> None:
    cli.config("[checkpoint]\nfile_budget_mib = 0\n")
    program = tmp_path / "state.py"
    program.write_text(STATE_PROGRAM)
    state = tmp_path / "state.txt"
    cli("run", "--name", "big", "--node", "node-a", "--detach", "--",
        sys.executable, str(program), str(state))  # fmt: skip
    wait_for(lambda: state.exists() and lines(state) > 20, "the first steps")
    pid = cli.workload("big")["pid"]

    cli("checkpoint", "local:big", "--yes")  # still taken; the workload goes on
    at = lines(state)
    wait_for(lambda: lines(state) > at + 30, "progress after the checkpoint")
    assert cli.workload("big")["pid"] == pid
    listed = json.loads(cli("checkpoints", "local:big", "--json").stdout)
    record = listed[0]["extra"]["file_state"]
    assert record["saved"] == [] and [f["path"] for f in record["not_covered"]] == [str(state)]

    os.kill(pid, signal.SIGKILL)
    cli.wait_state("big", "failed")
    proc = cli("failover", "local:big", "--yes", "--json", ok=False)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert str(state) in out and "file budget" in out, out
    assert cli.workload("big")["state"] != "running"
    assert json.loads(cli("checkpoints", "local:big", "--json").stdout)[0]["id"] == listed[0]["id"]


ACCESS_LOG_PROGRAM = textwrap.dedent(
    """
    import os, sys, time
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)  # a server's log
    n = 0
    while True:
        os.write(fd, f"request {n}\\n".encode())
        n += 1
        time.sleep(0.02)
    """
)


def _served(path: Path) -> list[int]:
    return [int(line.split()[1]) for line in path.read_text().splitlines()]


def _files_step_output(out: str) -> list[dict[str, object]]:
    steps = json.loads(out)["execution"]["steps"]
    return [f for s in steps for f in (s.get("output") or {}).get("files", [])]


def test_an_append_only_log_is_never_rewound_silently(cli: Cli, tmp_path: Path) -> None:
    program = tmp_path / "server.py"
    program.write_text(ACCESS_LOG_PROGRAM)
    log = tmp_path / "work" / "access.log"
    log.parent.mkdir()

    def serve_then_crash(name: str) -> tuple[int, list[int], str, str]:
        cli("run", "--name", name, "--node", "node-a", "--detach", "--",
            sys.executable, str(program), str(log))  # fmt: skip
        wait_for(lambda: log.exists() and len(_served(log)) > 10, "the first requests")
        cli("checkpoint", f"local:{name}", "--yes")
        at_checkpoint = log.stat().st_size
        wait_for(lambda: log.stat().st_size > at_checkpoint + 200, "requests after it")
        pid = cli.workload(name)["pid"]
        os.kill(pid, signal.SIGKILL)
        cli.wait_state(name, "failed")
        before_failover = _served(log)
        plan = cli("failover", f"local:{name}", "--dry-run", "--json").stdout
        out = cli("failover", f"local:{name}", "--yes", "--json").stdout
        return at_checkpoint, before_failover, plan, out

    # Default (rewind): the log goes back to the checkpoint, with its tail kept beside it,
    # and the plan and the result say so.
    at_checkpoint, served, plan, out = serve_then_crash("web")
    [changed] = _files_step_output(out)
    assert changed["action"] == "rewound" and changed["path"] == str(log)
    kept = Path(str(changed["kept_at"]))
    assert kept.name.startswith("access.log.after-web@") and changed["bytes_after"] > 0
    assert "puts back" in plan and str(log) in plan  # the dry run listed it
    # What the killed server wrote = the log as put back + the tail kept beside it.
    tail = _served(kept)
    head = len(served) - len(tail)
    assert tail and served[head:] == tail and head * 10 < at_checkpoint
    assert _served(log)[:head] == served[:head]
    cli("kill", "local:web", "--yes")

    # file_policy keep: the log is left as the killed server left it, and keeps growing.
    log.unlink()
    kept.unlink()
    cli.config(f'[checkpoint]\nfile_policy = {{ "{log.parent}/*.log" = "keep" }}\n')
    at_checkpoint, served, plan, out = serve_then_crash("web2")
    [changed] = _files_step_output(out)
    assert changed["action"] == "keep" and changed["bytes_after"] > 0
    assert "keeps" in plan
    wait_for(lambda: len(_served(log)) > len(served) + 10, "requests after the failover")
    assert _served(log)[: len(served)] == served  # nothing the server wrote was lost
    assert not list(log.parent.glob("access.log.after-*"))


def _lacks_sys_resource() -> bool:
    status = Path("/proc/self/status").read_text()
    eff = next(int(ln.split()[1], 16) for ln in status.splitlines() if ln.startswith("CapEff:"))
    return not eff >> 24 & 1


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _status(pid: int, key: str) -> str:
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                if ln.startswith(f"{key}:"))  # fmt: skip
    return line.split(":", 1)[1].strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="the root mode: a payload started as root")
def test_a_command_that_drops_to_another_uid_runs_under_our_init(cli: Cli) -> None:
    # A server started by root that drops to an unprivileged user as the namespace's first
    # process (PostgreSQL through setpriv): CRIU cannot dump a tree whose first process has no
    # privileges and the host's /proc. Started through setpriv, the command runs under our
    # init (root); on a host whose root lacks CAP_SYS_RESOURCE (this one), which CRIU needs
    # to read another uid's limits, in a user namespace of its own as well.
    cli("run", "--name", "drop", "--node", "node-a", "--detach", "--", "/usr/bin/setpriv",
        "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/sleep", "600")  # fmt: skip
    pid = cli.wait_state("drop", "running")["pid"]
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "clawpoint-init"
    assert _status(pid, "Uid").split()[0] == "0"
    own_userns = os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
    assert own_userns == _lacks_sys_resource()
    wait_for(lambda: _children(pid), "the command under the init")
    (sleeper,) = _children(pid)
    wait_for(lambda: _status(sleeper, "Uid").split()[0] == "65534", "the drop to uid 65534")
    cli("checkpoint", "local:drop", "--yes")
    assert len(json.loads(cli("checkpoints", "local:drop", "--json").stdout)) == 1
    cli("migrate", "local:drop", "--to", "node-b", "--yes")
    pid = cli.wait_state("drop", "running")["pid"]
    (sleeper,) = _children(pid)
    assert _status(sleeper, "Uid").split()[0] == "65534"


@pytest.mark.skipif(
    os.geteuid() != 0 or not _lacks_sys_resource(), reason="root without CAP_SYS_RESOURCE"
)
def test_without_a_user_namespace_another_uid_is_refused_naming_both_ways(cli: Cli) -> None:
    # A host whose root lacks CAP_SYS_RESOURCE cannot read the limits of another uid's
    # process (prlimit) outside a user namespace it owns: refused for that alone, naming the
    # process and both ways out.
    cli("run", "--name", "drop", "--node", "node-a", "--detach", "--no-user-namespace", "--",
        "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/sleep",
        "600")  # fmt: skip
    pid = cli.wait_state("drop", "running")["pid"]
    wait_for(lambda: _children(pid), "the command under the init")
    (sleeper,) = _children(pid)
    wait_for(lambda: _status(sleeper, "Uid").split()[0] == "65534", "the drop to uid 65534")
    for extra in (["--dry-run"], []):
        proc = cli("checkpoint", "local:drop", "--yes", "--json", *extra, ok=False)
        assert proc.returncode == 8, proc.stdout + proc.stderr
        err = json.dumps(json.loads(proc.stdout))
        assert "uid 65534" in err and "sleep" in err and "CAP_SYS_RESOURCE" in err, err
        assert "--user-namespace" in err and "/proc" not in err, err
    assert cli.workload("drop")["pid"] == pid and cli.workload("drop")["state"] == "running"
    assert json.loads(cli("checkpoints", "local:drop", "--json").stdout) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the root mode: a payload started as root")
def test_without_our_init_a_first_process_that_dropped_is_refused_naming_init(cli: Cli) -> None:
    cli("run", "--name", "bare", "--node", "node-a", "--detach", "--no-init", "--",
        "/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/sleep",
        "600")  # fmt: skip
    pid = cli.wait_state("bare", "running")["pid"]
    assert Path(f"/proc/{pid}/comm").read_text().strip() != "clawpoint-init"
    wait_for(lambda: _status(pid, "Uid").split()[0] == "65534", "the drop to uid 65534")
    for extra in (["--dry-run"], []):
        proc = cli("checkpoint", "local:bare", "--yes", "--json", *extra, ok=False)
        assert proc.returncode == 8, proc.stdout + proc.stderr
        err = json.dumps(json.loads(proc.stdout))
        assert "uid 65534" in err and "no /proc of its own" in err and "--init" in err, err
    assert cli.workload("bare")["pid"] == pid and cli.workload("bare")["state"] == "running"


# Counts in its state file as the privileges it was started with allow: started through
# setpriv without CAP_SYS_ADMIN (it stays uid 0, which every host's CRIU can dump).
UNPRIVILEGED_COUNTER = ["/usr/bin/setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin",
                        "--", sys.executable, "-c", STATE_PROGRAM]  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0, reason="the root mode: a payload started as root")
def test_a_first_process_without_privileges_migrates_under_our_init(
    cli: Cli, tmp_path: Path
) -> None:
    # Before --init: refused at plan time (its first process had no CAP_SYS_ADMIN and the
    # host's /proc). Under the init it checkpoints, migrates and is stopped like any other.
    state = tmp_path / "state"
    cli("run", "--name", "capless", "--node", "node-a", "--detach", "--",
        *UNPRIVILEGED_COUNTER, str(state))  # fmt: skip
    pid = cli.wait_state("capless", "running")["pid"]
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "clawpoint-init"
    wait_for(lambda: state.exists() and lines(state) >= 10, "the counter")
    (program,) = _children(pid)
    assert not int(_status(program, "CapEff"), 16) >> 21 & 1  # no CAP_SYS_ADMIN
    cli("migrate", "local:capless", "--to", "node-b", "--yes")
    w = cli.wait_state("capless", "running")
    assert w["node"] == "node-b", w
    pid = w["pid"]
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "clawpoint-init"
    (program,) = _children(pid)
    assert not int(_status(program, "CapEff"), 16) >> 21 & 1
    grows_and_holds(cli, "capless", state, pid)
    cli("kill", "local:capless", "--yes")
    assert cli.workload("capless")["exit_status"] == "killed"
    assert not Path(f"/proc/{pid}").exists() and not Path(f"/proc/{program}").exists()
    # The init is part of how it runs: a fresh start (no checkpoint restored) keeps it.
    cli("failover", "local:capless", "--fresh", "--to", "node-a", "--yes")
    pid = cli.wait_state("capless", "running")["pid"]
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "clawpoint-init"


@pytest.mark.skipif(os.geteuid() != 0, reason="the root mode: a payload started as root")
def test_without_our_init_a_first_process_without_privileges_is_refused(
    cli: Cli, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    cli("run", "--name", "bare", "--node", "node-a", "--detach", "--no-init", "--",
        *UNPRIVILEGED_COUNTER, str(state))  # fmt: skip
    pid = cli.wait_state("bare", "running")["pid"]
    wait_for(lambda: state.exists() and lines(state) >= 5, "the counter")
    proc = cli("migrate", "local:bare", "--to", "node-b", "--yes", "--json", ok=False)
    assert proc.returncode == 8, proc.stdout + proc.stderr
    assert "--init" in proc.stdout, proc.stdout
    assert cli.workload("bare")["pid"] == pid and cli.workload("bare")["state"] == "running"


@pytest.mark.skipif(os.geteuid() != 0, reason="the root mode: a payload started as root")
def test_a_mount_namespace_without_its_own_proc_is_still_refused(cli: Cli) -> None:
    # The refusal asks whether the task sees a /proc of its own PID namespace, not whether it
    # shares the host's mount namespace: a mount namespace of its own still shows the host's
    # /proc (before: planned, then the dump failed in CRIU).
    cli("run", "--name", "mnt", "--node", "node-a", "--detach", "--", "/usr/bin/unshare",
        "--mount", "--propagation", "private", "--", "/usr/bin/setpriv", "--reuid=65534",
        "--regid=65534", "--clear-groups", "/usr/bin/sleep", "600")  # fmt: skip
    pid = cli.wait_state("mnt", "running")["pid"]
    proc = cli("checkpoint", "local:mnt", "--yes", "--json", "--dry-run", ok=False)
    assert proc.returncode == 8, proc.stdout + proc.stderr
    err = json.dumps(json.loads(proc.stdout))
    assert "uid 65534" in err and "no /proc of its own" in err, err
    assert cli.workload("mnt")["pid"] == pid and cli.workload("mnt")["state"] == "running"


# A child that keeps uid 0 (and CAP_SYS_ADMIN) but changes its group, as a server does before
# dropping to its user: CRIU reads its resource limits with prlimit(2), which needs
# CAP_SYS_RESOURCE once the task's gids are not root's.
GROUP_PROGRAM = textwrap.dedent(
    """
    import os, time
    if os.fork() == 0:
        os.setgroups([])
        os.setgid(65534)
    while True:
        time.sleep(0.05)
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="the root mode: a payload started as root")
def test_a_process_that_changed_its_group_is_refused_only_without_cap_sys_resource(
    cli: Cli,
) -> None:
    cli("run", "--name", "grp", "--node", "node-a", "--detach", "--", sys.executable, "-c",
        GROUP_PROGRAM)  # fmt: skip
    pid = cli.wait_state("grp", "running")["pid"]
    wait_for(lambda: len(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()) == 1,
             "the child")  # fmt: skip
    if not _lacks_sys_resource():
        cli("checkpoint", "local:grp", "--yes")  # CRIU reads its limits: nothing to refuse
        assert len(json.loads(cli("checkpoints", "local:grp", "--json").stdout)) == 1
        return
    # Before: planned, then CRIU failed at dump with "Can't get rlimit 0".
    for extra in (["--dry-run"], []):
        proc = cli("checkpoint", "local:grp", "--yes", "--json", *extra, ok=False)
        assert proc.returncode == 8, proc.stdout + proc.stderr
        err = json.dumps(json.loads(proc.stdout))
        assert "gid 65534" in err and "CAP_SYS_RESOURCE" in err, err
    assert cli.workload("grp")["pid"] == pid and cli.workload("grp")["state"] == "running"
    assert json.loads(cli("checkpoints", "local:grp", "--json").stdout) == []
