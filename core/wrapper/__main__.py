"""Entrypoint of a detached wrapper: ``python -m core.wrapper '<RunSpec JSON>'``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import structlog
from pydantic import ValidationError

from core import errors
from core.config import load_settings
from core.wrapper.spec import RunSpec
from core.wrapper.supervisor import run


def main(argv: list[str]) -> int:
    # Logs go to stderr: the payload's stdout is copied to our stdout and must stay clean.
    structlog.configure(
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
    )
    if len(argv) != 2:
        print("usage: python -m core.wrapper '<RunSpec JSON>'", file=sys.stderr)
        return 2
    try:
        spec = RunSpec.model_validate_json(argv[1])
        return run(load_settings(Path(spec.home)), spec)
    except ValidationError as exc:
        print(f"invalid run spec: {exc}", file=sys.stderr)
        return 2
    except errors.ClawpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
