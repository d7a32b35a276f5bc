#!/usr/bin/env python3
"""Render the real-software rows of docs/checkpointing.md's compatibility matrix from what
tests/workloads/test_real_software.py recorded.

    CLAWPOINT_REALSW_RESULTS=/tmp/realsw.jsonl pytest tests/workloads/test_real_software.py
    scripts/realsw-matrix.py /tmp/realsw.jsonl            # print the table
    scripts/realsw-matrix.py /tmp/realsw.jsonl --write    # replace it in docs/checkpointing.md

A test appends its row only after every check of the program passed, so a program absent
from the results (skipped or failed) gets no row. Each cell is the operation's
client-visible figures for that run: for checkpoint and migrate the longest gap between two
answered requests of a client asking every 10 ms and the requests that failed even after
one retry 10 ms later; for preempt/resume and failover how long the server could not be
reached (docs/benchmarks.md has the repeated measurement of migrate). The text between the markers
``<!-- real-software:begin -->`` and ``<!-- real-software:end -->`` is replaced.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "checkpointing.md"
BEGIN, END = "<!-- real-software:begin -->", "<!-- real-software:end -->"
OPS = ("checkpoint", "migrate", "preempt/resume", "kill -9 + failover")


def cell(name: str, op: dict[str, object] | None) -> str:
    """A live operation: the gap and the failed requests; a stop and start (preempt/resume,
    failover): how long the server was unreachable (its requests fail by design)."""
    if not op or not op.get("checked"):
        return "not run"
    if "gap_ms" not in op:
        return "works"
    gap = float(str(op["gap_ms"]))
    if name in ("checkpoint", "migrate"):
        return f"works; gap {gap:.0f} ms, {op['failed']} failed"
    return f"works; down {gap / 1000:.1f} s"


def render(rows: list[dict[str, object]]) -> str:
    out = [
        "| Real program | Checked after each step | " + " | ".join(OPS) + " |",
        "|---|---|" + "---|" * len(OPS),
    ]
    for r in rows:
        ops = r["ops"]
        assert isinstance(ops, dict)
        out.append(
            f"| {r['program']} | {r['checks']} | "
            + " | ".join(cell(o, ops.get(o)) for o in OPS)
            + " |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--write", action="store_true", help=f"replace the table in {DOC.name}")
    args = ap.parse_args()
    latest: dict[str, dict[str, object]] = {}
    for line in args.results.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            latest[str(row["program"])] = row  # the last run of each program
    table = render(list(latest.values()))
    if not args.write:
        print(table)
        return
    text = DOC.read_text()
    if BEGIN not in text or END not in text:
        sys.exit(f"{DOC}: markers {BEGIN} / {END} not found")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}")


if __name__ == "__main__":
    main()
