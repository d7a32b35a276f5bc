"""Skills: every SKILL.md passes the Agent Skills validator and keeps the house format (the
calls it names are checked against the live server by test_skill_contract.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from core import errors
from mcp_server.server import DEFAULT_TOOLSETS, check_toolsets

REPO = Path(__file__).resolve().parents[2]
SKILLS = REPO / "skills"
REQUIRED = {
    "clawpoint-ops",
    "spot-guardian",
    "gpu-failover",
    "sla-keeper",
    "capacity-balancer",
    "maintenance-drain",
    "approvals-desk",
    "capacity-planner",
}
SKILL_DIRS = sorted(p.parent for p in SKILLS.glob("*/SKILL.md"))


def _split(path: Path) -> tuple[dict[str, object], str]:
    text = path.read_text(encoding="utf-8")
    _, front, body = text.split("---", 2)
    data = yaml.safe_load(front)
    assert isinstance(data, dict)
    return data, body


def _agentskills() -> str:
    exe = Path(sys.executable).parent / "agentskills"
    found = str(exe) if exe.exists() else shutil.which("agentskills")
    if found is None:
        pytest.fail("agentskills not installed: pip install skills-ref")
    return found


def test_required_skills_exist() -> None:
    assert {p.name for p in SKILL_DIRS} >= REQUIRED


@pytest.mark.parametrize("skill", SKILL_DIRS, ids=lambda p: p.name)
def test_agentskills_validate(skill: Path) -> None:
    proc = subprocess.run(
        [_agentskills(), "validate", str(skill)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("skill", SKILL_DIRS, ids=lambda p: p.name)
def test_frontmatter(skill: Path) -> None:
    front, body = _split(skill / "SKILL.md")
    assert front["name"] == skill.name
    description = front["description"]
    assert isinstance(description, str) and 0 < len(description) <= 300
    assert "use when" in description.lower() or "use on" in description.lower()
    meta = front["metadata"]
    assert isinstance(meta, dict)
    oc = meta["openclaw"]
    assert oc["requires"]["bins"] == ["clawpoint"]
    assert oc["emoji"] and oc["homepage"].startswith("https://")
    assert "homepage" not in front
    # Block YAML, not JSON-style flow maps (the PyPI validator rejects those).
    assert "{" not in (skill / "SKILL.md").read_text(encoding="utf-8").split("---")[1]
    assert len(body.splitlines()) < 120, "keep skill bodies tight"


@pytest.mark.parametrize("skill", SKILL_DIRS, ids=lambda p: p.name)
def test_body_gives_a_cli_fallback(skill: Path) -> None:
    # The tool calls themselves are checked against the live server by test_skill_contract.
    _, body = _split(skill / "SKILL.md")
    assert "clawpoint " in body, f"{skill.name} gives no CLI fallback"


@pytest.mark.parametrize("skill", SKILL_DIRS, ids=lambda p: p.name)
def test_body_has_safety_rules(skill: Path) -> None:
    _, body = _split(skill / "SKILL.md")
    lowered = body.lower()
    assert "## safety rules" in lowered
    assert "untrusted" in lowered
    assert "never approve" in lowered


def test_spot_guardian_moves_before_it_preempts() -> None:
    """A spot notice: migrate when a node can take the workload (one approval), preempt only
    when none can; never preempt-then-resume (two approvals, stopped in between)."""
    _, body = _split(SKILLS / "spot-guardian" / "SKILL.md")
    rules = body.split("## Decision rules", 1)[1].split("\n## ", 1)[0]
    first = rules.split("\n2. ", 1)[0]
    assert "migrate_workload(" in first and "preempt_workload(" in first, first
    assert first.index("migrate_workload(") < first.index("preempt_workload("), first
    assert "resume_workload(" not in rules


@pytest.mark.parametrize("skill", SKILL_DIRS, ids=lambda p: p.name)
def test_declared_toolsets_are_valid_and_said_in_the_skill(skill: Path) -> None:
    """A skill that needs more than the default toolsets declares them
    (``metadata.clawpoint-toolsets``, as ``clawpoint serve --toolsets`` takes them) and
    says so in its compatibility and body; test_skill_contract serves it exactly those."""
    front, body = _split(skill / "SKILL.md")
    meta = front["metadata"]
    assert isinstance(meta, dict)
    declared = meta.get("clawpoint-toolsets")
    if declared is None:
        return
    assert isinstance(declared, str)
    try:
        chosen = check_toolsets(declared.split(","))
    except errors.InvalidInput as exc:
        pytest.fail(f"{skill.name}: metadata.clawpoint-toolsets: {exc}")
    assert chosen != set(DEFAULT_TOOLSETS), "the default toolsets need no declaration"
    serve = f"clawpoint serve --toolsets {declared}"
    assert serve in str(front["compatibility"]) and serve in body
