"""A runbook file name no file can have (a NUL byte) is invalid input, never a crash.

Found by the CLI fuzzing: ``clawpoint runbook check 'local:a<NUL>b'`` raised ``ValueError``
from ``open`` (a NUL byte is refused before any system call, as ``ValueError``, which the
loader did not translate). The installed script cannot be given such an argument (an argv
string ends at NUL), so it is pinned through ``main()`` and the loader."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import errors
from core.cli.app import main
from core.runbooks import loading


@pytest.mark.parametrize("read", [loading.check_file, loading.load_runbook])
def test_the_loader_says_invalid_input(read: object, tmp_path: Path) -> None:
    with pytest.raises(errors.InvalidInput, match="embedded null byte") as caught:
        read(tmp_path / "a\0b.yaml")  # type: ignore[operator]
    assert caught.value.code == "runbook-invalid" and caught.value.hint


def test_runbook_check_exits_2_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLAWPOINT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("sys.argv", ["clawpoint", "runbook", "check", "local:a\0b"])
    with pytest.raises(SystemExit) as exited:
        main()
    said = capsys.readouterr()
    assert exited.value.code == errors.InvalidInput.exit_code, said
    assert "embedded null byte" in said.out + said.err and "Traceback" not in said.err
