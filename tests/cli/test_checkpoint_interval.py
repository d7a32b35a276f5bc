"""``clawpoint checkpoint-interval``: the installed console script on a real local workload.

A workload started without periodic checkpoints gets one every 2 s and its checkpoint list
grows; ``off`` stops them; bad values are refused with exit 2 and change nothing; the
interval survives a preempt and a resume (set while stopped, it applies when it runs again);
a killed workload is refused. Lengthening needs a person's confirmation (exit 6 without
``--yes``), shortening does not.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from core import errors
from core.wrapper.control import ControlClient
from tests.cli.conftest import Cli


def _newest_seq(cli: Cli, ref: str) -> int:
    """The newest checkpoint's sequence number as ``clawpoint checkpoints REF`` lists it."""
    r = cli("checkpoints", ref, "--json")
    assert r.code == 0, str(r)
    return max((int(c["seq"]) for c in r.json()), default=0)


def _last_seq(cli: Cli, ref: str) -> int:
    last = cli.workload(ref)["last_checkpoint"]
    return int(last.rpartition("@")[2]) if last else 0


def _await_checkpoints(cli: Cli, ref: str, after: int, count: int, timeout_s: float) -> float:
    """Wait until ``count`` checkpoints newer than seq ``after`` exist; seconds it took."""
    t0 = time.monotonic()
    while _last_seq(cli, ref) < after + count:
        assert time.monotonic() - t0 < timeout_s, f"{ref}: no {count} new checkpoints"
        time.sleep(0.2)
    return time.monotonic() - t0


def _set(cli: Cli, ref: str, every: str, *more: str) -> dict[str, Any]:
    r = cli("checkpoint-interval", ref, "--every", every, "--json", *more)
    assert r.code == 0, str(r)
    out: dict[str, Any] = r.json()
    assert out["status"] == "executed", out
    return out


def test_two_seconds_starts_periodic_checkpoints_and_off_stops_them(cli: Cli) -> None:
    ref = cli.start_counter("tick")
    assert cli.workload(ref)["checkpoint_every"] is None
    time.sleep(3)
    assert _newest_seq(cli, ref) == 0  # started with none: nothing periodic

    out = _set(cli, ref, "2s")  # shorter than none: safe, no confirmation asked
    assert out["plan"]["risk"] == "safe", out
    assert out["plan"]["params"] == {"every": "2s"}
    took = _await_checkpoints(cli, ref, 0, 3, timeout_s=40)
    assert took >= 4.0, f"3 checkpoints 2 s apart came in {took:.1f} s"
    assert _newest_seq(cli, ref) >= 3
    assert cli.workload(ref)["checkpoint_every"] == 2.0

    r = cli("checkpoint-interval", ref, "--every", "off")  # off: disruptive, not confirmed
    assert r.code == 6 and "disruptive" in r.stdout + r.stderr, str(r)
    out = _set(cli, ref, "off", "--yes")
    assert out["plan"]["risk"] == "disruptive", out
    assert cli.workload(ref)["checkpoint_every"] is None
    # A checkpoint under way when it was turned off may still publish: let it (a loaded
    # machine can take more than a second over it).
    time.sleep(1)
    deadline = time.monotonic() + 60
    while cli.workload(ref)["state"] == "checkpointing":
        assert time.monotonic() < deadline, "a checkpoint that never ends"
        time.sleep(0.2)
    before = _newest_seq(cli, ref)
    time.sleep(5)
    assert _newest_seq(cli, ref) == before, "a periodic checkpoint after off"


@pytest.mark.parametrize(
    ("every", "said"),
    [("-5", "is not a duration"), ("abc", "is not a duration"), ("1s", "shorter than 2s"),
     ("0", "shorter than 2s"), ("2d", "longer than 1d")],
)  # fmt: skip
def test_bad_interval_is_refused_and_changes_nothing(cli: Cli, every: str, said: str) -> None:
    ref = cli.start_counter("bad")
    _set(cli, ref, "1h")
    r = cli("checkpoint-interval", ref, f"--every={every}", "--yes")
    assert r.code == 2, str(r)
    text = r.stdout + r.stderr
    assert "--every" in text and repr(every) in text and said in text, text
    assert "30s, 10m or 2h" in text and "off" in text, text  # how to write it
    assert cli.workload(ref)["checkpoint_every"] == 3600.0


def test_lengthening_asks_a_person(cli: Cli) -> None:
    ref = cli.start_counter("long")
    _set(cli, ref, "10m")
    r = cli("checkpoint-interval", ref, "--every", "1h")
    assert r.code == 6 and "disruptive" in r.stdout + r.stderr, str(r)
    assert cli.workload(ref)["checkpoint_every"] == 600.0
    assert _set(cli, ref, "5m")["plan"]["risk"] == "safe"  # shorter: no confirmation
    assert cli.workload(ref)["checkpoint_every"] == 300.0


def test_interval_persists_across_preempt_and_resume(cli: Cli) -> None:
    ref = cli.start_counter("keep")
    _set(cli, ref, "1h")
    assert cli("preempt", ref, "--yes").code == 0
    row = cli.workload(ref)
    assert row["state"] == "stopped" and row["checkpoint_every"] == 3600.0, row
    # Set while stopped: recorded, and in force when it runs again.
    out = _set(cli, ref, "2s")
    step = out["execution"]["steps"][0]["output"]
    assert step["live"] is False and step["checkpoint_every"] == 2.0, step
    stopped_at = _newest_seq(cli, ref)
    r = cli("resume", ref, "--yes")
    assert r.code == 0, str(r)
    assert cli.workload(ref)["checkpoint_every"] == 2.0
    _await_checkpoints(cli, ref, stopped_at, 2, timeout_s=40)
    assert _newest_seq(cli, ref) >= stopped_at + 2


def test_a_killed_workload_is_refused(cli: Cli) -> None:
    ref = cli.start_counter("gone")
    assert cli("kill", ref, "--yes").code == 0
    r = cli("checkpoint-interval", ref, "--every", "2s", "--yes")
    assert r.code == 10 and "killed" in r.stdout + r.stderr, str(r)
    r = cli("checkpoint-interval", "local:nosuch", "--every", "2s", "--yes")
    assert r.code == 3, str(r)


def test_the_wrapper_takes_only_a_time_on_its_socket(cli: Cli) -> None:
    """The control socket's ``interval`` op (what the step sends): a non-number or a
    non-positive value is refused and the wrapper keeps its interval; a number is in force
    at once and answered with when the next checkpoint is due."""
    ref = cli.start_counter("sock")
    client = ControlClient(cli.home / "run" / "sock.sock")
    for bad in ("abc", -1, 0, True, float("inf")):
        with pytest.raises(errors.InvalidInput, match="positive number of seconds"):
            client.set_interval(bad)  # type: ignore[arg-type]
    before = _last_seq(cli, ref)
    assert client.set_interval(2.0) == {"checkpoint_every": 2.0, "next_in_s": 2.0}
    _await_checkpoints(cli, ref, before, 1, timeout_s=30)
    assert client.set_interval(None) == {"checkpoint_every": None, "next_in_s": None}
