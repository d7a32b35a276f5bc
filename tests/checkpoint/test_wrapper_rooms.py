"""The wrapper's rooms and the helpers they share: ``core.polling.poll_until`` (every wait),
``core.wrapper.progress`` (the progress file the wrapper and the restore watch read), and
``HandoffSource``'s one "publish, else resume; then end" for both handoff variants."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from core import errors
from core.checkpoint import ops
from core.config import load_settings
from core.polling import poll_until
from core.specs import RunSpec
from core.wrapper import connection_hold, handoff, handoff_source, payload
from core.wrapper.handoff_source import HandoffSource
from core.wrapper.progress import TEMP_MAX_BYTES, TEMP_MAX_FILES, ProgressFile, Stamp

ROOT = Path(__file__).resolve().parents[2]

# -- poll_until ------------------------------------------------------------------------------


def test_poll_until_returns_the_first_truthy_answer() -> None:
    answers = iter([None, 0, "", "there", "later"])
    assert poll_until(lambda: next(answers), timeout_s=5, every_s=0.001) == "there"


def test_poll_until_gives_none_at_the_deadline_after_a_last_look() -> None:
    calls: list[float] = []
    started = time.monotonic()
    assert poll_until(lambda: calls.append(time.monotonic()), timeout_s=0.1, every_s=0.02) is None
    assert calls[-1] - started >= 0.1  # the last call is at or after the deadline
    assert time.monotonic() - started < 2


def test_poll_until_with_no_time_asks_exactly_once() -> None:
    calls: list[int] = []
    assert poll_until(lambda: calls.append(1), timeout_s=0, every_s=10) is None
    assert calls == [1]


def test_poll_until_backs_off_up_to_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    answers = iter([False] * 6 + [True])
    assert poll_until(lambda: next(answers), timeout_s=60, every_s=0.01, max_every_s=0.05)
    assert slept == [0.01, 0.02, 0.04, 0.05, 0.05, 0.05]


def test_poll_until_lets_the_checks_error_through() -> None:
    def check() -> bool:
        raise errors.Conflict("gone", hint="h")

    with pytest.raises(errors.Conflict):
        poll_until(check, timeout_s=5, every_s=0.01)


# -- the progress file -----------------------------------------------------------------------


def test_a_report_is_new_only_after_the_mark(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / "home")
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    progress = ProgressFile.of(settings, "w")
    assert progress.path == settings.run_dir / "w.progress.json"
    assert progress.stamp() is None and progress.read() is None
    assert progress.report_since(None) is None  # no file: no report

    progress.path.write_text('{"step": 3}')
    mark = progress.stamp()
    assert mark is not None and progress.read() == {"step": 3}
    assert progress.report_since(mark) is None  # the report from before the restore
    tmp = progress.path.with_suffix(".tmp")
    tmp.write_text('{"step": 4}')
    os.replace(tmp, progress.path)  # the protocol's atomic replacement: a new inode
    assert progress.report_since(mark) == {"step": 4}

    progress.path.write_text("[1, 2]")  # not an object: no report
    assert progress.read() is None


def test_the_temporary_files_of_a_report_are_named_to_each_checkpoint(tmp_path: Path) -> None:
    """``side_files``: None until the payload speaks the protocol (its dump need not stay
    frozen); then the files beside the report named after it, none of ours, none large."""
    settings = load_settings(tmp_path / "home")
    run = settings.run_dir
    run.mkdir(parents=True, exist_ok=True)
    progress = ProgressFile.of(settings, "w")
    (run / "other.progress.json.tmp").write_text("{}")  # another workload's
    assert progress.side_files() is None
    mine = [run / ".w.progress.json.41.tmp", run / "w.progress.json.tmp", run / ".w.progress.json"]
    for path in mine:
        path.write_text('{"step": 1}')
    (run / ".w.progress.json.clawpoint-restore-9").write_text("{}")  # ours, mid put-back
    (run / "w.progress.json.after-w@3").write_text("{}")  # ours, a rewound file's later bytes
    (run / "w.progress.json.big").write_bytes(b"x" * (TEMP_MAX_BYTES + 1))
    (run / "w.progress.json.d").mkdir()
    (run / "w.log").write_text("")
    listed = progress.side_files()
    assert listed is not None and sorted(listed()) == sorted(mine)
    for path in mine:
        path.unlink()
    progress.path.write_text('{"step": 2}')  # the report alone: it speaks the protocol
    listed = progress.side_files()
    assert listed is not None and listed() == []
    leftovers = [run / f".w.progress.json.{pid}.tmp" for pid in range(TEMP_MAX_FILES + 4)]
    for i, path in enumerate(leftovers):  # runs that died between write and rename
        path.write_text("{}")
        os.utime(path, ns=(i * 10**9, i * 10**9))
    assert sorted(listed()) == sorted(leftovers[4:])  # the newest only


def test_a_stamp_survives_its_trip_through_json() -> None:
    stamp = Stamp(12, 34)
    assert Stamp.parse([12, 34]) == stamp and Stamp.parse(list(stamp)) == stamp
    for junk in (None, [1], [1, 2, 3], ["a", 2], "12,34", {"inode": 1}):
        assert Stamp.parse(junk) is None


# -- publish, else resume; then end ------------------------------------------------------------


class _Engine:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def resume(self, pid: int) -> None:
        self.calls.append("resume")

    def end(self, pid: int, exited: threading.Event) -> None:
        self.calls.append("end")
        exited.set()


class _Registry:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def update(self, name: str, **fields: Any) -> None:
        self.rows.append(fields)

    def get(self, name: str) -> None:
        return None


def _source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, carries_files: bool, publish_fails: bool
) -> tuple[HandoffSource, _Engine, _Registry, list[str]]:
    settings = load_settings(tmp_path / "home")
    spec = RunSpec(name="w", command=["true"], home=str(settings.home))
    eng, registry, released = _Engine(), _Registry(), []
    staged = SimpleNamespace(
        carries_files=carries_files,
        pending=SimpleNamespace(id="w@1", images_dir=tmp_path / "images"),
    )

    def publish(store: object, s: object) -> Any:
        eng.calls.append("publish")
        if publish_fails:
            raise errors.CheckpointError("disk full", hint="h")
        return SimpleNamespace(id="w@1")

    monkeypatch.setattr(ops, "stage", lambda *a, **k: staged)
    monkeypatch.setattr(ops, "publish_staged", publish)
    # This process is no server to hold (the connection tests hold real ones).
    monkeypatch.setattr(connection_hold, "start", lambda *a, **k: (None, "not held: a test"))
    monkeypatch.setattr(handoff_source, "TAKEOVER_WAIT_S", 0.2)  # nobody takes it over here
    fakes: tuple[Any, Any, Any] = (object(), eng, registry)
    source = HandoffSource(settings, spec, *fakes, lambda: released.append("lock"))
    return source, eng, registry, released


@pytest.mark.parametrize("carries_files", [False, True])
def test_a_failed_publish_lets_the_frozen_workload_run_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, carries_files: bool
) -> None:
    """No standby of this workload (the plain stop), or a checkpoint that carries files (published
    before the handoff): either way a publish that fails resumes the tree, never ends it."""
    source, eng, registry, released = _source(
        tmp_path, monkeypatch, carries_files=carries_files, publish_fails=True
    )
    to = {"socket": "w.standby-abc.sock"} if carries_files else {"socket": "other.sock"}
    with pytest.raises(errors.CheckpointError):
        source.hand_over(
            payload.Payload(os.getpid(), None), to, pipes=[], progress=None,
            abort=threading.Event(),
        )  # fmt: skip
    assert eng.calls == ["publish", "resume"]
    assert not source.handed_off and not released and not registry.rows


def test_no_standby_publishes_then_ends_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, eng, registry, released = _source(
        tmp_path, monkeypatch, carries_files=False, publish_fails=False
    )
    info, said = source.hand_over(
        payload.Payload(os.getpid(), None), {"socket": "other.sock"}, pipes=[], progress=None,
        abort=threading.Event(),
    )  # fmt: skip
    assert info.id == "w@1" and said == "not sent: other.sock is no standby of w"
    assert eng.calls == ["publish", "end"]
    assert not source.handed_off and not released and not registry.rows  # the plain stop


def test_a_checkpoint_with_files_is_staged_and_handed_over_like_any_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its file copies travel with the staged images; nothing is published while frozen (the
    standby puts nothing back: the files are as the frozen tree left them)."""
    source, eng, registry, released = _source(
        tmp_path, monkeypatch, carries_files=True, publish_fails=False
    )
    source.settings.run_dir.mkdir(parents=True, exist_ok=True)
    standby = handoff.Standby(source.settings.run_dir / "w.standby-abc.sock")
    try:
        info, said = source.hand_over(
            payload.Payload(os.getpid(), None), {"socket": "w.standby-abc.sock"}, pipes=[7],
            progress=None, abort=threading.Event(),
        )  # fmt: skip
        order = standby.wait(1)
    finally:
        standby.close()
    assert said == "sent" and source.handed_off and info.id == "w@1"
    assert eng.calls == ["end", "publish"]  # published after the handover, not before
    assert order is not None and order.staged == str(tmp_path / "images"), order
    assert (order.checkpoint, order.pipes) == ("w@1", [7])
    assert released == ["lock"] and registry.rows[-1]["last_checkpoint"] == "w@1"


# -- the rooms stay rooms ------------------------------------------------------------------------


def test_no_wrapper_module_grows_past_600_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "core/wrapper").glob("*.py")}
    assert max(sizes.values()) <= 600, sizes


def test_waits_go_through_poll_until() -> None:
    """No hand-written sleep loop is left where the file and process waits were."""
    for rel in (
        "core/wrapper/supervisor.py", "core/wrapper/handoff.py", "core/wrapper/handoff_source.py",
        "core/wrapper/handoff_target.py", "core/wrapper/launch.py", "core/wrapper/fence.py",
        "core/wrapper/payload.py", "core/backends/local/verify.py",
        "core/backends/local/backend.py", "core/backends/local/starting.py",
        "core/backends/local/steps.py", "core/backends/local/recovery.py",
        "core/checkpoint/lazy_pages.py",
        "core/checkpoint/cooperative.py",
    ):  # fmt: skip
        assert "time.sleep(" not in (ROOT / rel).read_text(), rel
