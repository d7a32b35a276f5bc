"""A multiprocessing pool of three worker processes: each step maps a known function over a
range and checks every result, so a lost, mixed up or stuck worker is caught."""

from __future__ import annotations

import multiprocessing as mp
import time

from _selfcheck import fail, report


def square(x: int) -> int:
    return x * x


if __name__ == "__main__":
    with mp.get_context("fork").Pool(3) as pool:
        step = 0
        while True:
            base = step * 100
            got = pool.map_async(square, range(base, base + 100)).get(timeout=30)
            if got != [x * x for x in range(base, base + 100)]:
                fail(f"pool: wrong results at step {step}")
            step += 1
            report(step, every=10)
            time.sleep(0.05)
