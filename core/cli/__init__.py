"""The ``clawpoint`` command line: a thin translator over ``core.service`` (the one
entrypoint inside core; nothing else in core imports it).

Help is Rich's (boxes, colour) on a terminal and plain text anywhere else: an agent's shell
tool or a script reads the same words in about a third of the bytes (2.3 KB against 6.2 KB
for ``clawpoint --help``), and the command skips Rich's import and rendering (about half its
CPU; docs/benchmarks.md, "CLI start"). Typer reads ``TYPER_USE_RICH`` once, when it is
imported, so it is set only around that import: the programs ``clawpoint run`` starts never
inherit it. A ``TYPER_USE_RICH`` the user set wins either way.
"""

from __future__ import annotations

import os
import sys


def _plain_help_off_a_terminal() -> None:
    if "typer" in sys.modules or "TYPER_USE_RICH" in os.environ:
        return
    try:
        terminal = sys.stdout is not None and sys.stdout.isatty()
    except (ValueError, OSError):  # closed or detached
        terminal = False
    if terminal:
        return
    os.environ["TYPER_USE_RICH"] = "0"
    try:
        import typer.core  # noqa: F401  (reads the variable now)
    finally:
        del os.environ["TYPER_USE_RICH"]


_plain_help_off_a_terminal()
