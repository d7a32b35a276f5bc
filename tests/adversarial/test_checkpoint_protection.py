"""Checkpoints are protected by their goodness, not their age, against an agent's safe calls.

- With a corrupt checkpoint above it, the newest *good* checkpoint is still the protected one:
  an agent's delete of it is denied outright (not even offered to a person).
- An agent's "safe" ``checkpoint_workload`` calls never rotate older checkpoints out through
  retention (before, ``keep`` of them deleted everything older, with no person asked), and
  they are limited per workload per hour (each one pauses the workload).
- Retention itself, on a real store with bytes flipped on disk, never deletes the newest
  checkpoint that verifies.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from core.model import Action, CheckpointStatus
from core.store.disk import ON_REQUEST
from core.store.store import CheckpointStore
from tests.adversarial.conftest import PERSON, TRANSPORTS, Lab, agent_session
from tests.checkpoint import stores

CONFIG = """
[store]
keep_per_workload = 2

[policy.limits]
agent_checkpoints_per_hour = 3
"""


def ids(lab: Lab, workload: str) -> list[str]:
    return [c.id for c in lab.service.checkpoints(workload)]


def flip_bytes(images: Path) -> None:
    """Corrupt a checkpoint on disk the way a bad disk would: same size, different bytes."""
    victim = max(images.iterdir(), key=lambda p: p.stat().st_size)
    with victim.open("r+b") as f:
        f.seek(victim.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.anyio
@pytest.mark.criu
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_agent_checkpoints_rotate_nothing_out_and_are_rate_limited(
    lab_factory: Callable[[str], Lab], transport: str, need_criu: None
) -> None:
    lab = lab_factory(CONFIG)
    workload = lab.start("precious")
    person = lab.service.act(Action.CHECKPOINT, workload, {}, principal=PERSON)
    assert person.status == "executed", person.message
    [kept] = ids(lab, workload)
    async with agent_session(lab, transport) as agent:
        for _ in range(3):
            out = await agent.ok("checkpoint_workload", {"workload": workload})
            assert out["status"] == "executed", out
        # keep_per_workload = 2, yet the person's checkpoint is still there: nothing rotated.
        assert len(ids(lab, workload)) == 4 and kept in ids(lab, workload)
        out = await agent.ok("checkpoint_workload", {"workload": workload})
        assert out["status"] == "denied", out
        assert "3 per workload per hour" in out["message"]
        assert f"clawpoint checkpoint {workload}" in out["message"]
        assert out.get("approval") is None
    assert len(ids(lab, workload)) == 4
    # The limit is the agents': a person may still checkpoint it.
    again = lab.service.act(Action.CHECKPOINT, workload, {}, principal=PERSON)
    assert again.status == "executed", again.message
    assert kept in ids(lab, workload)
    decisions = [e.data.get("rule_id") for e in lab.service.audit.entries() if e.kind == "decision"]
    assert "limit:agent-checkpoints" in decisions


@pytest.mark.anyio
@pytest.mark.criu
async def test_newest_good_checkpoint_is_protected_under_a_corrupt_newer_one(
    lab: Lab, need_criu: None
) -> None:
    workload = lab.start("layered")
    for _ in range(2):
        result = lab.service.act(Action.CHECKPOINT, workload, {}, principal=PERSON)
        assert result.status == "executed", result.message
    newest, good = ids(lab, workload)
    lineage_dir = lab.settings.checkpoint_dir / "layered"
    flip_bytes(lineage_dir / f"{int(newest.rsplit('@', 1)[1]):08d}" / "images")
    async with agent_session(lab, "stdio") as agent:
        out = await agent.ok("delete_checkpoint", {"checkpoint": good})
        assert out["status"] == "denied", out
        assert "newest good checkpoint" in out["message"] and out.get("approval") is None
        # The corrupt one above it is no protection: deleting that one goes to a person.
        out = await agent.ok("delete_checkpoint", {"checkpoint": newest})
        assert out["status"] == "approval_required", out
    assert ids(lab, workload) == [newest, good]
    statuses = {c.id: c.status for c in lab.service.checkpoints(workload)}
    assert statuses == {newest: CheckpointStatus.CORRUPT, good: CheckpointStatus.GOOD}


def _publish(store: CheckpointStore, *, on_request: bool = False) -> str:
    pending = store.begin("job", engine="test", node=None)
    (pending.images_dir / "state.img").write_bytes(b"state %d " % pending.seq * 4096)
    extra = {ON_REQUEST: True} if on_request else {}
    info = store.publish(pending, timings={}, leave_running=True, extra=extra)
    return info.id


def test_retention_never_deletes_the_newest_checkpoint_that_verifies(tmp_path: Path) -> None:
    store = stores.keyed(tmp_path, keep=1)
    only_good = _publish(store)
    above = [_publish(store), _publish(store)]
    for cid in above:  # bytes flipped on disk: nothing has noticed yet
        flip_bytes(store.images_dir(cid))
    assert store.apply_retention("job") == []
    assert store.verify(only_good).status is CheckpointStatus.GOOD
    assert {i.id: i.status for i in store.list("job")} == {
        above[1]: CheckpointStatus.CORRUPT,
        above[0]: CheckpointStatus.CORRUPT,
        only_good: CheckpointStatus.GOOD,
    }


def test_checkpoints_on_request_rotate_nothing_out(tmp_path: Path) -> None:
    store = stores.keyed(tmp_path, keep=1)
    scheduled = _publish(store)
    for _ in range(3):  # what an agent's checkpoint_workload calls leave behind
        fresh = _publish(store, on_request=True)
        assert store.apply_retention("job", fresh=fresh) == []
    assert scheduled in [i.id for i in store.list("job")]
    # The workload's own schedule still rotates, on-request ones included, to keep = 1.
    newest = _publish(store)
    assert sorted(store.apply_retention("job", fresh=newest)) != []
    assert [i.id for i in store.list("job")] == [newest]
