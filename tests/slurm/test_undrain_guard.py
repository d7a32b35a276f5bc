"""Slurm's RESUME also returns a DOWN node to service: an agent's undrain of one waits for a
person, as does an undrain of a node someone drained with ``scontrol`` (not clawpoint); an
agent undoes a drain clawpoint made for it. Against the loopback cluster, through the
service as the MCP server builds it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import load_settings
from core.model import Action, NodeInfo, Principal, PrincipalKind
from core.service.facade import Service, bootstrap
from tests.slurm.conftest import CLUSTER_DIR, sh

pytestmark = pytest.mark.slurm

AGENT = Principal(id="mcp:stdio/t1", kind=PrincipalKind.AGENT)


@pytest.fixture
def service(tmp_path: Path, slurm_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Service:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        "[local]\nenabled = false\n\n"
        "[slurm]\nenabled = true\nretry_total_s = 2.0\ncommand_timeout_s = 10.0\n"
    )
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    monkeypatch.delenv("CLAWPOINT_CONFIG", raising=False)
    return bootstrap(load_settings(home))


@pytest.fixture
def n2() -> Iterator[str]:
    yield "slurm:n2"
    sh("scontrol", "update", "nodename=n2", "state=RESUME", check=False)


def _n2(service: Service) -> NodeInfo:
    return next(n for n in service.nodes("slurm") if n.name == "n2")


def _wait_in_service(service: Service, timeout_s: float = 90) -> None:
    """After RESUME, slurmd answers the controller's ping before n2 takes jobs again."""
    deadline = time.monotonic() + timeout_s
    while not _n2(service).schedulable:
        assert time.monotonic() < deadline, _n2(service)
        time.sleep(1)


CTLD_LOG = CLUSTER_DIR / "log" / "slurmctld.log"


def _ctld_log_from(offset: int) -> str:
    with CTLD_LOG.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def test_an_agent_does_not_return_a_down_or_hand_drained_node(service: Service, n2: str) -> None:
    mark = CTLD_LOG.stat().st_size
    sh("scontrol", "update", "nodename=n2", "state=DOWN", "reason=bad DIMM")
    down = service.act(Action.UNDRAIN_NODE, n2, {}, principal=AGENT, reason="looks idle")
    assert down.status == "approval_required", down.message
    assert "returning a down node to service" in down.message
    assert down.plan is not None and down.plan.scope.node_down is True
    # Nothing returned it. The loopback cluster's ReturnToService=2 makes slurmctld itself
    # return a DOWN node whose slurmd answers its next ping (src/slurmctld/node_mgr.c,
    # _node_did_resp, "node_did_resp: node n2 returned to service"; or its registration,
    # validate_node_specs, "node n2 returned to service"), which may come within the second:
    # then its log says so, and it shows no state set by a request (a RESUME would log
    # "state set to IDLE").
    if "down" not in _n2(service).state:
        said = _ctld_log_from(mark)
        assert "node n2 returned to service" in said, said
        assert "update_node: node n2 state set to IDLE" not in said, said
    # The person declines it (an agent's repeat of a pending request would return that same
    # request: one pending request per requester, action and target).
    assert down.approval is not None
    person = Principal(id="p", kind=PrincipalKind.PERSON)
    service.deny(down.approval["id"], principal=person, why="fix the DIMM first", via="cli")

    # (refused as "Invalid node state transition" if Slurm returned it already)
    sh("scontrol", "update", "nodename=n2", "state=RESUME", check=False)
    _wait_in_service(service)
    sh("scontrol", "update", "nodename=n2", "state=DRAIN", "reason=rack maintenance")
    drained = service.act(Action.UNDRAIN_NODE, n2, {}, principal=AGENT, reason="looks idle")
    assert drained.status == "approval_required", drained.message
    assert "undoing a drain made by someone outside clawpoint" in drained.message
    assert drained.plan is not None and drained.plan.scope.drained_by == "unknown"

    # A drain clawpoint made for an agent (granted), undone by the agent alone.
    sh("scontrol", "update", "nodename=n2", "state=RESUME")
    _wait_in_service(service)
    service.grant(Action.CORDON_NODE, {"backend": "slurm"}, max_per_hour=5, expires="1h",
                  reason="agents may cordon", principal=person)  # fmt: skip
    cordoned = service.act(Action.CORDON_NODE, n2, {"reason": "agent cordon"}, principal=AGENT)
    assert cordoned.status == "executed", cordoned.message
    undone = service.act(Action.UNDRAIN_NODE, n2, {}, principal=AGENT, reason="done")
    assert undone.status == "executed", undone.message
    assert undone.plan is not None and undone.plan.scope.drained_by == "agent"
