"""``clawpoint resize`` on the local backend: the installed console script on a real counter.

Two virtual nodes: ``small`` (1Gi) and ``big`` (2Gi, dearer). A self-verifying counter under
real CRIU starts on ``small`` with ``--memory 256Mi --cpus 1``: its processes are in a cgroup
of their own holding those limits. Giving it 512Mi happens in place (safe: no question, no
pause): the limit file shows the new value and the counter keeps counting in the same
process. 1536Mi does not fit ``small``: the move to ``big`` needs a person (exit 6, nothing
changed); confirmed, the counter goes on from its checkpoint on ``big`` (its own state check
never fails) with the new limit on its new cgroup, which a preempt and resume keep. 4Gi
fits nowhere: exit 10 naming each
node; a size without a unit: exit 2.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.cli.conftest import Cli
from tests.service.conftest import need_criu  # noqa: F401

pytestmark = [pytest.mark.criu]

CONFIG = """
[local]
nodes = [
  { name = "small", price_per_hour = 1.0, cpus = 2, memory = "1Gi" },
  { name = "big", price_per_hour = 2.0, cpus = 4, memory = "2Gi" },
]
"""
MIB = 2**20


def _progress(home: Path, name: str) -> dict[str, object]:
    try:
        return dict(json.loads((home / "run" / f"{name}.progress.json").read_text()))
    except (OSError, ValueError):
        return {}


def _wait_step(home: Path, name: str, above: int, timeout_s: float = 90) -> int:
    deadline = time.monotonic() + timeout_s
    while int(str(_progress(home, name).get("step", -1))) <= above:
        assert time.monotonic() < deadline, f"{name} made no progress past {above}"
        time.sleep(0.05)
    return int(str(_progress(home, name)["step"]))


def memory_limit(pid: int) -> int:
    """The memory limit of the cgroup ``pid`` is in, read from the kernel's files."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":  # cgroup v1
            return int(Path(f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes").read_text())
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():  # v2
            return int(Path(f"/sys/fs/cgroup{path}/memory.max").read_text())
    raise AssertionError(f"no memory cgroup for pid {pid}")


def _workload(cli: Cli, name: str) -> dict[str, object]:
    r = cli("workloads", "--json")
    assert r.code == 0, str(r)
    return next(w for w in r.json() if w["name"] == name)


def test_resize_in_place_then_moved_to_a_bigger_node(cli: Cli, need_criu: None) -> None:  # noqa: F811
    cli.config(CONFIG)
    r = cli("run", "--name", "tick", "--node", "small", "--memory", "256Mi", "--cpus", "1",
            "--detach", "--", sys.executable, "-m", "core.workloads.counter",
            "--state-mb", "48", "--step-seconds", "0.02")  # fmt: skip
    assert r.code == 0, str(r)
    _wait_step(cli.home, "tick", 5)
    w = _workload(cli, "tick")
    pid = int(str(w["pid"]))
    assert (w["cpus"], w["memory_mb"]) == (1.0, 256), w
    assert 48 <= w["memory_used_mb"] <= 256, w  # its cgroup's charge, for the planner
    assert memory_limit(pid) == 256 * MIB

    # In place: more memory on the same node is safe, so no question is asked.
    r = cli("resize", "local:tick", "--memory", "512Mi", "--json")
    assert r.code == 0, str(r)
    assert r.json()["plan"]["risk"] == "safe" and r.json()["plan"]["expected_pause_s"] == 0
    assert memory_limit(pid) == 512 * MIB
    at = _wait_step(cli.home, "tick", 0)
    _wait_step(cli.home, "tick", at + 5)  # it keeps counting, in the same process
    w = _workload(cli, "tick")
    assert (w["pid"], w["node"], w["memory_mb"]) == (pid, "small", 512), w

    # 1536Mi fits only on big: a move, which a person must confirm; unconfirmed, nothing changes.
    r = cli("resize", "local:tick", "--memory", "1536Mi")
    assert r.code == 6, str(r)
    w = _workload(cli, "tick")
    assert (w["pid"], w["node"], w["memory_mb"]) == (pid, "small", 512), w
    assert memory_limit(pid) == 512 * MIB

    r = cli("resize", "local:tick", "--memory", "1536Mi", "--yes", "--json")
    assert r.code == 0, str(r)
    out = r.json()
    assert out["plan"]["risk"] == "disruptive" and out["plan"]["expected_pause_s"] > 0, out
    saved = int(str(_progress(cli.home, "tick").get("step", 0)))
    w = _workload(cli, "tick")
    assert (w["node"], w["state"], w["memory_mb"], w["cpus"]) == ("big", "running", 1536, 1.0)
    new_pid = int(str(w["pid"]))
    assert new_pid != pid and memory_limit(new_pid) == 1536 * MIB
    _wait_step(cli.home, "tick", saved + 5)
    assert _progress(cli.home, "tick").get("verified") is True  # its own state check

    # The size is the workload's: a preempt and a resume restore it with the same limit.
    assert cli("preempt", "local:tick", "--yes").code == 0
    assert cli("resume", "local:tick", "--yes").code == 0
    w = _workload(cli, "tick")
    assert (w["node"], w["memory_mb"]) == ("big", 1536), w
    new_pid = int(str(w["pid"]))
    assert memory_limit(new_pid) == 1536 * MIB

    # 4Gi fits nowhere: refused naming each node; nothing changed.
    r = cli("resize", "local:tick", "--memory", "4Gi", "--yes")
    assert r.code == 10, str(r)
    assert "no-node-fits" in r.stderr and "small" in r.stderr and "big" in r.stderr, str(r)
    assert _workload(cli, "tick")["pid"] == new_pid


def test_resize_bad_input_exits_2(cli: Cli) -> None:
    cli.config(CONFIG)
    for args in (("--memory", "12"), ("--cpus", "-1"), ("--memory", "lots"), ()):
        r = cli("resize", "local:tick", *args)
        assert r.code == 2, str(r)
    for bad, said in (("12", "is not a memory size"), ("65Ti", "at most 64Ti")):
        r = cli("run", "--name", "x", "--memory", bad, "--", "true")
        assert r.code == 2 and said in r.stderr, str(r)
    r = cli("run", "--name", "x", "--cpus", "0", "--", "true")
    assert r.code == 2 and "--cpus" in r.stderr, str(r)
