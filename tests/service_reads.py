"""Reads of a test's state directory in the test's own process, for checks and polling loops.

The installed ``clawpoint`` costs a Python start-up per call (about 0.6 s of CPU, several
seconds of wall time on a busy 2-CPU machine), and the end-to-end tests polled
``clawpoint workloads --json`` every 0.2 s while waiting for a state: most of their time
went into starting interpreters, not into the behaviour under test. What the user runs
(``run``, ``checkpoint``, ``migrate``, ...) still goes through the console script, and
``workloads --json`` itself keeps its subprocess checks (tests/cli, tests/workloads);
the rows here are what that command prints: the same service call
(``Service.workloads``), dumped the same way (``model_dump(mode="json")``), less the
command's ``checkpoint_interval`` advice (``core.service.economics.workload_rows``: it reads
every checkpoint, which a polling loop does not need). ``checkpoint_rows`` is what
``clawpoint checkpoints REF --json`` prints (``Service.checkpoints``, the same dump).

Limits: the caller's own user and environment (a test that runs the CLI as another user
or with other ``CLAWPOINT_*`` variables must keep using the CLI); each call wires a fresh
service over the state directory (tens of milliseconds), so nothing is cached between
reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.config import load_settings
from core.service.facade import bootstrap


def workload_rows(home: Path, backend: str = "local") -> list[dict[str, Any]]:
    """Every workload of ``backend`` as ``clawpoint workloads --json`` lists it."""
    service = bootstrap(load_settings(home))
    return [w.model_dump(mode="json") for w in service.workloads(backend)]


def workload_row(
    home: Path, key: str, *, by: str = "name", backend: str = "local"
) -> dict[str, Any]:
    """One workload's row, found by ``name`` or ``id`` (StopIteration: none such)."""
    return next(w for w in workload_rows(home, backend) if w[by] == key)


def checkpoint_rows(home: Path, workload: str | None = None) -> list[dict[str, Any]]:
    """The checkpoints of ``workload`` (all: None), newest first, as ``clawpoint checkpoints
    --json`` lists them."""
    service = bootstrap(load_settings(home))
    return [c.model_dump(mode="json") for c in service.checkpoints(workload)]
