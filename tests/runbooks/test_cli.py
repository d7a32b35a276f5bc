"""``clawpoint runbook ...``: list, check, and a run started by a person who confirms the
plan their own run waits on (people confirm; agents need someone else's approval)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from typer.testing import CliRunner

from core import errors
from core.backends.local import LocalBackend
from core.cli.runbook import runbook_app
from core.service.facade import Service
from tests.runbooks.conftest import ROOT

runner = CliRunner()


def _json(*args: str, code: int = 0) -> Any:
    result = runner.invoke(runbook_app, [*args, "--json"])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout)


def test_list_and_check(tmp_path: Path, service: Service) -> None:
    names = {r["name"] for r in _json("list")}
    assert "spot-interruption" in names and len(names) == 6
    ok = _json("check", str(ROOT / "runbooks" / "sla-rescue.yaml"))
    assert ok["ok"] is True
    assert _json("check", "queue-backlog")["ok"] is True  # by name
    data = yaml.safe_load((ROOT / "runbooks" / "sla-rescue.yaml").read_text())
    data["steps"][0]["tool"] = "sla_risks"
    bad = tmp_path / "sla-rescue.yaml"
    bad.write_text(yaml.safe_dump(data))
    out = _json("check", str(bad), code=2)
    assert out["ok"] is False and any("steps[0](risk).tool" in p for p in out["problems"])


def test_person_run_waits_for_their_confirmation(service: Service) -> None:
    local = cast(LocalBackend, service.backend("local"))
    local.set_node_state("node-b", health="degraded", reason="ecc errors")
    run = _json("run", "gpu-node-failure", "--param", "node=local:node-b")
    assert run["status"] == "waiting_approval" and run["waiting"]["kind"] == "confirm"
    assert "--yes" in run["next"]
    still = _json("continue", run["id"])
    assert still["status"] == "waiting_approval"
    assert all(n.schedulable for n in service.nodes("local"))
    done = _json("continue", run["id"], "--yes")
    assert done["status"] == "succeeded", done
    gate = next(s for s in done["steps"] if s["id"] == "drain-gate")
    assert gate["output"]["result"]["status"] == "executed"
    assert not next(n for n in service.nodes("local") if n.name == "node-b").schedulable
    assert _json("status", run["id"])["status"] == "succeeded"
    assert [r["id"] for r in _json("status")] == [run["id"]]
    bad = runner.invoke(runbook_app, ["run", "gpu-node-failure", "--param", "node"])
    assert bad.exit_code != 0


@pytest.mark.parametrize("wait", [-5, float("inf"), float("nan"), 10**20, 1441, True, "1"])
def test_a_pool_reads_waits_of_at_most_a_day(service: Service, wait: object) -> None:
    """As ``[capacity] grow_after_wait_s``: an infinite or 10^20-minute threshold was read as
    given (it meant "never grow"), a negative one refused."""
    from core.model import Principal, PrincipalKind
    from core.runbooks.calls import CALLS, CallContext

    ctx = CallContext(principal=Principal(id="p", kind=PrincipalKind.PERSON))
    pool = service.pools("local")[0].id
    with pytest.raises(
        errors.InvalidInput, match="min_wait_minutes must be a number from 0 to 1440"
    ):
        CALLS["list_pools"](service, {"pool": pool, "min_wait_minutes": wait}, ctx)
    assert CALLS["list_pools"](service, {"pool": pool, "min_wait_minutes": 1440}, ctx)["id"] == pool
