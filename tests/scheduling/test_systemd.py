"""contrib/systemd: the timer + oneshot service pair and the heartbeat service pass
``systemd-analyze verify`` (no running systemd needed), and the service treats watch's
"needs someone" (20) and "acted" (21) as success."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from core.watch.report import EXIT_ACTED, EXIT_APPROVALS
from tests.scheduling.conftest import CLAWPOINT, REPO

UNITS = REPO / "contrib" / "systemd"
SHIPPED_PATH = "/opt/clawpoint/.venv/bin/clawpoint"


def _installed(tmp_path: Path, clawpoint: str) -> list[Path]:
    """The units as an operator installs them: ExecStart pointed at a real clawpoint."""
    out = []
    for unit in sorted(UNITS.glob("clawpoint-*")):
        dest = tmp_path / unit.name
        dest.write_text(unit.read_text().replace(SHIPPED_PATH, clawpoint))
        out.append(dest)
    return out


def _verify(units: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", *map(str, units)], capture_output=True, text=True,
        timeout=120, check=False, cwd=units[0].parent,
    )  # fmt: skip


@pytest.fixture
def analyze() -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze missing: scripts/install-system-deps.sh installs systemd")


def test_units_verify_clean(analyze: None, tmp_path: Path) -> None:
    units = _installed(tmp_path, str(CLAWPOINT))
    assert {u.name for u in units} == {
        "clawpoint-watch.service", "clawpoint-watch.timer", "clawpoint-watch-heartbeat.service",
    }  # fmt: skip
    got = _verify(units)
    assert got.returncode == 0 and got.stderr == "" and got.stdout == "", got


def test_verify_would_catch_a_wrong_path(analyze: None, tmp_path: Path) -> None:
    # The check above can fail: an ExecStart that does not exist is reported.
    got = _verify(_installed(tmp_path, "/nonexistent/clawpoint"))
    assert "/nonexistent/clawpoint" in got.stderr, got


def test_oneshot_service_counts_20_and_21_as_success() -> None:
    service = (UNITS / "clawpoint-watch.service").read_text().splitlines()
    assert f"SuccessExitStatus={EXIT_APPROVALS} {EXIT_ACTED}" in service
    assert "Type=oneshot" in service
    assert f"ExecStart={SHIPPED_PATH} watch --once" in service
    timer = (UNITS / "clawpoint-watch.timer").read_text()
    assert "Unit=clawpoint-watch.service" in timer
    heartbeat = (UNITS / "clawpoint-watch-heartbeat.service").read_text().splitlines()
    assert f"ExecStart={SHIPPED_PATH} watch --every 5s" in heartbeat
