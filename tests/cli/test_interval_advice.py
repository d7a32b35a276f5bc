"""The checkpoint interval that pays, as a person and the watch loop see it: the installed
``clawpoint`` on a real CRIU workload checkpointed once a day on an on-demand node.

After one timed checkpoint, ``workloads --json`` shows the advice beside the interval in
force (the table stays as it was); ``watch --once --json`` reports the shorter interval as
advice and changes nothing (exit 0: the interval is its owner's choice); once a person grants
it (``trigger=checkpoint-interval``), the next pass carries it out (exit 21), after which
nothing more is proposed.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from core.durations import interval_seconds
from tests.cli.conftest import Cli
from tests.service.conftest import need_criu  # noqa: F401 (fixture)

pytestmark = pytest.mark.criu


def _row(cli: Cli, ref: str, *more: str) -> dict[str, Any]:
    r = cli("workloads", "--json", *more)
    assert r.code == 0, str(r)
    return next(w for w in r.json() if w["id"] == ref)


def test_workloads_json_shows_the_advice_and_watch_follows_it_once_granted(
    cli: Cli,
    need_criu: None,  # noqa: F811
) -> None:
    r = cli("run", "--name", "daily", "--node", "node-a", "--checkpoint-every", "86400",
            "--detach", "--", sys.executable, "-m", "core.workloads.counter", "--state-mb", "8",
            "--step-seconds", "0.02")  # fmt: skip
    assert r.code == 0, str(r)
    ref = "local:daily"
    assert "checkpoint_interval" not in _row(cli, ref)  # nothing measured yet
    assert cli("checkpoint", ref, "--json").code == 0

    pays = _row(cli, ref)["checkpoint_interval"]
    assert set(pays) == {"interval_s", "in_force_s", "loss_s_per_h", "overhead_s_per_h", "why"}
    assert pays["in_force_s"] == 86400 and 10 <= pays["interval_s"] < 86400, pays
    assert pays["why"].startswith("On-demand node, MTBF 720 h"), pays
    assert _row(cli, ref, "--backend", "local")["checkpoint_interval"] == pays
    table = cli("workloads")
    assert table.code == 0 and "interval" not in table.stdout, str(table)

    # Advice, not an order: watch reports it and changes nothing by itself (exit 0) ...
    watched = cli("watch", "--once", "--json")
    assert watched.code == 0, str(watched)
    report = watched.json()
    [proposal] = [p for p in report["proposals"] if p["target"] == ref]
    assert (proposal["action"], proposal["trigger"], proposal["risk"]) == (
        "set_checkpoint_interval", "checkpoint-interval", "safe",
    ), proposal  # fmt: skip
    key = f"checkpoint-interval|set_checkpoint_interval|{ref}"
    assert report["advised"] == [key] and not report["actions"], report
    assert _row(cli, ref)["checkpoint_every"] == 86400
    # ... until a person grants it: then the next pass carries it out.
    r = cli("approvals", "grant", "--action", "set_checkpoint_interval", "--scope",
            "trigger=checkpoint-interval", "--expires", "1h", "--reason", "follow the advice")  # fmt: skip
    assert r.code == 0, str(r)
    watched = cli("watch", "--once", "--json")
    assert watched.code == 21, str(watched)  # it acted
    [done] = [a for a in watched.json()["actions"] if a["target"] == ref]
    assert done["status"] == "executed", done
    every = interval_seconds(proposal["params"]["every"])
    assert every is not None and every < 86400
    assert _row(cli, ref)["checkpoint_every"] == every
    again = cli("watch", "--once", "--json")
    assert not [p for p in again.json()["proposals"] if p["target"] == ref], again.stdout
