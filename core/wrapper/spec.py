"""Where a wrapper's payload writes its output (``NAME.out``, rotated).

What the wrapper runs, its ``RunSpec``, is in ``core.specs``: the interfaces build it and hand
it to the service, which hands it to a launcher backend and on to the wrapper.
"""

from __future__ import annotations

from pathlib import Path

from core.config import Settings


def output_path(settings: Settings, name: str) -> Path:
    """Where a detached wrapper writes its payload's stdout/stderr (``NAME.out``, rotated into
    ``NAME.out.1`` ..); the wrapper's own lines are in ``NAME.log`` beside it."""
    return settings.log_dir / f"{name}.out"


def output_files(settings: Settings, name: str) -> list[Path]:
    """The payload's output files of ``name`` that exist, oldest first."""
    base = output_path(settings, name)
    rotated = sorted(
        (p for p in base.parent.glob(f"{base.name}.*") if p.suffix[1:].isdigit()),
        key=lambda p: -int(p.suffix[1:]),
    )
    return [*rotated, *([base] if base.exists() else [])]
