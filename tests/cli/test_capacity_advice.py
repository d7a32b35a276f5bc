"""Pool scaling as the watch loop proposes it: the installed ``clawpoint`` on local pools.

The local backend has no pending work (its queue counts PENDING workloads, and local ones
start at once), so only the shrink can be seen here (the growth: tests/slurm). Without
``[capacity] release_idle`` nothing is proposed. With it: pool ``spot`` has three idle nodes
and ``min_size = 1``; pool ``on-demand`` one idle node at its ``min_size``.
``watch --once --json`` proposes releasing spot's two idle nodes above its
minimum and, since releasing idle nodes is safe, carries it out under the default policy as
the scheduler (exit 21); on-demand, at its minimum, is left alone. A person grows spot back:
the next pass proposes no shrink (the pool just scaled). A backend whose pools cannot be read
is an error in the plan report and in the watch report, not a failed pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.config import load_settings
from core.service import insights
from core.service.facade import bootstrap
from core.watch.loop import watch_once
from tests.cli.conftest import Cli

CONFIG = """
[local]
nodes = [
  { name = "node-a", price_per_hour = 3.06, labels = { pool = "on-demand" } },
  { name = "node-b", price_per_hour = 0.92, spot = true, labels = { pool = "spot" } },
  { name = "node-c", price_per_hour = 0.95, spot = true, labels = { pool = "spot" } },
  { name = "node-d", price_per_hour = 0.93, spot = true, labels = { pool = "spot" } },
]
[local.pools.on-demand]
min_size = 1
[local.pools.spot]
min_size = 1
[capacity]
release_idle = true
"""


def _pools(cli: Cli) -> dict[str, dict[str, Any]]:
    r = cli("pools", "--json")
    assert r.code == 0, str(r)
    return {p["id"]: p for p in r.json()}


def test_watch_releases_idle_pool_nodes_and_holds_off_after_a_growth(cli: Cli) -> None:
    cli.config(CONFIG.replace("release_idle = true", "release_idle = false"))
    quiet = cli("watch", "--once", "--json")
    assert quiet.code == 0 and quiet.json()["proposals"] == [], str(quiet)
    cli.config(CONFIG)
    assert _pools(cli)["local:spot"]["size"] == 3

    watched = cli("watch", "--once", "--json")
    assert watched.code == 21, str(watched)  # it acted
    report = watched.json()
    [shrink] = [p for p in report["proposals"] if p["action"] == "scale_pool"]
    assert (shrink["target"], shrink["trigger"], shrink["risk"], shrink["params"]) == (
        "local:spot", "capacity-shrink", "safe", {"size": 1},
    ), shrink  # fmt: skip
    assert "releases idle nodes only" in shrink["reason"] and "/h" in shrink["reason"], shrink
    [done] = [a for a in report["actions"] if a["target"] == "local:spot"]
    assert done["status"] == "executed", done
    pools = _pools(cli)
    assert pools["local:spot"]["size"] == 1 and len(pools["local:spot"]["released"]) == 2
    assert pools["local:on-demand"]["size"] == 1  # at its min_size: left alone

    # A person grows it back; its new node is idle, but the pool just scaled: no shrink.
    r = cli("pools", "scale", "local:spot", "--size", "2", "--json")
    assert r.code == 0 and r.json()["status"] == "executed", str(r)
    again = cli("watch", "--once", "--json")
    assert again.code in (0, 20), str(again)
    assert not [p for p in again.json()["proposals"] if p["action"] == "scale_pool"], again.stdout
    assert _pools(cli)["local:spot"]["size"] == 2


def test_a_backend_whose_pools_fail_is_an_error_in_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.toml").write_text(CONFIG)
    service = bootstrap(load_settings(tmp_path))

    def broken() -> list[Any]:
        raise errors.BackendUnavailable("pool table locked", hint="try again")

    monkeypatch.setattr(service.backends["local"], "pools", broken)
    report = insights.propose(service, notices=[], gpus=[])
    assert not [p for p in report.proposals if p.action.value == "scale_pool"]
    assert [e for e in report.errors if e.startswith("pools of local: pool table locked")]
    watched = watch_once(service, notices=[], nvml=None)
    assert [e for e in watched.errors if e.startswith("pools of local")], watched.errors
    assert watched.exit_code == 1
