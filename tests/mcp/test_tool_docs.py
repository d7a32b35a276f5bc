"""docs/mcp-tools.md matches the server's own tool list (the token budgets of that list:
test_token_budgets.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mcp_tools_doc_is_current() -> None:
    fresh = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-mcp-docs.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    committed = (ROOT / "docs" / "mcp-tools.md").read_text()
    assert fresh == committed, "docs/mcp-tools.md is stale: run 'make docs'"
