"""``clawpoint pools`` and ``pools scale``: the installed console script on a real workload.

Three virtual nodes: ``node-a`` (pool on-demand) and ``node-b``, ``node-c`` (pool spot). A
self-verifying counter under real CRIU runs on node-b. Shrinking spot to one node releases
the idle node-c without asking anyone (nothing moves); shrinking it to none must move the
counter, so it asks for a person (exit 6, nothing changed) and, confirmed, saves the counter,
restores it on node-a and releases node-b: the counter goes on from where it was (its own
state check never fails). Sizes outside the pool's bounds exit 2 naming them; growing back
is safe within the cost cap; beyond it, a person decides.
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
  { name = "node-a", price_per_hour = 3.06, labels = { pool = "on-demand" } },
  { name = "node-b", price_per_hour = 0.92, spot = true, labels = { pool = "spot" } },
  { name = "node-c", price_per_hour = 0.95, spot = true, labels = { pool = "spot" } },
]
[local.pools.on-demand]
min_size = 1

[capacity]
max_added_per_hour = 1.0
"""


def _step(home: Path, name: str) -> int:
    try:
        return int(json.loads((home / "run" / f"{name}.progress.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return -1


def _wait_step(home: Path, name: str, above: int, timeout_s: float = 90) -> int:
    deadline = time.monotonic() + timeout_s
    while (s := _step(home, name)) <= above:
        assert time.monotonic() < deadline, f"{name} made no progress past {above}"
        time.sleep(0.05)
    return s


def _pool(cli: Cli, name: str) -> dict[str, object]:
    r = cli("pools", "--json")
    assert r.code == 0, str(r)
    pools: list[dict[str, object]] = r.json()
    return next(p for p in pools if p["id"] == name)


def _node_names(cli: Cli) -> set[str]:
    r = cli("nodes", "--json")
    assert r.code == 0, str(r)
    return {n["name"] for n in r.json()}


def test_a_pool_shrinks_without_losing_work_and_grows_back(
    cli: Cli,
    need_criu: None,  # noqa: F811
) -> None:
    cli.config(CONFIG)
    r = cli("run", "--name", "tick", "--node", "node-b", "--detach", "--",
            sys.executable, "-m", "core.workloads.counter", "--state-mb", "32",
            "--step-seconds", "0.02")  # fmt: skip
    assert r.code == 0, str(r)
    _wait_step(cli.home, "tick", 5)
    spot = _pool(cli, "local:spot")
    assert (spot["size"], spot["min_size"], spot["max_size"]) == (2, 0, 2), spot
    assert spot["idle"] == ["node-c"], spot

    # The idle node goes first, and nothing moves: safe, nobody asked.
    r = cli("pools", "scale", "local:spot", "--size", "1", "--json")
    assert r.code == 0, str(r)
    out = r.json()
    assert out["status"] == "executed" and out["plan"]["risk"] == "safe", out
    assert _node_names(cli) == {"node-a", "node-b"}
    assert cli.workload("local:tick")["node"] == "node-b"

    # The last spot node runs the counter: moving it is a person's call.
    r = cli("pools", "scale", "local:spot", "--size", "0")
    assert r.code == 6 and "disruptive" in r.stdout + r.stderr, str(r)
    assert _node_names(cli) == {"node-a", "node-b"}  # nothing changed
    assert cli.workload("local:tick")["node"] == "node-b"

    before = _wait_step(cli.home, "tick", _step(cli.home, "tick"))
    r = cli("pools", "scale", "local:spot", "--size", "0", "--yes", "--json")
    assert r.code == 0, str(r)
    out = r.json()
    assert out["status"] == "executed", out
    assert [s["op"] for s in out["plan"]["steps"]] == ["set_node", "checkpoint", "start",
                                                       "release"]  # fmt: skip
    assert out["plan"]["cost_effect"].startswith("-0.92/h"), out["plan"]
    moved = cli.workload("local:tick")
    assert (moved["state"], moved["node"]) == ("running", "node-a"), moved
    after = _wait_step(cli.home, "tick", before + 20)  # it goes on from where it was
    assert after > before
    log = (cli.home / "logs" / "tick.out").read_text(errors="replace")
    assert "STATE CHECK FAILED" not in log
    assert _node_names(cli) == {"node-a"}
    spot = _pool(cli, "local:spot")
    assert spot["size"] == 0 and spot["released"] == ["node-b", "node-c"], spot

    # Bounds: named, nothing changed.
    for size, pool in (("3", "local:spot"), ("0", "local:on-demand")):
        r = cli("pools", "scale", pool, "--size", size, "--yes")
        assert r.code == 2 and "nodes, not" in r.stdout + r.stderr, str(r)
    r = cli("pools", "scale", "local:gpu", "--size", "1", "--yes")
    assert r.code == 3 and "local:spot" in r.stdout + r.stderr, str(r)

    # Both nodes back would add 1.87/h, over the 1.00/h cap: a person's call. One at a time
    # stays within it (the cheaper one first).
    r = cli("pools", "scale", "local:spot", "--size", "2")
    assert r.code == 6 and "disruptive" in r.stdout + r.stderr, str(r)
    assert _node_names(cli) == {"node-a"}
    r = cli("pools", "scale", "local:spot", "--size", "1", "--json")
    assert r.code == 0 and r.json()["plan"]["risk"] == "safe", str(r)
    assert _node_names(cli) == {"node-a", "node-b"}
    r = cli("pools", "scale", "local:spot", "--size", "2", "--json")
    assert r.code == 0 and r.json()["plan"]["risk"] == "safe", str(r)
    assert _node_names(cli) == {"node-a", "node-b", "node-c"}
