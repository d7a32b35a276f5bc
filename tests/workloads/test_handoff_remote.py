"""The cross-node handoff's protocol (``core.wrapper.handoff_remote``) over real TCP on
loopback: a standby takes only an order signed with its key, only once, and never after the
move cancelled it; its rendezvous is the user's alone. (The whole move, on the loopback
Slurm cluster, is tests/slurm/test_live_handoff.py.)"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from core import errors
from core.wrapper import handoff_remote as hr
from core.wrapper.handoff import HandoffOrder

ORDER = HandoffOrder(checkpoint="lin@3", staged="/store/lin/.tmp-3", pipes=[11, 12])


def standby(root: Path, token: str = "a1b2c3") -> hr.TcpStandby:
    return hr.TcpStandby(root, "lin", token, "41", node=None)


def waiting(s: hr.TcpStandby, timeout_s: float = 5.0) -> tuple[threading.Thread, list[object]]:
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(s.wait(timeout_s)))
    t.start()
    return t, got


def raw_send(port: int, line: bytes) -> dict[str, object]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        c.sendall(line + b"\n")
        return dict(json.loads(c.makefile("rb").readline() or b"{}"))


def test_the_rendezvous_is_the_users_alone_and_names_its_source(tmp_path: Path) -> None:
    s = standby(tmp_path)
    try:
        d = tmp_path / hr.RENDEZVOUS_DIR
        f = d / "lin.a1b2c3.waiting.json"
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        assert hr.state_of(tmp_path, "lin", "a1b2c3") == "waiting"
        found = hr.find_waiting(tmp_path, "lin", "41")
        assert found is not None and found.port == s.rendezvous.port
        assert hr.find_waiting(tmp_path, "lin", "42") is None  # another job's move: not ours
        assert hr.find_waiting(tmp_path, "other", "41") is None
    finally:
        s.close()


def test_a_signed_order_is_taken_answered_and_reported(tmp_path: Path) -> None:
    s = standby(tmp_path)
    t, got = waiting(s)
    source = hr.RemoteStandby(hr.find_waiting(tmp_path, "lin", "41"))  # type: ignore[arg-type]
    source.send(ORDER)
    t.join(10)
    assert got == [ORDER]
    assert hr.state_of(tmp_path, "lin", "a1b2c3") == "ordered"
    s.answer(True)
    assert source.answer(5) == (True, "")
    assert hr.state_of(tmp_path, "lin", "a1b2c3") == "taken"
    taken = hr.read(tmp_path, "lin", "a1b2c3", "taken")
    assert taken is not None and taken.checkpoint == "lin@3"
    s.close()


def test_taken_the_standby_job_is_the_workloads_and_its_sources_marker_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Slurm rerun of the job that took over restores the workload (``took_over``); its
    source (here a former standby itself: it has a marker) ended and is never rerun."""
    monkeypatch.setenv("SLURM_JOB_ID", "57")
    # No Slurm here: the relabel after the takeover runs ``scontrol``, which, with no
    # slurm.conf, looks its controller up in DNS (configless mode, an SRV query leaving the
    # machine). This one answers as a scontrol that reaches no controller does.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    calls = tmp_path / "scontrol.calls"
    scontrol.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\necho "scontrol: error: no controller" >&2\nexit 1\n'
    )
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    s = standby(tmp_path)  # standing by for job 41
    (tmp_path / hr.RENDEZVOUS_DIR / "lin.job-41").touch()
    assert not hr.took_over(tmp_path, "lin")
    t, _ = waiting(s)
    hr.RemoteStandby(s.rendezvous).send(ORDER)
    t.join(10)
    s.answer(True)
    s.close()
    assert hr.took_over(tmp_path, "lin")
    assert sorted(p.name for p in (tmp_path / hr.RENDEZVOUS_DIR).glob("lin.job-*")) == [
        "lin.job-57"
    ]
    # The relabel of its own job runs beside the restore; wait for it while PATH still
    # holds the stand-in (it asked about job 57, got no answer, changed nothing).
    for thread in threading.enumerate():
        if thread.name == "relabel":
            thread.join(15)
    assert calls.read_text().splitlines() == ["show job -o 57"]
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert hr.is_rerun()


@pytest.mark.parametrize(
    "line",
    [
        b'{"order": {"checkpoint": "lin@1"}, "mac": "00"}',  # a guessed key
        b'{"order": {"checkpoint": "lin@1"}}',  # none
        b"not json",
    ],
)
def test_an_order_not_signed_with_its_key_is_refused_and_it_waits_on(
    tmp_path: Path, line: bytes
) -> None:
    """Another user on the node, or anything on the network, cannot make the standby
    restore (a second copy while the source runs): refused, still waiting for its source."""
    s = standby(tmp_path)
    t, got = waiting(s)
    said = raw_send(s.rendezvous.port, line)
    assert "refused" in said, said
    assert hr.state_of(tmp_path, "lin", "a1b2c3") == "waiting"
    hr.RemoteStandby(s.rendezvous).send(ORDER)  # the real source, after that
    t.join(10)
    assert got == [ORDER]
    s.close()


