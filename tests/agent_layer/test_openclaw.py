"""OpenClaw: the real CLI loads every skill as eligible and probes the MCP server.

Runs scripts/check-openclaw.sh (a throwaway HOME: the skills folder loaded, ``clawpoint
serve`` registered and probed); needs Node >= 22 tools from scripts/install-node-tools.sh.
Every skill must be listed eligible, OpenClaw's probe must list every tool the server
serves, and every tool a skill calls.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent_layer import skill_calls

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
@pytest.mark.timeout(
    1200
)  # ~15 OpenClaw runs; about a minute on an idle machine, far more on a busy one
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
    skills = sorted(p.parent for p in (REPO / "skills").glob("*/SKILL.md"))
    assert len(skills) >= 7
    for skill in skills:
        assert f"skills check: {skill.name}: eligible" in proc.stderr, proc.stderr[-4000:]
        assert f"skills info {skill.name}: ok" in proc.stderr, proc.stderr[-4000:]
    [line] = [x for x in proc.stderr.splitlines() if "mcp probe: tools: " in x]
    probed = set(line.split("mcp probe: tools: ", 1)[1].split())
    for skill in skills:
        body = (skill / "SKILL.md").read_text(encoding="utf-8").split("---", 2)[2]
        called = {c.tool for c in skill_calls.calls(body, skill.name)}
        assert called, f"{skill.name} calls no tool"
        assert called <= probed, (
            f"{skill.name} calls tools OpenClaw does not see: {called - probed}"
        )
    assert f"OK: {len(skills)} skills eligible; MCP tools listed" in proc.stderr
