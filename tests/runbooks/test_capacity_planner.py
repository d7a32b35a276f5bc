"""The capacity-planner runbook on the local backend, as an agent under the default policy.

Three virtual nodes: node-a (pool on-demand) runs a counter under real CRIU whose periodic
checkpoint every 5 s costs far more than it saves on an on-demand node, so the planner
advises a longer interval; node-b and node-c (pool spot) are idle. Local work never waits,
so the run never grows a local pool (the growth is tests/slurm/test_capacity_runbook.py).

- Not asked to release idle nodes, the run releases nothing and only reports the interval
  advice: no standing grant covers it (a lengthening is the owner's choice).
- A dry run asked to release them plans the shrink and changes nothing.
- Asked, with a person's standing grant for the workload's interval: the idle spot nodes are
  released (safe: nothing moves) and the interval is lengthened under the grant; the counter
  runs on where it was. An unknown pool fails the run naming the pools.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.config import Settings, load_settings
from core.model import Action, PoolInfo, WorkloadState
from core.runbooks.engine import Engine
from core.runbooks.store import RunStatus
from core.runbooks.views import RunView
from core.service.facade import Service
from tests.runbooks.conftest import AGENT, ROOT
from tests.service.conftest import PERSON, counter, step, wait_step

pytestmark = pytest.mark.criu

CONFIG = """
[local]
nodes = [
  { name = "node-a", price_per_hour = 3.06, labels = { pool = "on-demand" } },
  { name = "node-b", price_per_hour = 0.92, spot = true, labels = { pool = "spot" } },
  { name = "node-c", price_per_hour = 0.95, spot = true, labels = { pool = "spot" } },
]
[local.pools.on-demand]
min_size = 1
"""
WORKLOAD = "local:cap-w"


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    home = tmp_path / "h"
    home.mkdir(parents=True)
    (home / "config.toml").write_text(CONFIG)
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return load_settings(home)


def _out(run: RunView, step_id: str) -> Any:
    for s in run.steps:
        if s.id == step_id:
            return s.output
    raise AssertionError(f"no step {step_id} in {[s.id for s in run.steps]}")


def _spot(service: Service) -> PoolInfo:
    [pool] = [p for p in service.pools("local") if p.id == "local:spot"]
    return pool


def test_releases_idle_nodes_only_when_asked_and_retimes_only_under_a_grant(
    engine: Engine, service: Service, settings: Settings, need_criu: None
) -> None:
    spec = counter(settings, "cap-w", mb=32, node="node-a", every=5)
    service.run_workload(spec, detach=True, principal=PERSON)
    wait_step(settings, "cap-w", 3)
    done = service.act(Action.CHECKPOINT, WORKLOAD, {}, principal=PERSON)  # a timed one, now
    assert done.status == "executed", done.message

    run = engine.start("capacity-planner", {"pool": "local:spot"}, principal=AGENT)
    assert run.status is RunStatus.SUCCEEDED, (run.error, run.steps[-1])
    pool = _out(run, "pool")
    assert (pool["size"], pool["idle"], pool["pending"]) == (2, ["node-b", "node-c"], 0), pool
    assert (pool["grow_to"], pool["shrink_to"]) == (None, 0), pool
    assert any("release_idle=true" in m for m in run.messages), run.messages
    advice = _out(run, "advice")
    assert (advice["workload"], advice["action"], advice["granted"]) == (
        WORKLOAD, "set_checkpoint_interval", False,
    ), advice  # fmt: skip
    every = advice["proposals"][0]["arguments"]["every"]
    assert any(m.startswith("[info] advise: Advice only") and every in m for m in run.messages)
    assert _spot(service).size == 2
    assert service.get_workload(WORKLOAD).checkpoint_every == 5.0  # nothing changed

    params = {"pool": "local:spot", "release_idle": True, "workload": WORKLOAD}
    run = engine.start("capacity-planner", params, principal=AGENT, dry_run=True)
    assert run.status is RunStatus.SUCCEEDED, (run.error, run.steps[-1])
    assert _out(run, "shrink-gate")["status"] == "planned"
    assert _spot(service).size == 2 and _spot(service).released == []

    service.grant(
        Action.SET_CHECKPOINT_INTERVAL, {"target": WORKLOAD}, max_per_hour=5, expires="1h",
        reason="the planner's interval advice for cap-w", principal=PERSON,
    )  # fmt: skip
    before = step(settings, "cap-w")
    run = engine.start("capacity-planner", params, principal=AGENT)
    assert run.status is RunStatus.SUCCEEDED, (run.error, run.steps[-1])
    assert _out(run, "shrink-gate")["status"] == "executed"  # idle only: safe, nobody asked
    spot = _spot(service)
    assert (spot.size, sorted(spot.released)) == (0, ["node-b", "node-c"]), spot
    assert {n.name for n in service.nodes("local")} == {"node-a"}
    assert _out(run, "advice")["granted"] is True
    assert _out(run, "retime-gate")["status"] == "executed"
    w = service.get_workload(WORKLOAD)
    assert w.checkpoint_every is not None and w.checkpoint_every > 5.0, w
    assert (w.state, w.node) == (WorkloadState.RUNNING, "node-a")
    assert wait_step(settings, "cap-w", before) > before  # it never stopped counting

    run = engine.start("capacity-planner", {"pool": "local:gpu"}, principal=AGENT)
    assert run.status is RunStatus.FAILED
    assert run.error and "no pool 'local:gpu'" in run.error and "local:spot" in run.error
