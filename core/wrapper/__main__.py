"""Entrypoint of a detached wrapper: ``python -m core.wrapper '<RunSpec JSON>'``.

Started by ``core.wrapper.launch.launch_detached`` with stdout/stderr on the workload's log
file. Logs go to stderr. ``kill -QUIT`` on the wrapper writes every thread's stack to that
log and changes nothing else (as a JVM's thread dump does): how a wrapper that seems stuck
is diagnosed, and what ``launch_detached`` does before it gives up waiting for one. Exit code: the payload's, or the error's exit code; an error also
ends the log with one ``ERROR_LINE`` + JSON line that ``launch_detached`` raises again.
"""

from __future__ import annotations

import faulthandler
import json
import signal
import sys
from pathlib import Path

from pydantic import ValidationError

from core import errors, logs
from core.checkpoint import engine
from core.config import load_settings
from core.process_exit import exit_now
from core.specs import RunSpec
from core.wrapper import warm_up
from core.wrapper.launch import ERROR_LINE


def main(argv: list[str]) -> int:
    logs.configure_console()  # structlog itself loads with the first line logged
    faulthandler.register(signal.SIGQUIT, all_threads=True, chain=False)
    if len(argv) != 1:
        print("usage: python -m core.wrapper '<RunSpec JSON>'", file=sys.stderr)
        return 2
    try:
        spec = RunSpec.model_validate_json(argv[0])
        settings = load_settings(Path(spec.home))
        # The engine check runs while the supervisor's modules load (a restore waits for both).
        warm_up.start(engine.get(spec.engine), settings.checkpoint)
        from core.wrapper.supervisor import run

        return run(settings, spec)
    except ValidationError as exc:
        print(f"clawpoint wrapper: invalid run spec: {exc}", file=sys.stderr)
        return 2
    except errors.ClawpointError as exc:
        print(f"clawpoint wrapper: {exc}", file=sys.stderr)
        # Machine-readable too: the launcher re-raises this very error (class, hint).
        print(ERROR_LINE + json.dumps(exc.to_dict(), default=str), file=sys.stderr, flush=True)
        return exc.exit_code


if __name__ == "__main__":
    # At once when done: a stopped workload's move waits for this process to be gone.
    exit_now(main(sys.argv[1:]))
