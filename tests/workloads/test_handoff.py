"""A migration hands the workload to a wrapper already waiting on the target.

Through the installed CLI and real CRIU, on the self-verifying counter: the migrate plan
starts a standby wrapper first; the source hands the workload over once its checkpoint is
published; the step output reports the restore mode and the pause; the workload then runs
exactly once, on the target, from that checkpoint, and keeps passing its own check (also
after a later checkpoint). Post-copy (CRIU lazy pages) is exercised where CRIU supports it.
Also: what falls back to the plain path (no standby, a standby the source may not use),
and that a standby that gets no order leaves by itself.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from core.checkpoint import lazy_pages
from core.config import load_settings
from core.specs import RunSpec
from core.store import staging
from core.wrapper import handoff
from core.wrapper.control import ControlClient
from core.wrapper.launch import launch_standby
from tests.reliability.test_fault_matrix import payload_pids
from tests.workloads.conftest import Cli

pytestmark = pytest.mark.criu
ROOT = Path(__file__).resolve().parents[2]


def start_counter(cli: Cli, name: str, mb: int = 16) -> None:
    cli("run", "--name", name, "--node", "node-a", "--detach", "--", sys.executable, "-m",
        "core.workloads.counter", "--state-mb", str(mb), "--step-seconds", "0.02",
        "--print-every", "5")  # fmt: skip
    wait_counter(cli, name, 5)


def counter_step(cli: Cli, name: str) -> int:
    path = load_settings(cli.home).run_dir / f"{name}.progress.json"
    try:
        return int(json.loads(path.read_text())["step"])
    except (OSError, ValueError, KeyError):
        return -1


def wait_counter(cli: Cli, name: str, above: int, timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    while (step := counter_step(cli, name)) <= above:
        assert "STATE CHECK FAILED" not in cli.log(name), cli.log(name)[-2000:]
        assert time.monotonic() < deadline, f"{name} stuck at {step}:\n{cli.log(name)[-2000:]}"
        time.sleep(0.05)
    return step


def counter_processes(cli: Cli, name: str) -> list[int]:
    return payload_pids(load_settings(cli.home), name)


def migrate(cli: Cli, name: str, to: str) -> dict[str, Any]:
    done = json.loads(cli("migrate", f"local:{name}", "--to", to, "--yes", "--json").stdout)
    assert done["status"] == "executed", done
    return done


def step_output(done: dict[str, Any], step: str) -> dict[str, Any]:
    return next(s["output"] for s in done["execution"]["steps"] if s["name"] == step)


def assert_moved(cli: Cli, name: str, done: dict[str, Any], to: str, mode: str) -> None:
    names = [s["name"] for s in done["plan"]["steps"]]
    assert names == ["standby", "checkpoint", "start"], names
    assert step_output(done, "checkpoint")["handoff"] == "sent"
    start = step_output(done, "start")
    report = start["handoff"]
    assert report["mode"] == mode, report
    assert report["criu_frozen_s"] > 0 and report["takeover_s"] > 0, report
    assert start["verified"]["alive"] is True
    new_ckpt = step_output(done, "checkpoint")["checkpoint_id"]
    assert start["restored_from"] == new_ckpt  # the checkpoint named is the one restored
    w = cli.workload(name)
    assert (w["state"], w["node"], w["last_checkpoint"]) == ("running", to, f"local:{new_ckpt}")
    assert len(counter_processes(cli, name)) == 1, counter_processes(cli, name)
    wait_counter(cli, name, counter_step(cli, name) + 10)  # it goes on, checking itself


def test_migrate_hands_over_to_the_standby_and_keeps_one_copy(cli: Cli) -> None:
    start_counter(cli, "ho")
    done = migrate(cli, "ho", "node-b")
    assert_moved(cli, "ho", done, "node-b", "stop-and-copy")
    assert "no pre-copy" in done["plan"]["steps"][1]["description"]  # says why, mode chosen
    log = cli.log("ho")
    assert "wrapper.handoff_sent" in log and "wrapper.handed_off" in log
    # The source wrapper left the target's control socket alone: it answers.
    cli("checkpoint", "local:ho", "--json")
    done = migrate(cli, "ho", "node-a")  # and back, from the checkpoint just taken on node-b
    assert_moved(cli, "ho", done, "node-a", "stop-and-copy")
    assert "STATE CHECK FAILED" not in cli.log("ho")


@pytest.mark.skipif(not lazy_pages.supported(), reason="CRIU cannot restore lazily here")
def test_post_copy_migration_faults_memory_in_and_checkpoints_after(cli: Cli) -> None:
    cli.config('[migration]\nmode = "post-copy"\n')
    start_counter(cli, "pc", mb=32)
    done = migrate(cli, "pc", "node-b")
    assert_moved(cli, "pc", done, "node-b", "post-copy")
    assert step_output(done, "start")["handoff"]["criu_restore_s"] is not None
    settings = load_settings(cli.home)
    lazy_log = settings.run_dir / "pc.restore" / "criu-lazy-pages.log"
    assert lazy_log.exists()  # the daemon ran
    # A checkpoint after a post-copy restore waits for the last page, then dumps a whole tree.
    ckpt = json.loads(cli("checkpoint", "local:pc", "--json").stdout)
    assert ckpt["status"] == "executed", ckpt
    assert "criu.lazy_pages_done" in cli.log("pc")
    done = migrate(cli, "pc", "node-a")
    assert_moved(cli, "pc", done, "node-a", "post-copy")
    assert "STATE CHECK FAILED" not in cli.log("pc")


def test_without_handoff_the_plan_is_the_plain_stop_and_start(cli: Cli) -> None:
    cli.config("[migration]\nhandoff = false\n")
    start_counter(cli, "plain")
    done = migrate(cli, "plain", "node-b")
    assert [s["name"] for s in done["plan"]["steps"]] == ["checkpoint", "start"]
    assert "handoff" not in step_output(done, "start")
    assert cli.workload("plain")["node"] == "node-b"
    assert len(counter_processes(cli, "plain")) == 1


def test_a_standby_the_source_may_not_use_changes_nothing(cli: Cli) -> None:
    """A caller cannot point a stop-checkpoint's handoff at any socket it likes: the source
    sends only to a standby of its own workload; otherwise it stops as usual, restorable."""
    start_counter(cli, "guard")
    settings = load_settings(cli.home)
    client = ControlClient(settings.run_dir / "guard.sock")
    info, said, _ = client.stop_and_hand_over(standby="/tmp/elsewhere.sock", mode="post-copy")
    assert said.startswith("not sent") and "no standby of guard" in said
    w = cli.wait_state("guard", "stopped")
    assert w["last_checkpoint"] == info.id or w["last_checkpoint"] == f"local:{info.id}"
    assert counter_processes(cli, "guard") == []
    cli("resume", "local:guard", "--yes")
    wait_counter(cli, "guard", counter_step(cli, "guard") + 5)


def test_a_standby_without_an_order_leaves_by_itself(cli: Cli) -> None:
    settings = load_settings(cli.home)
    os.environ["CLAWPOINT_HOME"] = str(cli.home)  # the spawned wrapper's home
    spec = RunSpec(name="idle", node="node-b", command=[sys.executable, "-c", "pass"],
                   start_mode="restore", standby=handoff.new_token(), standby_timeout_s=1.0,
                   home=str(cli.home))  # fmt: skip
    pid, path = launch_standby(settings, spec)
    assert path.exists()
    deadline = time.monotonic() + 20
    while Path(f"/proc/{pid}").exists() and b"Z" not in _state(pid):
        assert time.monotonic() < deadline, "the standby did not leave"
        time.sleep(0.05)
    assert not path.exists()  # it removed its socket
    assert "wrapper.standby_expired" in cli.log("idle")
    rows = json.loads(cli("workloads", "--json").stdout)
    assert [r for r in rows if r["name"] == "idle"] == []  # it never registered anything


def _state(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return b"Z"


def test_standby_order_protocol(tmp_path: Path) -> None:
    path = tmp_path / "w.standby-abcd.sock"
    with pytest.raises(Exception, match="no standby wrapper listens"):
        handoff.send(path, handoff.HandoffOrder(checkpoint="w@1"))
    standby = handoff.Standby(path)
    try:
        assert standby.wait(0.05) is None  # nothing came
        handoff.send(path, handoff.HandoffOrder(checkpoint="w@3", mode="post-copy"))
        order = standby.wait(1.0)
        assert order is not None and (order.checkpoint, order.mode) == ("w@3", "post-copy")
    finally:
        standby.close()
    assert not path.exists()


def test_source_killed_after_the_handoff_leaves_one_running_copy(cli: Cli) -> None:
    """The source wrapper dies between the handoff and publishing its checkpoint: the
    standby runs the workload (from its links to the staged images), exactly once; the
    move is reported failed (the checkpoint it names was never published), not done; the
    workload keeps passing its own check and its next checkpoint works."""
    plain_env = dict(cli.env)
    cli.env["CLAWPOINT_TEST_DIE_AFTER_HANDOFF"] = "1"  # the source wrapper inherits it
    start_counter(cli, "die")
    cli.env = plain_env
    before = [c["id"] for c in json.loads(cli("checkpoints", "local:die", "--json").stdout)]
    proc = cli("migrate", "local:die", "--to", "node-b", "--yes", "--json", ok=False)
    assert proc.returncode != 0, proc.stdout
    w = cli.wait_state("die", "running")
    assert w["node"] == "node-b"
    assert len(counter_processes(cli, "die")) == 1
    wait_counter(cli, "die", counter_step(cli, "die") + 10)
    after = [c["id"] for c in json.loads(cli("checkpoints", "local:die", "--json").stdout)]
    assert after == before  # nothing half-written was published, nothing older deleted
    cli("checkpoint", "local:die", "--json")
    assert "STATE CHECK FAILED" not in cli.log("die")
    # The dead source's staged images stay in the tmpfs until a later wrapper sweeps them
    # (after 10 minutes); the target's own links are gone.
    left = sorted(staging.base("/dev/shm").glob("die@*")) if staging.base("/dev/shm") else []
    assert all(".links-" not in p.name for p in left), left
    for p in left:
        shutil.rmtree(p)


def test_target_dying_in_the_takeover_falls_back_to_a_plain_start(cli: Cli) -> None:
    """The standby dies holding the workload's lock, before it restores (the target dying
    mid-restore): the source publishes its checkpoint anyway, the start step finds no
    wrapper and starts one that restores that checkpoint; the move succeeds, one copy."""
    start_counter(cli, "tgt")
    plain_env = dict(cli.env)
    cli.env["CLAWPOINT_TEST_DIE_IN_TAKEOVER"] = "1"  # the standby inherits it from migrate
    try:
        done = migrate(cli, "tgt", "node-b")
    finally:
        cli.env = plain_env
    ckpt = step_output(done, "checkpoint")["checkpoint_id"]
    start = step_output(done, "start")
    assert "handoff" not in start and start["restored_from"] == ckpt  # the plain path did it
    w = cli.workload("tgt")
    assert (w["state"], w["node"]) == ("running", "node-b")
    assert len(counter_processes(cli, "tgt")) == 1
    wait_counter(cli, "tgt", counter_step(cli, "tgt") + 10)
    assert "STATE CHECK FAILED" not in cli.log("tgt")
    # The dead standby's links stay until a later wrapper sweeps them (after 10 minutes);
    # the source removed its own staged copy when it published.
    base = staging.base("/dev/shm")
    left = sorted(base.glob("tgt@*")) if base is not None else []
    assert all(".links-" in p.name for p in left), left
    for p in left:
        shutil.rmtree(p)


def test_a_trap_under_the_staging_areas_name_falls_back_to_the_store(
    cli: Cli, tmp_path: Path
) -> None:
    """Someone's symlink under our staging area's name in the shared staging directory
    (issue 20): the handoff refuses it, says so, stages in the store instead and still moves
    the workload; nothing is written where the symlink points."""
    shared = tmp_path / "shm"
    shared.mkdir()
    shared.chmod(0o1777)  # as /dev/shm
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "canary").write_text("keep")
    (shared / f"{staging.PREFIX}{os.geteuid()}").symlink_to(victim)
    cli.config(f'[migration]\nstaging_dir = "{shared}"\n')
    start_counter(cli, "trap")
    done = migrate(cli, "trap", "node-b")
    assert_moved(cli, "trap", done, "node-b", "stop-and-copy")
    log = cli.log("trap")
    assert "staging.refused" in log and "a symlink" in log, log[-3000:]
    assert "staged_in_memory=0.0" in log
    assert sorted(p.name for p in victim.iterdir()) == ["canary"]
    assert "STATE CHECK FAILED" not in log


JOURNAL = """
import json, os, sys, time
path = os.path.join(sys.argv[1], "journal.log")
f = open(path, "a+")  # a regular file held open for writing: the checkpoint carries it
progress = os.environ["CLAWPOINT_PROGRESS_FILE"]
n = 0
while True:
    n += 1
    f.seek(0)
    if f.read() != "".join(f"{i}\\n" for i in range(1, n)):
        print("STATE CHECK FAILED: journal", flush=True)
        sys.exit(3)
    f.write(f"{n}\\n")
    f.flush()
    tmp = progress + ".tmp"
    with open(tmp, "w") as p:
        p.write(json.dumps({"step": n, "ts": time.time()}))
    os.replace(tmp, progress)
    time.sleep(0.05)
