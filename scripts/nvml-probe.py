#!/usr/bin/env python3
"""Run clawpoint's NVML adapter on this machine and print its GPU health report as JSON.

Usage: scripts/nvml-probe.py [--node NODE_ID] [--watch SECONDS]

``--watch`` keeps the monitor open that long so Xid events that happen meanwhile are seen
(a one-shot report only sees events that arrive while it runs). Exit status: 0 = every GPU
healthy, 1 = a GPU degraded or failed, 2 = no NVML/driver here, 3 = no nvidia-ml-py, 4 = error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.signals.model import GpuVerdict
from core.signals.nvml import NvmlMonitor, NvmlStatus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", default=None)
    parser.add_argument("--watch", type=float, default=0.0)
    args = parser.parse_args()
    # stdout carries the JSON report only; logs go to stderr.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    with NvmlMonitor(node=args.node, event_wait_ms=100) as monitor:
        deadline = time.monotonic() + args.watch
        report = monitor.report()
        while time.monotonic() < deadline:
            time.sleep(1.0)
            report = monitor.report()
    body = report.model_dump(mode="json")
    body["verdict"] = report.verdict.value if report.verdict else None
    print(json.dumps(body, indent=2))
    if report.status is NvmlStatus.NO_NVML:
        return 2
    if report.status is NvmlStatus.NO_LIBRARY:
        return 3
    if report.status is NvmlStatus.ERROR:
        return 4
    return 0 if report.verdict in (None, GpuVerdict.HEALTHY) else 1


if __name__ == "__main__":
    sys.exit(main())
