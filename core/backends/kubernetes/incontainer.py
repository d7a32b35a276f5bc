"""What the backend runs inside a wrapped container (through ``pods/exec``).

``python -m core.backends.kubernetes.incontainer checkpoint LINEAGE [--stop]`` asks the
wrapper serving LINEAGE in this container (its control socket under ``$CLAWPOINT_HOME``) for
a checkpoint and prints the published checkpoint's manifest as one JSON line; errors are one
JSON line on stderr (``{"error": CODE, "message", "hint"}``) and the error's exit code.
``status LINEAGE`` prints the wrapper's status (which checkpoint it restored, its state).

It talks to the wrapper directly, not through the service: the container's own clawpoint
has no policy of its own to consult; the guardrails already ran where the plan was made.
Limits: the wrapper must run in this container (it is the container's entrypoint).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from core import errors
from core.model import validate_name
from core.wrapper.control import ControlClient

SOCKET_WAIT_S = 60.0


def run_dir() -> Path:
    """The wrapper's run directory: ``$CLAWPOINT_HOME/run`` (set in wrapped containers; read
    without loading the whole configuration, which would double the time of each exec)."""
    home = os.environ.get("CLAWPOINT_HOME")
    if home:
        return Path(home).expanduser().resolve() / "run"
    from core.config import load_settings

    return load_settings().run_dir


def main(argv: list[str]) -> int:
    try:
        if len(argv) < 2 or argv[0] not in ("checkpoint", "status"):
            raise errors.InvalidInput(
                "usage: incontainer checkpoint LINEAGE [--stop] | status LINEAGE",
                hint="the Kubernetes backend runs this through pods/exec",
            )
        lineage = validate_name(argv[1], what="lineage")
        extra = argv[2:]
        if extra not in ([], ["--stop"]) or (extra and argv[0] != "checkpoint"):
            raise errors.InvalidInput(f"unexpected arguments {extra!r}", hint="see --help")
        sock = run_dir() / f"{lineage}.sock"
        # A wrapper still starting (or restoring) has no socket yet: give it a moment.
        deadline = time.monotonic() + SOCKET_WAIT_S
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        client = ControlClient(sock)
        if argv[0] == "status":
            print(json.dumps(client.status(), default=str))
            return 0
        info = client.checkpoint(stop=bool(extra))
        print(info.model_dump_json())
        return 0
    except errors.ClawpointError as exc:
        print(json.dumps(exc.to_dict(), default=str), file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
