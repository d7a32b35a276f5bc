"""The newest good checkpoint survives what happens between a plan and its execution, and
checkpoints taken on request are rotated, through the installed ``clawpoint`` and an MCP client.

- A delete a person approved while a newer good checkpoint existed is refused at execution
  when that newer one no longer verifies (bytes flipped on disk after the approval): the
  checkpoint is then the last one to restore from. The refusal names its code, deletes
  nothing, leaves the approval unused, and ``resume`` restores from the checkpoint kept.
- Checkpoints asked for on request (an agent's "safe" ``checkpoint_workload``, a person's
  ``clawpoint checkpoint``) are capped by ``[store] keep_on_request``, each kind among its
  own: the oldest of them go, never a scheduled or stop checkpoint, never a person's for an
  agent's, never the newest good one, never one a restore is reading.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.model import CheckpointStatus
from core.store import retention
from core.store.disk import ON_REQUEST
from core.store.store import CheckpointStore
from tests.adversarial.conftest import Lab, agent_session, approval_id_of
from tests.adversarial.test_checkpoint_protection import flip_bytes
from tests.checkpoint import stores
from tests.service.conftest import wait_step

CLAWPOINT = Path(sys.executable).parent / "clawpoint"


def clawpoint(lab: Lab, *args: str) -> tuple[int, str]:
    """The installed console script as a person runs it: exit code and stdout."""
    proc = subprocess.run(
        [str(CLAWPOINT), *args],
        env=lab.env(COLUMNS="250"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc.returncode, proc.stdout + proc.stderr


def listed(lab: Lab, workload: str) -> dict[str, str]:
    code, out = clawpoint(lab, "checkpoints", workload, "--json")
    assert code == 0, out
    return {c["id"]: c["status"] for c in json.loads(out)}


def start_cooperative(lab: Lab, name: str) -> str:
    code, out = clawpoint(
        lab, "run", "--engine", "cooperative", "--name", name, "--node", "node-a", "--detach",
        "--", sys.executable, "-m", "core.workloads.counter", "--state-mb", "1",
        "--step-seconds", "0.05",
    )  # fmt: skip
    assert code == 0, out
    wait_step(lab.settings, name, 2)
    return f"local:{name}"


def seq_dir(lab: Lab, checkpoint: str) -> Path:
    lineage, _, seq = checkpoint.partition(":")[2].partition("@")
    return lab.settings.checkpoint_dir / lineage / f"{int(seq):08d}"


@pytest.mark.anyio
async def test_approved_delete_of_what_became_the_last_good_checkpoint_is_refused(
    lab: Lab,
) -> None:
    workload = start_cooperative(lab, "keeper")
    code, out = clawpoint(lab, "checkpoint", workload)
    assert code == 0, out
    code, out = clawpoint(lab, "preempt", workload, "--yes")
    assert code == 0, out
    older, newer = sorted(listed(lab, workload), key=lambda c: int(c.rsplit("@", 1)[1]))
    async with agent_session(lab, "stdio") as agent:
        # Planned while the newer one verifies: not the newest good, so a person decides.
        out_ = await agent.ok("delete_checkpoint", {"checkpoint": older, "reason": "space"})
        approval = approval_id_of(out_)
        code, out = clawpoint(lab, "approvals", "approve", approval)
        assert code == 0, out
        flip_bytes(seq_dir(lab, newer) / "images")  # a bad disk, after the approval
        text = await agent.error("execute_approved", {"approval_id": approval})
    assert "last-good-checkpoint" in text and "Nothing was done" in text, text
    assert older in text and newer in text, text
    assert listed(lab, workload) == {older: "good", newer: "corrupt"}
    view = lab.service.get_approval(approval)
    assert view.status.value == "approved", view  # refused before it was used
    code, out = clawpoint(lab, "resume", workload, "--yes")
    assert code == 0, out
    assert lab.service.get_workload(workload).state.value == "running"
    wait_step(lab.settings, "keeper", 2)


def test_the_delete_step_itself_refuses_the_last_good_checkpoint(tmp_path: Path) -> None:
    """Under the lineage lock, whatever a caller checked before: nothing is deleted."""
    store = stores.keyed(tmp_path, keep=3)
    older = _publish(store)
    newer = _publish(store)
    flip_bytes(store.images_dir(newer))
    with pytest.raises(errors.Conflict) as caught:
        retention.delete(store, older, live=True)
    assert caught.value.code == "last-good-checkpoint"
    assert [i.id for i in store.list("job")] == [newer, older]
    retention.delete(store, older, live=False)  # a workload that is gone: a person may
    assert [i.id for i in store.list("job")] == [newer]


def _publish(store: CheckpointStore, *, on_request: bool = False) -> str:
    pending = store.begin("job", engine="test", node=None)
    (pending.images_dir / "state.img").write_bytes(b"state %d " % pending.seq * 4096)
    extra: dict[str, Any] = {ON_REQUEST: True} if on_request else {}
    return store.publish(pending, timings={}, leave_running=True, extra=extra).id


ON_REQUEST_CAP = """
[store]
keep_per_workload = 3
keep_on_request = 2
"""


def test_checkpoints_on_request_are_capped_and_push_no_other_out(
    lab_factory: Callable[[str], Lab],
) -> None:
    lab = lab_factory(ON_REQUEST_CAP)
    workload = start_cooperative(lab, "busy")
    code, out = clawpoint(lab, "preempt", workload, "--yes")  # a stop checkpoint: rotating
    assert code == 0, out
    [stop] = listed(lab, workload)
    code, out = clawpoint(lab, "resume", workload, "--yes")
    assert code == 0, out
    wait_step(lab.settings, "busy", 2)
    asked = []
    for _ in range(5):
        code, out = clawpoint(lab, "checkpoint", workload)
        assert code == 0, out
        asked.append(max(listed(lab, workload), key=lambda c: int(c.rsplit("@", 1)[1])))
    # The two newest on request, and the stop checkpoint they never push out.
    assert listed(lab, workload) == {stop: "good", asked[-2]: "good", asked[-1]: "good"}
    lineage = lab.settings.checkpoint_dir / "busy"
    assert len([p for p in lineage.iterdir() if p.name.isdigit()]) == 3


def test_on_request_rotation_keeps_the_newest_good_checkpoint(tmp_path: Path) -> None:
    store = stores.keyed(tmp_path, keep=3, keep_on_request=1)
    good = _publish(store, on_request=True)
    above = [_publish(store, on_request=True), _publish(store, on_request=True)]
    for cid in above:  # bytes flipped on disk: nothing has noticed yet
        flip_bytes(store.images_dir(cid))
    assert store.apply_retention("job") == []
    assert {i.id: i.status for i in store.list("job")} == {
        above[1]: CheckpointStatus.CORRUPT,
        above[0]: CheckpointStatus.CORRUPT,
        good: CheckpointStatus.GOOD,
    }
    fresh = _publish(store, on_request=True)  # now a newer one verifies: the rest may go
    assert sorted(store.apply_retention("job", fresh=fresh)) == sorted([good, *above])


def test_rotation_and_deletion_leave_a_checkpoint_a_restore_holds(tmp_path: Path) -> None:
    store = stores.keyed(tmp_path, keep=3, keep_on_request=1)
    restoring = _publish(store, on_request=True)
    with retention.hold(store, restoring):
        fresh = _publish(store, on_request=True)
        assert store.apply_retention("job", fresh=fresh) == []
        with pytest.raises(errors.Conflict) as caught:
            retention.delete(store, restoring, live=False)
        assert caught.value.code == "checkpoint-in-use"
        assert store.verify(restoring).status is CheckpointStatus.GOOD
    assert store.apply_retention("job", fresh=fresh) == [restoring]


AGENT_CAP = """
[store]
keep_per_workload = 3
keep_on_request = 2

[policy.limits]
agent_checkpoints_per_hour = 10
"""


@pytest.mark.anyio
async def test_an_agents_checkpoints_are_capped_and_rotate_out_none_of_a_persons(
    lab_factory: Callable[[str], Lab],
) -> None:
    lab = lab_factory(AGENT_CAP)
    workload = start_cooperative(lab, "agented")
    code, out = clawpoint(lab, "checkpoint", workload)
    assert code == 0, out
    [persons] = listed(lab, workload)
    agents = []
    async with agent_session(lab, "stdio") as agent:
        for _ in range(4):
            done = await agent.ok("checkpoint_workload", {"workload": workload})
            assert done["status"] == "executed", done
            agents.append(max(listed(lab, workload), key=lambda c: int(c.rsplit("@", 1)[1])))
    # keep_on_request = 2 of the agent's, and the person's, which the agent's never push out.
    assert listed(lab, workload) == {persons: "good", agents[-2]: "good", agents[-1]: "good"}
