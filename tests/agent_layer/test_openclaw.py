"""OpenClaw: the real CLI loads every skill as eligible and probes the MCP server.

Runs scripts/check-openclaw.sh; needs Node >= 22 tools from scripts/install-node-tools.sh.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NODE_BIN = Path(os.environ.get("CLAWPOINT_NODE_BIN", "/opt/clawpoint-node/bin"))


def _node_major() -> int | None:
    node = NODE_BIN / "node"
    if not node.exists():
        return None
    out = subprocess.run([str(node), "--version"], capture_output=True, text=True, check=False)
    try:
        return int(out.stdout.strip().lstrip("v").split(".")[0])
    except ValueError:
        return None


@pytest.mark.node
def test_check_openclaw_script() -> None:
    major = _node_major()
    if major is None or major < 22 or not (NODE_BIN / "openclaw").exists():
        pytest.skip(f"Node >= 22 tools not in {NODE_BIN}: run scripts/install-node-tools.sh")
    if not (Path(sys.executable).parent / "clawpoint").exists():
        pytest.skip("the clawpoint console script is not installed in this venv (pip install -e .)")
    env = {**os.environ, "CLAWPOINT_NODE_BIN": str(NODE_BIN)}
    env["CLAWPOINT_VENV"] = str(Path(sys.executable).parent.parent)
    env.pop("CHECK_OPENCLAW_DEV_STUB", None)
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "check-openclaw.sh")],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "skills info clawpoint-ops: ok" in proc.stderr
