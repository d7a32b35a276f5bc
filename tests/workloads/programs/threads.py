"""Four worker threads each add to their own counter and to a shared total under one lock;
the main thread checks total == sum(counters) and that every thread is alive."""

from __future__ import annotations

import threading
import time

from _selfcheck import fail, report

lock = threading.Lock()
counts = [0, 0, 0, 0]
total = 0


def work(i: int) -> None:
    global total
    while True:
        with lock:
            counts[i] += 1
            total += 1
        time.sleep(0.001)


threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
for t in threads:
    t.start()
step = 0
last = 0
while True:
    time.sleep(0.05)
    with lock:
        if total != sum(counts):
            fail(f"threads: total {total} != sum {sum(counts)}")
        now = total
    if not all(t.is_alive() for t in threads):
        fail("threads: a worker thread is gone")
    if now < last:
        fail(f"threads: total went back from {last} to {now}")
    last = now
    step += 1
    report(step, every=10)
