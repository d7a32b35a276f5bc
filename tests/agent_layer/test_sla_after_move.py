"""After a move, ``sla_risk`` agrees with the projection the migration's dry run showed.

Until progress on the new node is seen, the rate the workload made on the node it left is
scaled by the two nodes' speeds and the risk says ``estimated: true``; once ``MOVE_SETTLE_S``
of progress there is seen, that progress decides. The first test is the pure rule; the
second drives the installed ``clawpoint serve`` (stdio, the SDK's client) and the installed
``clawpoint migrate`` on the local backend with a real CRIU migration to a node four times
as fast.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from core.model import WorkloadInfo, WorkloadState, utcnow
from core.signals.sla import MOVE_SETTLE_S, Moved, Observation, Progress, RiskLevel, assess
from tests.adversarial.conftest import PERSON, Lab
from tests.agent_layer import serving
from tests.planner.test_planner import NOW
from tests.service.conftest import counter, wait_step

CLAWPOINT = Path(sys.executable).parent / "clawpoint"
FAST_NODE_B = """
[[local.nodes]]
name = "node-a"

[[local.nodes]]
name = "node-b"
labels = {"clawpoint.io/speed" = "4"}
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _job(node: str, started: datetime) -> WorkloadInfo:
    deadline = (NOW + timedelta(hours=1)).isoformat()
    return WorkloadInfo(id="local:job", backend="local", name="job", state=WorkloadState.RUNNING,
                        node=node, labels={"clawpoint.io/deadline": deadline},
                        started_at=started)  # fmt: skip


def test_a_move_applies_the_new_node_speed_until_progress_there_is_seen() -> None:
    # 1 step/s on node-a (speed 1) for 1000 s; 10000 steps to do; deadline in an hour: late.
    history = [Observation(step=0, at=NOW - timedelta(seconds=1000)),
               Observation(step=1000, at=NOW)]  # fmt: skip
    before = assess(_job("node-a", NOW - timedelta(seconds=1000)), now=NOW,
                    progress=Progress(step=1000, total=10000), history=history)  # fmt: skip
    assert before is not None and before.level is RiskLevel.HIGH and not before.estimated
    assert before.remaining_s == 9000

    # Moved to node-b (speed 4) at step 1000; 5 s later it restarted there (started_at).
    moved = Moved(at=NOW + timedelta(seconds=5), node="node-b", step=1000, from_node="node-a",
                  from_speed=1.0, rate=1.0)  # fmt: skip
    job = _job("node-b", NOW + timedelta(seconds=5))
    soon = NOW + timedelta(seconds=10)
    after = assess(job, now=soon, progress=Progress(step=1010, total=10000), history=history,
                   speed=4.0, moved=moved)  # fmt: skip
    assert after is not None and after.estimated
    assert after.rate_steps_per_s == 4.0  # the old rate at the new node's speed
    assert after.remaining_s == pytest.approx(8990 / 4)
    assert after.level is RiskLevel.LOW
    # Without the move it would divide 1010 steps by 5 s since the restart: 202 steps/s.
    naive = assess(job, now=soon, progress=Progress(step=1010, total=10000), speed=4.0)
    assert naive is not None and naive.rate_steps_per_s == pytest.approx(202)

    # Progress on node-b over MOVE_SETTLE_S decides from then on: 3 steps/s, not 4.
    later = moved.at + timedelta(seconds=MOVE_SETTLE_S)
    seen = [*history, Observation(step=1000 + 90, at=moved.at + timedelta(seconds=30))]
    measured = assess(job, now=later, progress=Progress(step=1000 + int(3 * MOVE_SETTLE_S),
                      total=10000), history=seen, speed=4.0, moved=moved)  # fmt: skip
    assert measured is not None and not measured.estimated
    assert measured.rate_steps_per_s == pytest.approx(3.0)
    # A move recorded for another node (it moved again since) is not applied.
    other = assess(_job("node-c", NOW - timedelta(seconds=1000)), now=NOW,
                   progress=Progress(step=1000, total=10000), history=history, moved=moved)  # fmt: skip
    assert other is not None and not other.estimated and other.rate_steps_per_s == 1.0


def _risk(risks: list[dict[str, object]], workload: str) -> dict[str, object]:
    [risk] = [r for r in risks if r["workload"] == workload]
    return risk


@pytest.mark.anyio
@pytest.mark.criu
async def test_sla_risk_after_a_migration_matches_the_dry_run_projection(
    lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    lab = lab_factory(FAST_NODE_B)
    # About 2,500 s of work at the counter's pace with 30 minutes to go: late on node-a,
    # on time on node-b.
    spec = counter(lab.settings, "late-w", mb=8, node="node-a")
    spec = spec.model_copy(update={
        "command": [*spec.command, "--steps", "100000"],
        "labels": {"clawpoint.io/deadline": (utcnow() + timedelta(minutes=30)).isoformat()},
    })  # fmt: skip
    lab.service.run_workload(spec, detach=True, principal=PERSON)
    # Long enough on node-a (about 20 s) that the steps since the restart divided by the
    # seconds since it tell a rate far from the projected one.
    wait_step(lab.settings, "late-w", 900)
    workload = "local:late-w"
    async with serving.client(lab, gpus=[]) as client:
        risk = _risk((await serving.ok(client, "sla_risk"))["risks"], workload)
        assert risk["level"] == "high" and "estimated" not in risk, risk
        dry = await serving.ok(client, "migrate_workload",
                               {"workload": workload, "to": "node-b", "dry_run": True})  # fmt: skip
        projection = dry["plan"]["projection"]
        assert projection["meets_deadline"] is True, projection
        projected = datetime.fromisoformat(projection["projected_finish"])

        # A person moves it (the installed CLI), then the agent checks "Done when".
        proc = subprocess.run([str(CLAWPOINT), "migrate", workload, "--to", "node-b", "--yes"],
                              env=lab.env(), capture_output=True, text=True, timeout=300,
                              check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert lab.service.get_workload(workload).node == "node-b"
        after = _risk((await serving.ok(client, "sla_risk"))["risks"], workload)
    assert after["estimated"] is True, after
    assert after["level"] == "low", after
    # The same finish the dry run projected (the move's pause and the steps made meanwhile
    # shift it a little), not one made from the steps since the restart.
    eta = datetime.fromisoformat(str(after["eta"]))
    assert abs((eta - projected).total_seconds()) < 60, (eta, projected, after)
