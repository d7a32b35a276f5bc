"""Runbook files are parsed once per version: an unchanged file is not parsed again, and any
change to it (an edit, a same-size rewrite, a file renamed over it, a broken edit) is read
on the next load. No service, no server: the loader alone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core import errors
from core.runbooks import loading
from core.runbooks.engine import default_runbooks_dir

SHIPPED = default_runbooks_dir() / "queue-backlog.yaml"


def _copy(tmp_path: Path, title: str) -> Path:
    """The shipped queue-backlog runbook in ``tmp_path`` with its title replaced."""
    text = SHIPPED.read_text(encoding="utf-8")
    original = loading.load_runbook(SHIPPED).title
    assert f"title: {original}" in text
    path = tmp_path / "queue-backlog.yaml"
    path.write_text(text.replace(f"title: {original}", f"title: {title}", 1), encoding="utf-8")
    return path


def _set_mtime(path: Path, ns: int) -> None:
    os.utime(path, ns=(ns, ns))


def test_an_unchanged_file_is_parsed_once(tmp_path: Path) -> None:
    path = _copy(tmp_path, "First title")
    assert loading.load_runbook(path) is loading.load_runbook(path)


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    path = _copy(tmp_path, "First title")
    _set_mtime(path, 1_700_000_000_000_000_000)
    assert loading.load_runbook(path).title == "First title"
    # Same size, and the same inode: only the times tell the two versions apart.
    _copy(tmp_path, "Other title")
    _set_mtime(path, 1_700_000_000_000_000_001)
    assert loading.load_runbook(path).title == "Other title"


def test_a_file_renamed_over_it_is_read_again(tmp_path: Path) -> None:
    path = _copy(tmp_path, "First title")
    assert loading.load_runbook(path).title == "First title"
    (tmp_path / "new").mkdir()
    fresh = _copy(tmp_path / "new", "A title of another length")
    fresh.replace(path)  # how editors save: write elsewhere, rename over
    assert loading.load_runbook(path).title == "A title of another length"


def test_a_broken_edit_is_reported_every_time_and_a_fix_is_seen(tmp_path: Path) -> None:
    path = _copy(tmp_path, "First title")
    loading.load_runbook(path)
    good = path.read_text(encoding="utf-8")
    path.write_text(good + "\nsteps: [\n", encoding="utf-8")
    for _ in range(2):  # an error is never cached
        with pytest.raises(errors.InvalidInput):
            loading.load_runbook(path)
    path.write_text(good.replace("First title", "Fixed title"), encoding="utf-8")
    assert loading.load_runbook(path).title == "Fixed title"


def test_load_all_sees_an_edited_file(tmp_path: Path) -> None:
    path = _copy(tmp_path, "First title")
    assert loading.load_all(tmp_path)["queue-backlog"].title == "First title"
    _copy(tmp_path, "Second title, longer")
    assert loading.load_all(tmp_path)["queue-backlog"].title == "Second title, longer"
    path.unlink()
    assert loading.load_all(tmp_path) == {}
