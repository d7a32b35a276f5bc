"""Write a benchmark's section of docs/benchmarks.md: the text between its two markers.

A benchmark that publishes its own table (``bench/spot_policy.py``,
``bench/checkpoint_interval.py``) keeps it between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->``; a run replaces what is there, or appends the section the first time.
Limits: the markers are taken as written once each; text outside them is never touched.
"""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def write_section(name: str, text: str, path: Path = DOCS) -> None:
    """Put ``text`` between ``name``'s markers in ``path`` (appended when they are absent)."""
    begin, end = markers(name)
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    section = f"{begin}\n{text.rstrip()}\n{end}\n"
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + section + rest.split(end, 1)[1].lstrip("\n")
    else:
        new = old.rstrip("\n") + "\n\n" + section
    path.write_text(new)
