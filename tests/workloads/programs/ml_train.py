"""A small training loop: logistic regression on a fixed synthetic data set with numpy,
one SGD step per line of METRICS ("step N loss X acc Y"), appended and flushed after every
step, "progress N" on stdout every 10 steps.

Its own check: at start and every 50 steps it re-reads METRICS and prints FAIL if the step
numbers are not 0, 1, 2, ... with no gap and no repeat (a restore that rewound the process
but not the file, or the file but not the process, shows here), or if the loss is not a
finite number. Deterministic (seeded), so a restore from step K recomputes nothing twice.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np


def check(path: Path, upto: int) -> None:
    steps = [int(line.split()[1]) for line in path.read_text().splitlines() if line]
    if steps != list(range(upto)):
        bad = next((i for i, s in enumerate(steps) if s != i), len(steps))
        print(f"FAIL metrics steps not contiguous at line {bad} (want 0..{upto - 1})", flush=True)


def main() -> None:
    metrics = Path(sys.argv[1])
    rng = np.random.default_rng(7)
    x = rng.normal(size=(4096, 32))
    w_true = rng.normal(size=32)
    y = (x @ w_true + 0.1 * rng.normal(size=4096) > 0).astype(np.float64)
    w = np.zeros(32)
    out = metrics.open("a")
    step = 0
    while True:
        idx = (np.arange(256) + step * 256) % 4096
        xb, yb = x[idx], y[idx]
        p = 1 / (1 + np.exp(-(xb @ w)))
        w -= 0.1 * xb.T @ (p - yb) / len(idx)
        pa = 1 / (1 + np.exp(-(x @ w)))
        loss = float(-np.mean(y * np.log(pa + 1e-12) + (1 - y) * np.log(1 - pa + 1e-12)))
        acc = float(np.mean((pa > 0.5) == (y > 0.5)))
        if not math.isfinite(loss):
            print(f"FAIL loss {loss} at step {step}", flush=True)
        out.write(f"step {step} loss {loss:.6f} acc {acc:.4f}\n")
        out.flush()
        step += 1
        if step % 50 == 0:
            check(metrics, step)
        if step % 10 == 0:
            print(f"progress {step // 10}", flush=True)
        time.sleep(0.01)


if __name__ == "__main__":
    main()
