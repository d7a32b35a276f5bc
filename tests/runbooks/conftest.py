"""Fixtures for runbook tests: the service fixtures, a person at the CLI, helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core.config import Settings, load_settings
from core.model import Principal, PrincipalKind
from core.runbooks.engine import Engine
from core.service.facade import Service
from tests.service.conftest import need_criu, service  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
AGENT = Principal(id="mcp:runbook-test", kind=PrincipalKind.AGENT)
CLAWPOINT = Path(sys.executable).parent / "clawpoint"  # the installed console script

# The two default local nodes, with node-b 20 times faster than node-a: an SLA rescue that
# moves a late workload there really brings its finish inside the deadline.
NODES_TOML = """
[[local.nodes]]
name = "node-a"
price_per_hour = 3.06
labels = {pool = "on-demand"}

[[local.nodes]]
name = "node-b"
price_per_hour = 0.92
spot = true
labels = {pool = "spot", "clawpoint.io/speed" = "20"}
"""


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    home = tmp_path / "h"
    home.mkdir(parents=True)
    (home / "config.toml").write_text(NODES_TOML)
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    return load_settings(home)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def engine(service: Service) -> Engine:  # noqa: F811
    return Engine(service)


def cli(settings: Settings, *args: str) -> Any:  # noqa: F811
    """``python -m core.cli ARGS --json`` as the person at the terminal; parsed JSON out."""
    env = dict(os.environ, CLAWPOINT_HOME=str(settings.home), PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "core.cli", *args, "--json"],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, f"{args}: rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout)


def approve(settings: Settings, approval_id: str) -> Any:  # noqa: F811
    """A person approves ``approval_id`` at the CLI; the approval as the CLI shows it."""
    view = cli(settings, "approvals", "approve", approval_id)
    assert view["status"] == "approved"
    return view


def clawpoint(
    settings: Settings, *args: str, json_: bool = True
) -> subprocess.CompletedProcess[str]:  # noqa: F811
    """The installed ``clawpoint ARGS [--json]`` as the person at the terminal (any exit code)."""
    env = dict(os.environ, CLAWPOINT_HOME=str(settings.home))
    return subprocess.run(
        [str(CLAWPOINT), *args, *(["--json"] if json_ else [])],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
