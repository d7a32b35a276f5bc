"""A package's public names, imported from their modules on first use (PEP 562).

A package that re-exports names from heavy modules (``core.signals`` pulls httpx2 and ctypes,
``core.backends.slurm`` its command runners) would make every importer pay for all of them;
the CLI starts in a few tens of milliseconds only if a package costs nothing until a name of
it is used. ``exports`` builds the package's module-level ``__getattr__`` from a table
name -> defining module; the first lookup stores the value in the package, so later ones are
plain attribute reads.

Limits: ``from package import *`` and ``dir(package)`` see only what has been loaded (each
package lists its names in ``__all__`` and under ``TYPE_CHECKING`` for type checkers).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``name`` imported from ``where[name]``."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[name]), name)
        setattr(sys.modules[package], name, value)  # the next lookup is a plain attribute
        return value

    return __getattr__
