"""How a move's restore mode is chosen (``core.backends.local.moves.choose_mode``): the
configuration, CRIU's abilities and the workload's size, and the reason is always said."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.backends.local import moves
from core.checkpoint import lazy_pages
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
