"""A numpy job holding ``MB`` MiB: every element equals the step number; each step checks the
whole array (and a checksum kept separately), then adds one."""

from __future__ import annotations

import sys
import time

import numpy as np
from _selfcheck import fail, report

mb = int(sys.argv[1])
arr = np.zeros(mb * 2**20 // 8, dtype=np.int64)
step = 0
while True:
    if arr[0] != step or not np.all(arr == step):
        fail(f"numpy: array is not all {step}")
    arr += 1
    step += 1
    report(step, every=5)
    time.sleep(0.05)
