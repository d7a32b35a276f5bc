"""A dump that hangs holds nobody for long, and a person can always stop the workload.

CRIU stands in for a ``criu`` that hangs in ``dump`` (it stops itself, as a SIGSTOP'd criu
would, and the tree it was freezing for a stop-dump stays stopped): ``criu-hangs`` below,
the real ``criu`` for everything else, armed by a flag file. Everything else is the
installed ``clawpoint``, run as a person. Before the fix:

- a dump could hang for an hour (a fixed 3,600 s timeout);
- a migrate sent while another checkpoint of the workload hung waited with no useful limit;
- the person's ``kill --yes`` was refused by the blast-radius limit, which counted the stuck
  migrate (of the same workload, or of another one in the pool), and the journal's lease
  of the stuck migrate refused it too.

Now the dump timeout scales with the workload's memory (``[checkpoint] dump_timeout_*``),
a request waits ``queue_wait_s`` behind a checkpoint under way and is then refused
(Conflict, exit 10, nothing done), and a person's kill passes the concurrency and
blast-radius limits (audited as ``passed_limit``) and the lease, and gives the hung dump up.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.conftest import PERSON, Lab
from tests.service.conftest import counter, wait_step

pytestmark = [pytest.mark.criu]

CLAWPOINT = Path(sys.executable).parent / "clawpoint"
FAKE = """#!/bin/sh
# criu, except that an armed dump hangs: a stop-dump's tree stays stopped, criu stops itself.
if [ "$1" = "dump" ] && [ -e "{flag}" ]; then
  case " $* " in *" --leave-stopped "*) kill -STOP "$3" ;; esac
  touch "{hung}"
  kill -STOP $$
fi
exec "{criu}" "$@"
"""


class HungCriu:
    def __init__(self, where: Path) -> None:
        criu = shutil.which("criu")
        assert criu is not None
        self.path, self.flag, self.hung = where / "criu-hangs", where / "arm", where / "hung"
        self.path.write_text(FAKE.format(flag=self.flag, hung=self.hung, criu=criu))
        self.path.chmod(0o755)

    def arm(self) -> None:
        self.hung.unlink(missing_ok=True)
        self.flag.touch()

    def wait_hung(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.hung.exists():
            assert time.monotonic() < deadline, "the dump never started"
            time.sleep(0.1)


@pytest.fixture
def hung(tmp_path: Path) -> Iterator[HungCriu]:
    yield HungCriu(tmp_path)


def _config(fake: HungCriu, extra: str = "") -> str:
    return f'[checkpoint]\ncriu_path = "{fake.path}"\nqueue_wait_s = 3\n{extra}'


def _cli(lab: Lab, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert CLAWPOINT.exists(), f"{CLAWPOINT} is not installed: run 'make venv'"
    return subprocess.run(
        [str(CLAWPOINT), *args], env=lab.env(), capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def _background(lab: Lab, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(CLAWPOINT), *args], env=lab.env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _workload(lab: Lab, ref: str) -> dict[str, Any]:
    found = _cli(lab, "workloads", "--json")
    assert found.returncode == 0, found.stderr
    return next(w for w in json.loads(found.stdout) if w["id"] == ref)


def test_a_persons_kill_stops_a_workload_whose_migrate_hangs(
    lab_factory: Callable[[str], Lab], hung: HungCriu, need_criu: None
) -> None:
    lab = lab_factory(_config(hung))
    stuck, other = lab.start("stuck"), lab.start("other")
    hung.arm()
    migrate = _background(lab, "migrate", stuck, "--to", "node-b", "--yes", "--json")
    try:
        hung.wait_hung()
        # Another workload of the pool: the stuck migrate holds the blast radius.
        t0 = time.monotonic()
        killed = _cli(lab, "kill", other, "--yes", "--json")
        assert killed.returncode == 0, killed.stdout + killed.stderr
        assert json.loads(killed.stdout)["status"] == "executed"
        [decision] = [
            e.data for e in lab.service.audit.entries(subject=other)
            if e.kind == "decision" and e.data["action"] == "kill"
        ]  # fmt: skip
        assert decision["passed_limit"] == "limit:blast-radius", decision
        assert "A person's kill is not held back by limit:blast-radius" in decision["reason"]

        # The workload whose migrate hangs: its own migrate counts against nothing, holds
        # no lease against a person's kill, and its hung dump is given up.
        killed = _cli(lab, "kill", stuck, "--yes", "--json")
        assert killed.returncode == 0, killed.stdout + killed.stderr
        assert json.loads(killed.stdout)["status"] == "executed"
        out, err = migrate.communicate(timeout=60)
        assert migrate.returncode != 0, out
        assert "given up" in out + err, out + err
        assert time.monotonic() - t0 < 90
    finally:
        if migrate.poll() is None:
            migrate.kill()
            migrate.communicate()
    for ref in (stuck, other):
        w = _workload(lab, ref)
        assert w["state"] == "failed" and w["exit_status"] == "killed", w
        assert w["node"] == "node-a", w


def test_a_request_behind_a_hung_dump_is_refused_in_time_and_the_dump_ends(
    lab_factory: Callable[[str], Lab], hung: HungCriu, need_criu: None
) -> None:
    lab = lab_factory(_config(hung, "dump_timeout_s = 15\n"))
    # Its own periodic checkpoints (no execution of clawpoint's): one of them hangs.
    spec = counter(lab.settings, "behind", mb=8, every=2.0)
    lab.service.run_workload(spec, detach=True, principal=PERSON)
    wait_step(lab.settings, "behind", 2)
    ref = "local:behind"
    hung.arm()
    hung.wait_hung()
    t0 = time.monotonic()
    moved = _cli(lab, "migrate", ref, "--to", "node-b", "--yes", "--json", timeout=90)
    assert moved.returncode == 10, moved.stdout + moved.stderr
    assert "is busy" in moved.stdout + moved.stderr, moved.stdout + moved.stderr
    assert time.monotonic() - t0 < 30
    hung.flag.unlink()
    # The hung dump ends at its timeout; the workload goes on where it was, and takes
    # checkpoints again (the refused migrate, withdrawn, never runs later).
    deadline = time.monotonic() + 60
    while True:
        again = _cli(lab, "checkpoint", ref, "--json")
        if again.returncode == 0:
            break
        assert "is busy" in again.stdout + again.stderr, again.stdout + again.stderr
        assert time.monotonic() < deadline, "the hung dump never ended"
    assert time.monotonic() - t0 >= 13  # not before the dump timeout (15 s from its start)
    # It goes on where it was (its periodic checkpoints, every 2 s, show it "checkpointing"
    # now and then: read it until it is seen running).
    deadline = time.monotonic() + 20
    while True:
        w = _workload(lab, ref)
        assert w["node"] == "node-a" and w["state"] in ("running", "checkpointing"), w
        if w["state"] == "running":
            break
        assert time.monotonic() < deadline, w
        time.sleep(0.2)
