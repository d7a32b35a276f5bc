"""Suite-wide: which tests must share one pytest-xdist worker when the suite runs in parallel.

``scripts/run-tests.sh`` runs the suite with ``-n N --dist loadgroup``; tests without a group
go to any idle worker, and all tests of one group run on the same worker, one after another.
Groups are given here, by what the tests share, so that test files need no marks:

- ``slurm``: every test that uses the one loopback Slurm cluster (its ``slurm`` mark, the
  fixtures of tests/slurm, or the Slurm subject of the backend contract suite). Some of them
  drain nodes or kill a node's slurmd, which no other Slurm test may see half done.
- ``module:PATH``: the tests of a module that share a module-scoped fixture of their own (a
  running OpenClaw gateway, the backend contract suite's workloads): one worker builds it
  once instead of every worker building its own.

A test that marks itself ``xdist_group`` keeps its own group. With ``-n 0`` (serial) the
marks change nothing.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator

import pytest

SLURM_FIXTURES = frozenset({"slurm_cluster", "slurm_env", "slurm_subject"})
SHARED_SCOPES = frozenset({"module", "package", "class"})


def _uses_slurm(item: pytest.Item) -> bool:
    if item.get_closest_marker("slurm") is not None:
        return True
    if SLURM_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    # The contract suite picks its subject fixture by parameter (request.getfixturevalue).
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("subject") == "slurm"


def _shares_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    if "subject" in info.name2fixturedefs:  # its module-scoped subjects, fetched by name
        return True
    for name in item.fixturenames:  # type: ignore[attr-defined]
        defs = info.name2fixturedefs.get(name)
        if defs and defs[-1].scope in SHARED_SCOPES and "tests" in str(defs[-1].baseid):
            return True
    return False


def group_of(item: pytest.Item) -> str | None:
    """The xdist group this test joins (None: it may run on any worker)."""
    if _uses_slurm(item):
        return "slurm"
    if _shares_module_fixture(item):
        return f"module:{item.nodeid.split('::', 1)[0]}"
    return None


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    # A wrapper: the marks are set before any plugin's hook reads them.
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    yield
    if getattr(config.option, "loadgroup", False):
        _suffix_groups(items)


def _suffix_groups(items: list[pytest.Item]) -> None:
    """Append ``@GROUP`` to each grouped test's id on an xdist worker, as xdist means to.

    The controller sends all tests whose id ends in the same ``@GROUP`` to one worker.
    xdist 3.8 appends it by setting ``Item._nodeid``, but pytest 9 keeps a node's id in
    ``Node._id`` and no longer reads ``_nodeid``: without this, every group is ignored and
    tests that must not overlap run side by side.
    """
    from _pytest.nodeid import NodeId

    for item in items:
        names = sorted(
            str(m.args[0] if m.args else m.kwargs.get("name", "default"))
            for m in item.iter_markers("xdist_group")
        )
        suffix = "@" + "_".join(dict.fromkeys(names))
        if names and not item.nodeid.endswith(suffix):
            item._id = NodeId.parse(item.nodeid + suffix)  # type: ignore[attr-defined]


# ``CLAWPOINT_TEST_CPU=FILE``: each test's CPU, its own and its waited-for children's (the
# CLI starts, CRIU, short-lived wrappers), appended to FILE as JSON lines. On a machine with
# few CPUs the suite's wall time follows its CPU, not its waits: this says where it goes.
_CPU_REPORT = os.environ.get("CLAWPOINT_TEST_CPU")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not _CPU_REPORT:
        return (yield)
    before = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    started = time.monotonic()
    try:
        return (yield)
    finally:
        after = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        own, children = ((a.ru_utime + a.ru_stime) - (b.ru_utime + b.ru_stime)
                         for a, b in zip(after, before, strict=True))  # fmt: skip
        line = {"test": item.nodeid, "own_s": round(own, 3), "children_s": round(children, 3),
                "wall_s": round(time.monotonic() - started, 3),
                # Which worker, and when (epoch s): the run's timeline, its idle tail.
                "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
                "ended": round(time.time(), 1)}  # fmt: skip
        with open(_CPU_REPORT, "a") as out:
            out.write(json.dumps(line) + "\n")
