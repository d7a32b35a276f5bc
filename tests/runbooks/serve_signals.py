"""``clawpoint serve`` with read-only signals stood in that the local backend cannot produce.

The local backend has no scheduler queue, so a queue backlog cannot happen there. This entry
point patches the named read tools of ``core.runbooks.calls`` to return fixed outputs (JSON
``{tool: output}`` in ``$RUNBOOK_TEST_SIGNALS``), then runs the real ``clawpoint serve``.
Action tools cannot be stood in: guardrails, approvals and actions stay real.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from core.cli.app import main as cli_main
from core.runbooks import calls, tools
from core.service.facade import Service

ENV = "RUNBOOK_TEST_SIGNALS"


def _fixed(output: Any) -> calls.ToolCall:
    def call(_s: Service, _a: dict[str, Any], _c: calls.CallContext) -> Any:
        return output

    return call


def main() -> None:
    for tool, output in json.loads(os.environ[ENV]).items():
        if tool not in calls.CALLS or tools.is_mutating(tool):
            raise SystemExit(f"{tool!r} is not a read tool; only signals may be stood in")
        calls.CALLS[tool] = _fixed(output)
    sys.argv = [sys.argv[0], "serve"]
    cli_main()


if __name__ == "__main__":
    main()
