"""The tmpfs staging area of a handoff's dump (``core.store.staging``): used only when there
is room, recognised only where configured, private to the uid (a trap laid under its name
is refused, never used), swept when a killed process left it (at any wrapper's start) without
following a symlink, and its links checked before a standby restores from them.

Run as root here; ``test_staging_tenants.py`` plays the same attacks as real other users."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from core import errors
from core.config import load_settings
from core.specs import RunSpec
from core.store import staging
from core.wrapper import supervisor


def _age(path: Path, seconds: float = staging.STALE_S + 5) -> None:
    old = time.time() - seconds
    os.utime(path, (old, old), follow_symlinks=False)


def _area(tmp_path: Path) -> Path:
    area = staging.base(str(tmp_path))
    assert area is not None and area.name == f"clawpoint-staging-{os.geteuid()}"
    return area


def test_allocates_only_with_room_and_a_directory(tmp_path: Path) -> None:
    assert staging.allocate("", "w@1", 10) is None  # disabled
    assert staging.allocate(str(tmp_path / "missing"), "w@1", 10) is None
    assert staging.allocate(str(tmp_path), "w@1", None) is None  # size unknown: use the store
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    assert staging.allocate(str(tmp_path), "w@1", free) is None  # needs 1.5x
    slot = staging.allocate(str(tmp_path), "w@1", 1 << 20)
    assert slot is not None and slot.path.is_dir() and slot.path.name.startswith("w@1-")
    assert slot.path.parent == _area(tmp_path)  # per uid, private
    assert (os.stat(_area(tmp_path)).st_mode & 0o777, os.stat(slot.path).st_mode & 0o777) == (
        0o700,
        0o700,
    )
    assert staging.contains(str(tmp_path), slot.path)
    assert not staging.contains(str(tmp_path / "other"), slot.path)
    assert not staging.contains(str(tmp_path), tmp_path / ".." / "x")
    assert not staging.contains(str(tmp_path), tmp_path / "clawpoint-staging" / "w@1-x")
    slot.remove()
    assert not slot.path.exists()


def test_copy_and_sweep(tmp_path: Path) -> None:
    slot = staging.allocate(str(tmp_path), "w@2", 1)
    assert slot is not None
    (slot.path / "pages-1.img").write_bytes(b"x" * 10)
    dest = tmp_path / "store"
    dest.mkdir()
    slot.copy_into(dest)
    assert (dest / "pages-1.img").read_bytes() == b"x" * 10
    fresh = staging.allocate(str(tmp_path), "w@3", 1)
    assert fresh is not None
    # A killed writer's slot: no lock, old. The live one (``slot``) is old too, but locked.
    dead = _area(tmp_path) / "w@1-dead"
    dead.mkdir(mode=0o700)
    (dead / "pages-1.img").write_bytes(b"y")
    for p in (slot.path, dead):
        _age(p)
    assert staging.sweep(str(tmp_path)) == ["w@1-dead"]
    assert not dead.exists() and fresh.path.exists() and slot.path.exists()
    slot.remove()
    fresh.remove()


# -- a trap laid under the area's name ----------------------------------------------------


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], problem: str) -> None:
    assert staging.allocate(str(tmp_path), "w@1", 1) is None
    assert staging.sweep(str(tmp_path)) == []
    # Logs go to stdout until a test of the same worker configured core.logs (then stderr).
    seen = capsys.readouterr()
    out = seen.out + seen.err
    assert "staging.refused" in out and str(_area(tmp_path)) in out and problem in out, out


def test_symlinked_root_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / "canary").write_text("x")
    _age(elsewhere / "canary")
    _area(tmp_path).symlink_to(elsewhere)
    _refused(tmp_path, capsys, "a symlink")
    assert sorted(p.name for p in elsewhere.iterdir()) == ["canary"]  # nothing made there


def test_root_owned_by_another_uid_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    area = _area(tmp_path)
    area.mkdir(mode=0o700)
    os.chown(area, 54321, 54321)
    _refused(tmp_path, capsys, "owned by uid 54321")
    assert list(area.iterdir()) == []


def test_open_root_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    area = _area(tmp_path)
    area.mkdir()
    area.chmod(0o777)  # ours, but anyone could have planted images in it
    _refused(tmp_path, capsys, "mode 0777")
    assert list(area.iterdir()) == []


def test_a_parent_others_can_rename_in_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone could rename our area away and put theirs
    assert staging.allocate(str(shared), "w@1", 1) is None
    seen = capsys.readouterr()
    assert "not sticky" in seen.out + seen.err  # stdout or stderr: see _refused
    shared.chmod(0o1777)
    slot = staging.allocate(str(shared), "w@1", 1)
    assert slot is not None
    slot.remove()


def test_sweep_does_not_follow_a_symlink_inside(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "canary").write_text("keep me")
    _age(victim)
    slot = staging.allocate(str(tmp_path), "w@1", 1)
    assert slot is not None
    slot.remove()
    area = _area(tmp_path)
    (area / "w@9-planted").symlink_to(victim)
    (area / "w@8-dir").mkdir()
    (area / "w@8-dir" / "inner").symlink_to(victim)
    for p in (area / "w@9-planted", area / "w@8-dir" / "inner", area / "w@8-dir"):
        _age(p)
    assert sorted(staging.sweep(str(tmp_path))) == ["w@8-dir", "w@9-planted"]
    assert (victim / "canary").read_text() == "keep me"
    assert list(area.iterdir()) == []


def test_sweep_at_wrapper_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any wrapper's start (not only a later handoff) frees what a killed one staged."""
    shm = tmp_path / "shm"
    shm.mkdir()
    (tmp_path / "config.toml").write_text(f'[migration]\nstaging_dir = "{shm}"\n')
    settings = load_settings(tmp_path)
    assert settings.migration.staging_dir == str(shm)
    slot = staging.allocate(str(shm), "w@1", 1)
    assert slot is not None
    slot.remove()
    dead = _area(shm) / "w@1-dead"
    dead.mkdir()
    _age(dead)

    class Stop(Exception):
        pass

    def no_further(*args: object, **kwargs: object) -> None:
        raise Stop

    monkeypatch.setattr(supervisor, "Supervisor", no_further)
    with pytest.raises(Stop):
        supervisor.run(settings, RunSpec(name="w", command=["true"], home=str(tmp_path)))
    assert not dead.exists()


