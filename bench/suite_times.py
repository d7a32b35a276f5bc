"""Where the test suite's time goes: per directory and per xdist group, from pytest's durations.

Run the suite with every duration printed, then read the output::

    scripts/run-tests.sh --durations=0 --durations-min=0 > /tmp/suite.txt
    .venv/bin/python bench/suite_times.py /tmp/suite.txt [--before /tmp/suite-before.txt]

Each ``12.34s call     tests/dir/test_x.py::test_y@GROUP`` line counts (setup, call and
teardown alike) towards its top directory (``tests/dir``) and its xdist group (``GROUP``:
the ``@`` suffix tests/conftest.py gives the tests that share one worker; none: ``-``).
The tests of one group run one after another on one worker, so a group's sum is a floor
under the wall time of the whole run: the report names the largest and compares it with the
run's wall time (pytest's last line). With ``--before`` each row shows both runs.

On a machine with few CPUs the wall time follows the CPU the tests spend more than their
waits. ``--cpu FILE`` adds it, from a run with ``CLAWPOINT_TEST_CPU=FILE`` (tests/conftest.py:
one JSON line per test, its own CPU and its waited-for children's: the CLI starts, CRIU,
MCP servers), per directory and for the tests that spend the most.

Limits: pytest rounds each duration to 10 ms; the sums are worker time, not wall time (the
workers share the CPUs); a test that fails still counts.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\s*(?P<s>\d+(?:\.\d+)?)s\s+(?:setup|call|teardown)\s+(?P<id>\S+)")
WALL = re.compile(r"\bin (?P<s>\d+(?:\.\d+)?)s\b")


class Times:
    """The sums of one run's durations output."""

    def __init__(self, text: str) -> None:
        self.by_dir: dict[str, float] = defaultdict(float)
        self.by_group: dict[str, float] = defaultdict(float)
        self.tests: set[str] = set()
        self.wall: float | None = None
        for line in text.splitlines():
            m = LINE.match(line)
            if m:
                seconds, nodeid = float(m["s"]), m["id"]
                path, _, rest = nodeid.partition("::")
                self.by_dir[_directory(path)] += seconds
                self.by_group[rest.rpartition("@")[2] if "@" in rest else "-"] += seconds
                self.tests.add(nodeid)
                continue
            w = WALL.search(line)
            if w and ("passed" in line or "failed" in line):
                self.wall = float(w["s"])

    @property
    def total(self) -> float:
        return sum(self.by_dir.values())


class Cpu:
    """The sums of one run's ``CLAWPOINT_TEST_CPU`` lines: CPU seconds, own + children."""

    def __init__(self, text: str) -> None:
        self.by_dir: dict[str, float] = defaultdict(float)
        self.by_test: dict[str, float] = {}
        self.own = self.children = 0.0
        for line in text.splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            own, children = float(row["own_s"]), float(row["children_s"])
            self.own += own
            self.children += children
            nodeid = str(row["test"])
            self.by_dir[_directory(nodeid.partition("::")[0])] += own + children
            self.by_test[nodeid] = self.by_test.get(nodeid, 0.0) + own + children

    def report(self, top: int = 10) -> str:
        lines = [
            f"CPU: {self.own + self.children:.1f} s ({self.own:.1f} s in the test processes, "
            f"{self.children:.1f} s in their children)",
            "CPU per directory:",
        ]
        lines += _rows(self.by_dir, None)
        lines.append(f"the {top} tests that spend the most CPU:")
        lines += _rows(dict(sorted(self.by_test.items(), key=lambda kv: -kv[1])[:top]), None)
        return "\n".join(lines)


def _directory(path: str) -> str:
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else path


def _rows(now: dict[str, float], before: dict[str, float] | None) -> list[str]:
    keys = sorted(set(now) | set(before or {}), key=lambda k: -max(now.get(k, 0.0), 0.0))
    out = []
    for k in keys:
        if before is None:
            out.append(f"  {k:<48} {now.get(k, 0.0):9.1f} s")
        else:
            b, n = before.get(k, 0.0), now.get(k, 0.0)
            out.append(f"  {k:<48} {b:9.1f} s -> {n:9.1f} s  ({n - b:+.1f})")
    return out


def report(now: Times, before: Times | None = None) -> str:
    lines = [f"{len(now.tests)} tests, {now.total:.1f} s of worker time"]
    if before is not None:
        lines[0] += f" (before: {len(before.tests)} tests, {before.total:.1f} s)"
    lines.append("per directory:")
    lines += _rows(now.by_dir, before.by_dir if before else None)
    lines.append("per xdist group (a group runs on one worker, one test after another):")
    lines += _rows(now.by_group, before.by_group if before else None)
    grouped = {k: v for k, v in now.by_group.items() if k != "-"}
    if grouped:
        name, seconds = max(grouped.items(), key=lambda kv: kv[1])
        wall = f"{now.wall:.1f} s" if now.wall is not None else "unknown"
        lines.append(f"largest group: {name} ({seconds:.1f} s); the run's wall time: {wall}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("output", type=Path, help="pytest output with --durations=0")
    ap.add_argument("--before", type=Path, help="an earlier run's output, to compare with")
    ap.add_argument("--cpu", type=Path, help="the run's CLAWPOINT_TEST_CPU file")
    args = ap.parse_args(argv)
    now = Times(args.output.read_text(errors="replace"))
    if not now.tests:
        print(f"{args.output}: no durations (run pytest with --durations=0)", file=sys.stderr)
        return 2
    before = Times(args.before.read_text(errors="replace")) if args.before else None
    print(report(now, before))
    if args.cpu is not None:
        try:
            print(Cpu(args.cpu.read_text()).report())
        except OSError as exc:  # missing, a directory, not ours to read
            print(f"{args.cpu}: cannot be read ({exc.strerror or exc})", file=sys.stderr)
            return 2
        except (ValueError, KeyError, TypeError) as exc:  # not JSON, a key missing, not an object
            print(f"{args.cpu}: not CLAWPOINT_TEST_CPU lines ({exc})", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