"""


def test_a_workload_with_a_file_open_is_handed_over_staged_and_its_copy_serves_a_failover(
    cli: Cli, tmp_path: Path
) -> None:
    """A checkpoint that carries the workload's files is staged like any other (the standby
    puts nothing back: the file is as the frozen tree left it); the copy published after
    the pause is what a later failover from that checkpoint puts back."""
    work = tmp_path / "journal"
    work.mkdir()
    cli("run", "--name", "fh", "--node", "node-a", "--detach", "--", sys.executable, "-c",
        JOURNAL, str(work))  # fmt: skip
    wait_counter(cli, "fh", 10)
    done = migrate(cli, "fh", "node-b")
    assert step_output(done, "checkpoint")["handoff"] == "sent"
    report = step_output(done, "start")["handoff"]
    assert report["staged"] is True  # restored before publishing, then verified
    ckpt = step_output(done, "checkpoint")["checkpoint_id"]
    saved = json.loads(cli("checkpoints", "local:fh", "--json").stdout)
    (mine,) = [c for c in saved if c["id"].endswith(ckpt)]
    assert mine["status"] == "good"
    assert [f["path"] for f in mine["extra"]["file_state"]["saved"]] == [str(work / "journal.log")]
    w = cli.workload("fh")
    assert (w["state"], w["node"]) == ("running", "node-b")
    wait_counter(cli, "fh", counter_step(cli, "fh") + 10)  # its journal check keeps passing
    # A failover from that checkpoint: the journal goes back to its copy, memory agrees.
    cli.kill_payload("fh")
    cli("failover", "local:fh", "--yes", "--json")
    wait_counter(cli, "fh", counter_step(cli, "fh") + 10)
    assert "STATE CHECK FAILED" not in cli.log("fh")