# -- the standby's links -------------------------------------------------------------------


def _staged(tmp_path: Path) -> staging.Slot:
    slot = staging.allocate(str(tmp_path), "w@4", 1)
    assert slot is not None
    (slot.path / "pages-1.img").write_bytes(b"p" * 100)
    (slot.path / "core-1.img").write_bytes(b"c")
    return slot


def test_links_are_made_and_checked(tmp_path: Path) -> None:
    slot = _staged(tmp_path)
    links = staging.link(str(tmp_path), slot.path, "abc123")
    assert links.path == slot.path.parent / f"{slot.path.name}.links-abc123"
    assert sorted(p.name for p in links.path.iterdir()) == ["core-1.img", "pages-1.img"]
    assert os.stat(links.path / "pages-1.img").st_ino == os.stat(slot.path / "pages-1.img").st_ino
    # The standby holds its links: a sweep leaves them, however old.
    _age(links.path)
    assert staging.sweep(str(tmp_path)) == []
    slot.remove()  # the source published: the links still hold the images
    assert (links.path / "pages-1.img").read_bytes() == b"p" * 100
    links.remove()
    assert list(_area(tmp_path).iterdir()) == []


@pytest.mark.parametrize("plant", ["symlink", "extra-name", "fifo", "foreign"])
def test_links_refuse_what_the_dump_did_not_write(tmp_path: Path, plant: str) -> None:
    slot = _staged(tmp_path)
    target = tmp_path / "elsewhere.img"
    target.write_bytes(b"evil")
    if plant == "symlink":
        (slot.path / "pages-2.img").symlink_to(target)
    elif plant == "extra-name":
        os.link(slot.path / "pages-1.img", tmp_path / "held-elsewhere.img")
    elif plant == "fifo":
        os.mkfifo(slot.path / "pages-2.img")
    else:
        os.chown(slot.path / "core-1.img", 54321, 54321)
    with pytest.raises(errors.OperationFailed) as exc:
        staging.link(str(tmp_path), slot.path, "abc123")
    assert exc.value.code == "staging-refused" and exc.value.hint
    assert sorted(p.name for p in _area(tmp_path).iterdir()) == [slot.path.name]  # no links
    slot.remove()


def test_links_refuse_a_path_outside_the_area(tmp_path: Path) -> None:
    slot = _staged(tmp_path)
    other = tmp_path / "x" / slot.path.name
    other.parent.mkdir()
    with pytest.raises(errors.InvalidInput):
        staging.link(str(tmp_path), other, "abc123")
    with pytest.raises(errors.InvalidInput):
        staging.link(str(tmp_path), slot.path, "../x")
    slot.path.chmod(0o755)  # a slot others could read is not one we made
    with pytest.raises(errors.OperationFailed, match="mode 0755"):
        staging.link(str(tmp_path), slot.path, "abc123")
    slot.remove()


def test_a_slot_is_locked_while_its_writer_lives(tmp_path: Path) -> None:
    slot = staging.allocate(str(tmp_path), "w@5", 1)
    assert slot is not None
    fd = os.open(slot.path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    slot.remove()
