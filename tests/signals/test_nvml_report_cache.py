"""``ReportCache``: a long-lived process reuses one NVML report for ``ttl_s`` seconds, then
reads the GPUs again. The adapter runs against the fake pynvml; time is a counter the test
moves, so nothing here waits."""

from __future__ import annotations

import threading
from typing import Any

from core.signals.model import GpuVerdict
from core.signals.nvml import NvmlReport, ReportCache, probe
from tests.signals.fake_nvml import FakeGpu, FakeNvml


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _inits(nv: FakeNvml) -> int:
    """How many times NVML was opened (each probe opens and shuts it down once)."""
    return nv.calls.count("nvmlInit")


def _cache(nv: FakeNvml, clock: Clock, ttl_s: float = 5.0) -> ReportCache:
    def on_fake(_real: Any, **kw: Any) -> NvmlReport:
        return probe(nv, **kw)

    return ReportCache(ttl_s=ttl_s, clock=clock, probe=on_fake)


def test_a_report_is_reused_until_it_is_ttl_old_then_the_gpus_are_read_again() -> None:
    nv = FakeNvml([FakeGpu(uuid="GPU-0")])
    clock = Clock()
    cache = _cache(nv, clock)
    first = cache.report(node="local:node-a")
    assert first.gpus[0].verdict is GpuVerdict.HEALTHY and _inits(nv) == 1
    nv.gpus[0].lost = True  # the GPU falls off the bus
    clock.now += 4.9
    assert cache.report(node="local:node-a") is first and _inits(nv) == 1
    clock.now += 0.1
    again = cache.report(node="local:node-a")
    assert _inits(nv) == 2
    assert again.gpus[0].lost and again.gpus[0].verdict is GpuVerdict.FAILED


def test_another_node_or_wait_is_another_reading() -> None:
    nv = FakeNvml([FakeGpu(uuid="GPU-0")])
    cache = _cache(nv, Clock())
    cache.report(node="local:node-a")
    assert cache.report(node="local:node-b").node == "local:node-b"
    cache.report(node="local:node-b", event_wait_ms=0)
    assert _inits(nv) == 3


def test_ttl_zero_reads_every_time() -> None:
    nv = FakeNvml([FakeGpu(uuid="GPU-0")])
    cache = _cache(nv, Clock(), ttl_s=0)
    cache.report()
    cache.report()
    assert _inits(nv) == 2


def test_concurrent_callers_share_one_probe() -> None:
    nv = FakeNvml([FakeGpu(uuid="GPU-0")])
    cache = _cache(nv, Clock())
    reports: list[NvmlReport] = []
    threads = [threading.Thread(target=lambda: reports.append(cache.report())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _inits(nv) == 1 and len({id(r) for r in reports}) == 1
