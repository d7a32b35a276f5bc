"""How a move's restore mode is chosen (``core.backends.local.moves.choose_mode``): the
configuration, CRIU's abilities and the workload's size, and the reason is always said."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.backends.local import moves, planning
from core.checkpoint import engine, lazy_pages
from core.config import Settings, load_settings

MIB = 2**20


def settings(tmp_path: Path, text: str = "") -> Settings:
    (tmp_path / "config.toml").write_text(text)
    return load_settings(tmp_path)


@pytest.fixture
def criu_can(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    can = {"lazy": True, "dirty": False}
    monkeypatch.setattr(lazy_pages, "supported", lambda criu_path="criu": can["lazy"])
    monkeypatch.setattr(lazy_pages, "dirty_tracking", lambda criu_path="criu": can["dirty"])
    return can


def test_auto_picks_post_copy_for_large_state_only(
    tmp_path: Path, criu_can: dict[str, bool]
) -> None:
    s = settings(tmp_path)
    assert moves.choose_mode(s, "criu", 2048 * MIB)[0] == "post-copy"
    mode, why = moves.choose_mode(s, "criu", 200 * MIB)
    assert mode == "stop-and-copy" and "200 MiB < 512 MiB" in why
    assert "no pre-copy: the kernel tracks no dirty pages" in why
    assert moves.choose_mode(s, "criu", None)[0] == "stop-and-copy"


def test_configuration_forces_a_mode(tmp_path: Path, criu_can: dict[str, bool]) -> None:
    s = settings(tmp_path, '[migration]\nmode = "post-copy"\n')
    assert moves.choose_mode(s, "criu", MIB) == ("post-copy", "[migration] mode = post-copy")
    s = settings(tmp_path, '[migration]\nmode = "stop-and-copy"\npost_copy_min_mib = 0\n')
    assert moves.choose_mode(s, "criu", 4096 * MIB)[0] == "stop-and-copy"


def test_without_lazy_pages_it_falls_back_and_says_so(
    tmp_path: Path, criu_can: dict[str, bool]
) -> None:
    criu_can["lazy"] = False
    s = settings(tmp_path, '[migration]\nmode = "post-copy"\n')
    mode, why = moves.choose_mode(s, "criu", 4096 * MIB)
    assert mode == "stop-and-copy" and "cannot restore lazily" in why


def test_dirty_tracking_is_detected_and_pre_copy_is_not_claimed(
    tmp_path: Path, criu_can: dict[str, bool]
) -> None:
    criu_can["dirty"] = True
    _, why = moves.choose_mode(settings(tmp_path), "criu", 64 * MIB)
    assert "pre-copy not implemented" in why


def test_an_engine_that_restarts_its_command_has_one_mode(
    tmp_path: Path, criu_can: dict[str, bool]
) -> None:
    mode, why = moves.choose_mode(settings(tmp_path), "cooperative", 4096 * MIB)
    assert mode == "stop-and-copy" and "cooperative" in why


def test_the_mode_follows_the_engines_capability_not_its_name(
    tmp_path: Path, criu_can: dict[str, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine added under a new name that restores the process itself may move
    post-copy; the mode is decided by ``Engine.restores_process``, not a list of names."""
    monkeypatch.setitem(engine.ENGINES, "criu-twin", "core.checkpoint.criu")
    s = settings(tmp_path, '[migration]\nmode = "post-copy"\n')
    assert moves.choose_mode(s, "criu-twin", MIB) == ("post-copy", "[migration] mode = post-copy")
    # And a live move of it hands over to a standby (an unknown engine never does).
    assert planning._hands_off("criu-twin") and not planning._hands_off("gone")


def test_every_engine_declares_what_a_move_may_ask_of_it() -> None:
    for name in engine.ENGINES:
        eng = engine.get(name)
        assert isinstance(eng.restores_process, bool) and isinstance(eng.supports_handoff, bool)
        # A standby restores the frozen tree itself: no handoff without that.
        assert eng.restores_process or not eng.supports_handoff
    assert not engine.get("cooperative").supports_handoff
    assert engine.get("criu").supports_handoff and engine.get("cuda").supports_handoff


def test_a_workload_in_its_own_user_namespace_moves_stop_and_copy(
    tmp_path: Path, criu_can: dict[str, bool]
) -> None:
    # Its restore runs inside a new user namespace, where userfaultfd for another process
    # needs CAP_SYS_PTRACE in the initial one (fs/userfaultfd.c): even a forced post-copy.
    s = settings(tmp_path, '[migration]\nmode = "post-copy"\n')
    mode, why = moves.choose_mode(s, "criu", 4096 * MIB, user_namespace=True)
    assert mode == "stop-and-copy" and "user namespace" in why
    assert moves.choose_mode(s, "criu", 4096 * MIB)[0] == "post-copy"
