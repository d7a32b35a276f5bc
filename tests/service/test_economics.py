"""get_workload's checkpoint economics, computed by the service from the store's timings, and
the same advice handed to the planner (``cases``, ``insights.planner_input``): only for
workloads whose backend can ``set_checkpoint_interval``."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from core import errors
from core.config import EconomicsConfig
from core.model import Action, CheckpointInfo, NodeInfo, WorkloadInfo, WorkloadState
from core.planner.checkpoint_interval import daly_period
from core.service import insights
from core.service.economics import cases, checkpoint_economics
from core.service.facade import Service
from core.state.db import Database
from core.state.interruptions import InterruptionHistory, Observed
from tests.service.conftest import PERSON, counter, wait_step


def _ckpt(seq: int, **timings: float) -> CheckpointInfo:
    return CheckpointInfo(id=f"local:w/{seq}", lineage="w", seq=seq, engine="criu",
                          created_at=datetime(2026, 1, 1, seq, tzinfo=UTC), size_bytes=1,
                          timings=timings)  # fmt: skip


class _Service:
    def __init__(self, ckpts: list[CheckpointInfo], spot: bool, fail: bool = False) -> None:
        self.ckpts, self.fail = ckpts, fail
        self.node = NodeInfo(id="local:n", backend="local", name="n", spot=spot)
        self.settings = SimpleNamespace(economics=EconomicsConfig(spot_mtbf_h=2.0))
        self.db = Database(Path(tempfile.mkdtemp(prefix="economics-")) / "state.db")

    def checkpoints(self, workload: str | None = None) -> list[CheckpointInfo]:
        if self.fail:
            raise errors.NotFound("gone", hint="list workloads")
        return self.ckpts

    def nodes(self, backend: str | None = None) -> list[NodeInfo]:
        return [self.node]


W = WorkloadInfo(id="local:w", backend="local", name="w", state=WorkloadState.RUNNING,
                 node="n", checkpoint_every=600)  # fmt: skip


def _for(service: Any) -> Any:
    return checkpoint_economics(service, W)


def test_a_spot_node_gets_young_daly_for_its_mtbf_from_the_median_cost() -> None:
    ckpts = [_ckpt(1, frozen_s=0.2, total_s=0.5), _ckpt(2, frozen_s=0.4, total_s=0.7),
             _ckpt(3, frozen_s=0.3, total_s=0.6)]  # fmt: skip
    pays = _for(_Service(ckpts, spot=True))
    assert pays.spot and pays.mtbf_h == 2.0 and (pays.pause_s, pays.wall_s) == (0.3, 0.6)
    assert pays.interval_s == pytest.approx(daly_period(0.3, 7200) - 0.6, abs=0.05)
    assert pays.in_force_s == 600 and pays.why.startswith("Spot node, MTBF 2 h")
    assert set(pays.brief()) == {"interval_s", "in_force_s", "loss_s_per_h",
                                 "overhead_s_per_h", "why"}  # fmt: skip
    on_demand = _for(_Service(ckpts, spot=False))
    assert on_demand.interval_s > pays.interval_s and on_demand.mtbf_h == 720


def test_nothing_measured_or_nothing_readable_gives_none() -> None:
    assert _for(_Service([_ckpt(1)], spot=True)) is None  # no timings
    assert _for(_Service([_ckpt(1, frozen_s=0.2)], spot=True, fail=True)) is None


def test_bounds_that_cross_are_refused_in_the_configuration() -> None:
    with pytest.raises(ValueError, match="min_interval_s"):
        EconomicsConfig(min_interval_s=100, max_interval_s=10)


def test_the_mode_in_force_is_said_auto_fixed_or_off() -> None:
    ckpts = [_ckpt(1, frozen_s=0.2, total_s=0.5)]
    service: Any = _Service(ckpts, spot=True)
    auto = checkpoint_economics(service, W.model_copy(update={"checkpoint_auto": True}))
    assert auto is not None and auto.mode == "auto" and auto.in_force_s == 600
    assert auto.brief()["mode"] == "auto"  # said in the concise view only when auto
    assert _for(service).mode == "fixed" and "mode" not in _for(service).brief()
    off = checkpoint_economics(service, W.model_copy(update={"checkpoint_every": None}))
    assert off is not None and off.mode == "off"


def test_the_planner_gets_the_same_advice_from_one_read_of_every_checkpoint() -> None:
    ckpts = [_ckpt(1, frozen_s=0.2, total_s=0.5), _ckpt(2, frozen_s=0.4, total_s=0.7),
             _ckpt(3, frozen_s=0.3, total_s=0.6)]  # fmt: skip
    stub: Any = _Service(ckpts, spot=True)
    other = W.model_copy(update={"id": "local:v", "name": "v"})  # no checkpoint of its own
    elsewhere = W.model_copy(update={"node": "gone"})  # on no listed node
    found = cases(stub, [W, other])
    assert set(found) == {"local:w"}
    assert found["local:w"].advice.interval_s == _for(stub).interval_s
    assert cases(stub, [elsewhere]) == {}


@pytest.mark.criu
def test_only_a_backend_that_can_retime_a_workload_gets_the_proposal(
    service: Service, settings: Any, need_criu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.run_workload(counter(settings, "daily", mb=8, every=86400), detach=True,
                         principal=PERSON)  # fmt: skip
    wait_step(settings, "daily", 2)
    ref = "local:daily"
    service.act(Action.CHECKPOINT, ref, {}, principal=PERSON)

    def retiming() -> list[str]:
        data, _ = insights.planner_input(service)
        return [p.target for p in insights.propose(service, notices=[], gpus=[]).proposals
                if p.action is Action.SET_CHECKPOINT_INTERVAL] + list(data.intervals)  # fmt: skip

    assert retiming() == [ref, ref]  # the proposal, and the advice it rests on
    local = type(service.backends["local"])
    can = local.capabilities(service.backends["local"])
    monkeypatch.setattr(local, "capabilities", lambda self: can - {Action.SET_CHECKPOINT_INTERVAL})
    assert retiming() == []


def test_what_the_watch_saw_on_a_class_of_nodes_updates_its_configured_hazard() -> None:
    """Two reclaims in 20 node-hours watched on spot nodes, against a 2 h prior: the MTBF
    is (20 + 2) / (2 + 1) = 7.33 h, and the interval lengthens with it; on-demand nodes
    keep theirs (nothing was seen there)."""
    ckpts = [_ckpt(1, frozen_s=0.3, total_s=0.6)]
    service: Any = _Service(ckpts, spot=True)
    before = checkpoint_economics(service, W)
    history = InterruptionHistory(service.db)
    node = Observed("local:n", "local", True)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for minute in range(0, 20 * 60 + 1, 5):  # a pass every 5 minutes for 20 hours
        history.observe([node], t0 + timedelta(minutes=minute))
    assert history.record(node, "reclaim", t0 + timedelta(hours=3))
    assert not history.record(node, "reclaim", t0 + timedelta(hours=3))  # the same episode
    assert history.record(node, "failure", t0 + timedelta(hours=9))
    after = checkpoint_economics(service, W)
    assert before is not None and after is not None
    assert before.mtbf_h == 2.0 and after.mtbf_h == pytest.approx(22 / 3, abs=0.01)
    assert after.interval_s > before.interval_s
    assert "2 interruption(s) in 20 node-hours watched and the configured 2 h" in after.why
    assert _for(_Service(ckpts, spot=False)).mtbf_h == 720  # another class, another history