def test_peers_that_send_nothing_do_not_hold_up_the_sources_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port scan or a stray health check connects first and says nothing; the source,
    its workload paused, must not wait behind it. With each peer given 10 minutes to send
    its line, only reading them all at once takes the order within the standby's wait."""
    monkeypatch.setattr(hr, "ORDER_READ_S", 600.0)
    s = standby(tmp_path)
    t, got = waiting(s, 20)
    silent = [socket.create_connection(("127.0.0.1", s.rendezvous.port)) for _ in range(3)]
    try:
        source = hr.RemoteStandby(s.rendezvous)
        source.send(ORDER)
        t.join(30)
        assert got == [ORDER]
        s.answer(True)
        assert source.answer(5) == (True, "")
        # the silent ones were let go, unanswered, once the order was taken
        for c in silent:
            c.settimeout(5)
            assert c.recv(100) == b""
    finally:
        for c in silent:
            c.close()
        s.close()


def test_a_peer_that_sends_nothing_in_time_is_told_so_and_the_standby_waits_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hr, "ORDER_READ_S", 0.3)
    s = standby(tmp_path)
    t, got = waiting(s, 20)
    with socket.create_connection(("127.0.0.1", s.rendezvous.port), timeout=10) as silent:
        said = json.loads(silent.makefile("rb").readline() or b"{}")
    assert "sent no order within 0.3 s" in said.get("refused", ""), said
    assert hr.state_of(tmp_path, "lin", "a1b2c3") == "waiting"
    hr.RemoteStandby(s.rendezvous).send(ORDER)
    t.join(30)
    assert got == [ORDER]
    s.close()


def test_an_order_signed_for_another_standby_is_refused(tmp_path: Path) -> None:
    """The signature covers the token: an order meant for one standby (say, of an earlier
    move) does not work on another that happens to share its key."""
    s = standby(tmp_path)
    t, got = waiting(s, 1.5)
    other = s.rendezvous.model_copy(update={"token": "ffff00"})
    sender = hr.RemoteStandby(other)
    sender.send(ORDER)
    assert sender.answer(5)[0] is False
    t.join(10)
    assert got == [None]
    s.close()


def test_a_cancelled_standby_refuses_the_order_and_a_claimed_one_cannot_be_cancelled(
    tmp_path: Path,
) -> None:
    """The claim and the cancel are the same rename: exactly one wins."""
    s = standby(tmp_path)
    assert hr.move(tmp_path, "lin", "a1b2c3", "waiting", "cancelled")
    t, got = waiting(s)
    sender = hr.RemoteStandby(s.rendezvous)
    sender.send(ORDER)
    taken, why = sender.answer(5)
    t.join(10)
    assert got == [None] and not taken and "cancelled" in why
    assert s.state == "cancelled" and hr.state_of(tmp_path, "lin", "a1b2c3") is None

    claimed = standby(tmp_path, "c0ffee")
    t, got = waiting(claimed)
    hr.RemoteStandby(claimed.rendezvous).send(ORDER)
    t.join(10)
    assert got == [ORDER]
    assert not hr.move(tmp_path, "lin", "c0ffee", "waiting", "cancelled")
    assert hr.state_of(tmp_path, "lin", "c0ffee") == "ordered"
    claimed.answer(False, "restore failed")
    assert hr.state_of(tmp_path, "lin", "c0ffee") == "failed"
    claimed.close()


def test_a_standby_without_an_order_expires_and_leaves_nothing(tmp_path: Path) -> None:
    s = standby(tmp_path)
    assert s.wait(0.3) is None
    assert s.state == "expired"
    assert hr.state_of(tmp_path, "lin", "a1b2c3") is None
    s.close()


def test_a_standby_that_ended_without_answering_says_so(tmp_path: Path) -> None:
    """Its restore raised before it answered: the source hears "not taken" at once (it then
    publishes for the move's restart) instead of waiting out its timeout."""
    s = standby(tmp_path)
    t, _ = waiting(s)
    sender = hr.RemoteStandby(s.rendezvous)
    sender.send(ORDER)
    t.join(10)
    s.close()
    taken, why = sender.answer(5)
    assert not taken and "ended before its restore finished" in why


def test_no_standby_listening_is_a_clear_conflict(tmp_path: Path) -> None:
    s = standby(tmp_path)
    r = s.rendezvous
    s.close()
    with pytest.raises(errors.Conflict) as refused:
        hr.RemoteStandby(r, connect_timeout_s=2)
    assert "nothing is lost" in refused.value.hint


def test_bad_tokens_and_jobs_are_refused_before_anything_listens(tmp_path: Path) -> None:
    for token, job in (("../x", "41"), ("a1b2c3", "41;rm")):
        with pytest.raises(errors.InvalidInput):
            hr.TcpStandby(tmp_path, "lin", token, job, node=None)
    assert not (tmp_path / hr.RENDEZVOUS_DIR).exists()


@pytest.mark.parametrize("plant", ["another user's file", "a link"])
def test_a_source_never_uses_a_rendezvous_another_user_planted(tmp_path: Path, plant: str) -> None:
    # Whoever else can write the directory (the other pods of a shared checkpoint volume)
    # must not steer the workload to a listener of theirs: a source takes only a regular
    # file of its own user, whatever it says.
    s = standby(tmp_path)
    try:
        f = tmp_path / hr.RENDEZVOUS_DIR / "lin.a1b2c3.waiting.json"
        assert hr.find_named(tmp_path, "lin", "a1b2c3") is not None  # its own: used
        if plant == "a link":
            real = tmp_path / "elsewhere.json"
            f.rename(real)
            f.symlink_to(real)
        elif os.geteuid() == 0:
            os.chown(f, 4242, 4242)
        else:
            pytest.skip("making a file of another user needs root")
        assert hr.find_named(tmp_path, "lin", "a1b2c3") is None
        assert hr.find_waiting(tmp_path, "lin", "41") is None
    finally:
        s.close()
