"""``clawpoint checkpoint-interval WORKLOAD --every auto``: the installed console script on a
real workload under real CRIU.

The test's ``[economics]`` makes the interval that pays a few seconds (a spot node reclaimed
about every 2 minutes; bounds 1 s .. 20 s). After ``auto`` the wrapper re-times its periodic
checkpoints after each one it makes: the interval it records after each checkpoint is the
recommendation for the costs of its own checkpoints so far (``core.wrapper.auto_interval``,
the planner's ``recommend``), and the next checkpoint comes that long after. The mode
survives a preempt and a resume: the new wrapper says it is auto and re-times from its own
first checkpoint. Bad values still exit 2 and name ``auto`` among the forms; the wrapper's
socket takes an auto request only whole.
"""

from __future__ import annotations

import sys
import time

import pytest

from core import errors
from core.model import CheckpointInfo
from core.specs import AutoInterval
from core.store.store import CheckpointStore
from core.wrapper.auto_interval import advise, clamp
from core.wrapper.control import ControlClient
from tests.cli.conftest import Cli

pytestmark = pytest.mark.criu

AUTO = AutoInterval(mtbf_h=0.02, min_s=1.0, max_s=20.0)  # node-b is the spot node
CONFIG = f"""
[economics]
spot_mtbf_h = {AUTO.mtbf_h}
min_interval_s = {AUTO.min_s}
max_interval_s = {AUTO.max_s}

[store]
keep_per_workload = 30
"""


def _start(cli: Cli, name: str) -> str:
    """A 1 MiB counter under CRIU on the spot node, with no periodic checkpoints."""
    r = cli("run", "--name", name, "--node", "node-b", "--detach", "--", sys.executable, "-m",
            "core.workloads.counter", "--state-mb", "1", "--step-seconds", "0.05")  # fmt: skip
    assert r.code == 0, str(r)
    return f"local:{name}"


def _seq(checkpoint: str | None) -> int:
    return int(checkpoint.rpartition("@")[2]) if checkpoint else 0


def _follow(cli: Cli, ref: str, count: int, timeout_s: float) -> dict[int, float]:
    """Poll the workload's row until ``count`` more checkpoints are made; the interval the
    wrapper recorded with each one (seq -> seconds)."""
    seen: dict[int, float] = {}
    first = _seq(cli.workload(ref)["last_checkpoint"])
    deadline = time.monotonic() + timeout_s
    while len([s for s in seen if s > first]) < count:
        assert time.monotonic() < deadline, f"{ref}: {count} checkpoints not made, saw {seen}"
        row = cli.workload(ref)
        seen[_seq(row["last_checkpoint"])] = row["checkpoint_every"]
        time.sleep(0.05)
    return {s: every for s, every in seen.items() if s > first}


def _check_follows(cli: Cli, ref: str, seen: dict[int, float], first_own: int) -> None:
    """Each recorded interval is what the wrapper's own checkpoints so far call for (the
    store's manifests lack the reply's total time: a little slack), and the next checkpoint
    came that long after the previous one."""
    store = CheckpointStore(cli.home / "checkpoints")
    name = ref.partition(":")[2]
    by_seq = {c.seq: c for c in store.list(name)}
    for seq, every in sorted(seen.items()):
        own = [by_seq[s] for s in sorted(by_seq, reverse=True) if first_own <= s <= seq][:10]
        advice = advise(AUTO, own)
        assert advice is not None, own
        assert every == pytest.approx(clamp(AUTO, advice.interval_s), abs=0.3, rel=0.1), seq
        nxt = by_seq.get(seq + 1)
        if nxt is None or seq + 1 not in seen:
            continue
        # created_at is stamped as a checkpoint is published: the gap between two is the
        # interval plus the end of the first one's publish and the second one's dump.
        extra = sum(float(c.timings.get(k, 0)) for c in (by_seq[seq], nxt)
                    for k in ("criu_dump_s", "publish_s"))  # fmt: skip
        gap = _at(nxt) - _at(by_seq[seq])
        assert every - 0.1 <= gap <= every + extra + 1.5, (seq, every, gap)


def _at(c: CheckpointInfo) -> float:
    return c.created_at.timestamp()


def _auto(cli: Cli, name: str) -> str:
    """Start a counter and set its interval to auto (off today: safe, no confirmation)."""
    cli.config(CONFIG)
    ref = _start(cli, name)
    r = cli("checkpoint-interval", ref, "--every", "auto", "--json")
    assert r.code == 0, str(r)
    out = r.json()
    plan = out["plan"]
    assert out["status"] == "executed" and plan["risk"] == "safe", out
    assert plan["params"] == {"every": "auto"} and "cap 20s" in plan["summary"], plan
    step = out["execution"]["steps"][0]["output"]
    assert step["auto"] is True and step["live"] is True, step
    assert step["checkpoint_every"] == AUTO.min_s  # nothing measured yet: the shortest
    assert cli.workload(ref)["checkpoint_auto"] is True
    return ref


def test_auto_follows_the_interval_that_pays(cli: Cli) -> None:
    ref = _auto(cli, "pays")
    seen = _follow(cli, ref, 4, timeout_s=30)
    assert len(set(seen.values()) | {AUTO.min_s}) > 1, seen  # re-timed from the start
    _check_follows(cli, ref, seen, first_own=1)


def test_auto_survives_preempt_and_resume(cli: Cli) -> None:
    ref = _auto(cli, "keeps")
    _follow(cli, ref, 1, timeout_s=20)
    assert cli("preempt", ref, "--yes").code == 0
    row = cli.workload(ref)
    assert row["state"] == "stopped" and row["checkpoint_auto"] is True, row
    stopped_at = _seq(row["last_checkpoint"])
    assert cli("resume", ref, "--yes").code == 0
    said = ControlClient(cli.home / "run" / "keeps.sock").status()
    assert said["auto"] is True, said  # the restored wrapper re-times too
    assert cli.workload(ref)["checkpoint_auto"] is True  # and its row says so
    if _seq(said["last_checkpoint"]) == stopped_at:  # none of its own yet: where it was
        assert said["checkpoint_every"] == row["checkpoint_every"], said
    seen = _follow(cli, ref, 2, timeout_s=20)
    _check_follows(cli, ref, seen, first_own=stopped_at + 1)


def test_auto_is_among_the_forms_a_bad_value_names(cli: Cli) -> None:
    ref = _start(cli, "forms")
    r = cli("checkpoint-interval", ref, "--every", "automatic", "--yes")
    assert r.code == 2, str(r)
    text = r.stdout + r.stderr
    assert "--every" in text and "'automatic' is not a duration" in text, text
    assert "auto" in text.replace("automatic", ""), text
    assert not cli.workload(ref).get("checkpoint_auto")


def test_the_wrapper_takes_auto_only_whole_with_a_time_to_start_from(cli: Cli) -> None:
    """The socket's ``interval`` op with ``auto`` (what the step sends): a malformed hazard
    or bounds, or no time to start from, is refused and the wrapper keeps its interval."""
    ref = cli.start_counter("sockauto")
    client = ControlClient(cli.home / "run" / "sockauto.sock")
    good = AUTO.model_dump()
    for every, auto in ((5.0, {**good, "mtbf_h": -1}), (5.0, {**good, "min_s": 30}),
                        (5.0, {"mtbf_h": 1}), (5.0, "auto"), (None, good)):  # fmt: skip
        with pytest.raises(errors.InvalidInput, match="auto interval needs"):
            client.set_interval(every, auto)  # type: ignore[arg-type]
    said = client.status()
    assert (said["auto"], said["checkpoint_every"]) == (False, None), said
    assert client.set_interval(3600.0, good)["auto"] is True
    assert not cli.workload(ref).get("checkpoint_auto")  # the row is the step's to write
