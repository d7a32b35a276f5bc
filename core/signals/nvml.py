"""GPU health from NVML (the ``nvidia-ml-py`` package, import name ``pynvml``).

``NvmlMonitor`` opens NVML once, registers every GPU for Xid critical-error events, and on
each ``report()`` reads per GPU: temperature, power, clock event (throttle) reasons decoded
to names, ECC volatile/aggregate counters, retired pages pending, row remapping
(pending/failed), the Xid events queued since the last report, and whether the GPU has
fallen off the bus (``NVML_ERROR_GPU_IS_LOST``). Each GPU gets a verdict with reasons.

Limits and rules:
- The nvml module is injected (tests pass a fake with pynvml's names, signatures and error
  classes); by default ``pynvml`` is imported lazily, so core works without it.
- No exception escapes: no package = status ``no_library``; no driver/shared library =
  ``no_nvml``; any other init failure = ``error``. All are typed ``NvmlReport`` statuses.
- A query the GPU or driver does not support (NotSupported, FunctionNotFound,
  NoPermission) is recorded in ``unknown``; it is never a failure.
- Xid events are only seen from the moment the monitor registered for them; older ones
  are in the kernel log, not here. Seen Xids stay on the GPU's report until
  ``clear_xids()`` (a reset GPU starts clean when the monitor is reopened).
- ``ReportCache`` lets a long-lived process (the MCP server) reuse one one-shot report for
  ``REPORT_TTL_S`` seconds instead of opening NVML on every read.
"""

from __future__ import annotations

import ctypes
import importlib
import threading
import time
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from core import logs
from core.schema_base import Model
from core.signals.model import EccCounts, GpuHealth, GpuVerdict, Severity, XidEvent, utcnow
from core.signals.xid import classify_xid

log = logs.get_logger("clawpoint.signals.nvml")

# Clock event reason suffixes (pynvml: nvmlClocksEventReason*, older nvmlClocksThrottleReason*).
_REASONS = [
    ("GpuIdle", "gpu_idle"),
    ("ApplicationsClocksSetting", "applications_clocks_setting"),
    ("SwPowerCap", "sw_power_cap"),
    ("HwSlowdown", "hw_slowdown"),
    ("SyncBoost", "sync_boost"),
    ("SwThermalSlowdown", "sw_thermal_slowdown"),
    ("HwThermalSlowdown", "hw_thermal_slowdown"),
    ("HwPowerBrakeSlowdown", "hw_power_brake_slowdown"),
    ("DisplayClockSetting", "display_clock_setting"),
]
# These slow the GPU because something is wrong (heat, power delivery); the rest are normal.
DEGRADING_REASONS = frozenset(
    {"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown"}
)
MAX_EVENTS_PER_REPORT = 256  # bounds one report even if a GPU floods Xids
MAX_XIDS_KEPT = 32

NVML_FUNCTIONS_USED = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
)
"""Every pynvml function the adapter calls (the test fake must provide each, same signature)."""


class NvmlStatus(StrEnum):
    OK = "ok"
    NO_LIBRARY = "no_library"  # the nvidia-ml-py package is not installed
    NO_NVML = "no_nvml"  # no libnvidia-ml.so / driver not loaded: no NVIDIA GPU here
    ERROR = "error"  # NVML is there but failed to initialise


class NvmlReport(Model):
    status: NvmlStatus
    message: str = ""
    node: str | None = None
    observed_at: datetime = Field(default_factory=utcnow)
    driver_version: str | None = None
    gpus: list[GpuHealth] = Field(default_factory=list)

    @property
    def verdict(self) -> GpuVerdict | None:
        """The worst GPU verdict; None when there are no GPUs to judge."""
        order = [GpuVerdict.HEALTHY, GpuVerdict.DEGRADED, GpuVerdict.FAILED]
        return max((g.verdict for g in self.gpus), key=order.index, default=None)


class _Lost(Exception):
    """The GPU answered NVML_ERROR_GPU_IS_LOST: stop asking it anything."""


def _address(pointer: Any) -> int | None:
    try:
        return ctypes.cast(pointer, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def decode_reasons(nvml: Any, mask: int) -> list[str]:
    """Names of the bits set in a clock event reason mask, using the module's constants."""
    names: list[str] = []
    rest = mask
    for suffix, name in _REASONS:
        bit = getattr(nvml, f"nvmlClocksEventReason{suffix}", None)
        if bit is None:
            bit = getattr(nvml, f"nvmlClocksThrottleReason{suffix}", None)
        if bit and mask & bit:
            names.append(name)
            rest &= ~bit
    if rest:
        names.append(f"unknown_0x{rest:x}")
    return names


def judge(gpu: GpuHealth) -> GpuHealth:
    """Set ``verdict``, ``reasons`` and ``notes`` from the observed fields."""
    failed: list[str] = []
    degraded: list[str] = []
    notes: list[str] = []
    if gpu.lost:
        failed.append("GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST)")
    for ev in gpu.xid_events:
        text = f"Xid {ev.xid}: {ev.meaning}"
        if ev.effect is GpuVerdict.FAILED:
            failed.append(text)
        elif ev.effect is GpuVerdict.DEGRADED:
            degraded.append(text)
        else:
            notes.append(text)
    if gpu.row_remap_failed:
        failed.append("row remapping failed: the GPU needs service")
    if gpu.row_remap_pending:
        degraded.append("row remapping pending: reset the GPU to apply it")
    if gpu.retired_pages_pending:
        degraded.append("retired pages pending: reset the GPU to retire them")
    if gpu.ecc.volatile_uncorrected:
        degraded.append(f"{gpu.ecc.volatile_uncorrected} uncorrectable ECC errors since reset")
    if gpu.ecc.aggregate_uncorrected:
        notes.append(f"{gpu.ecc.aggregate_uncorrected} uncorrectable ECC errors in its lifetime")
    for reason in gpu.throttle_reasons:
        (degraded if reason in DEGRADING_REASONS else notes).append(f"clocks reduced: {reason}")
    verdict = (
        GpuVerdict.FAILED if failed else GpuVerdict.DEGRADED if degraded else GpuVerdict.HEALTHY
    )
    severity = {
        GpuVerdict.HEALTHY: Severity.INFO,
        GpuVerdict.DEGRADED: Severity.WARNING,
        GpuVerdict.FAILED: Severity.CRITICAL,
    }[verdict]
    return gpu.model_copy(
        update={
            "verdict": verdict,
            "reasons": failed + degraded,
            "notes": notes,
            "severity": severity,
            "message": f"GPU {gpu.index} is {verdict.value}",
        }
    )


class NvmlMonitor:
    """Long-lived NVML session; ``report()`` is cheap enough to call every few seconds."""

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        node: str | None = None,
        event_wait_ms: int = 10,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._nvml: Any = nvml
        self._node = node
        self._wait_ms = event_wait_ms
        self._clock = clock
        self._status: NvmlStatus | None = None
        self._message = ""
        self._event_set: Any = None
        self._handles: dict[int, Any] = {}
        self._xids: dict[int, list[XidEvent]] = {}
        self._xid_unknown: dict[int, str] = {}

    # -- lifecycle
    def open(self) -> NvmlStatus:
        if self._status is not None:
            return self._status
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError:
                return self._set(NvmlStatus.NO_LIBRARY, "nvidia-ml-py is not installed")
        nv = self._nvml
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (nv.NVML_ERROR_LIBRARY_NOT_FOUND, nv.NVML_ERROR_DRIVER_NOT_LOADED):
                return self._set(NvmlStatus.NO_NVML, f"no NVIDIA driver/NVML here: {exc}")
            return self._set(NvmlStatus.ERROR, f"nvmlInit failed: {exc}")
        self._register_events()
        return self._set(NvmlStatus.OK, "")

    def _set(self, status: NvmlStatus, message: str) -> NvmlStatus:
        self._status, self._message = status, message
        if status is not NvmlStatus.OK:
            log.info("nvml not available", status=status.value, reason=message)
        return status

    def _register_events(self) -> None:
        nv = self._nvml
        try:
            self._event_set = nv.nvmlEventSetCreate()
        except nv.NVMLError as exc:
            self._xid_unknown[-1] = f"xid events: {exc}"
            return
        for index in range(self._count()):
            try:
                handle = self._handle(index)
                nv.nvmlDeviceRegisterEvents(
                    handle, nv.nvmlEventTypeXidCriticalError, self._event_set
                )
            except nv.NVMLError as exc:
                # NotSupported on some GPUs/platforms; a lost GPU is caught by its queries.
                self._xid_unknown[index] = f"xid events: {exc}"

    def close(self) -> None:
        nv = self._nvml
        if self._status is NvmlStatus.OK and nv is not None:
            try:
                if self._event_set is not None:
                    nv.nvmlEventSetFree(self._event_set)
                nv.nvmlShutdown()
            except nv.NVMLError as exc:
                log.warning("nvml shutdown failed", error=str(exc))
        self._status = None
        self._event_set = None
        self._handles.clear()

    def __enter__(self) -> NvmlMonitor:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def clear_xids(self) -> None:
        self._xids.clear()

    # -- reading
    def _count(self) -> int:
        return int(self._nvml.nvmlDeviceGetCount())

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._nvml.nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def _drain_events(self) -> None:
        nv = self._nvml
        if self._event_set is None:
            return
        by_address = {_address(h): i for i, h in self._handles.items()}
        for _ in range(MAX_EVENTS_PER_REPORT):
            try:
                data = nv.nvmlEventSetWait_v2(self._event_set, self._wait_ms)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) != nv.NVML_ERROR_TIMEOUT:
                    log.warning("nvml event wait failed", error=str(exc))
                return
            if not data.eventType & nv.nvmlEventTypeXidCriticalError:
                continue
            index = by_address.get(_address(data.device), -1)
            info = classify_xid(int(data.eventData))
            seen = self._xids.setdefault(index, [])
            seen.append(
                XidEvent(
                    xid=int(data.eventData),
                    observed_at=self._clock(),
                    meaning=info.meaning,
                    effect=info.effect,
                )
            )
            del seen[:-MAX_XIDS_KEPT]

    def report(self) -> NvmlReport:
        status = self.open()
        now = self._clock()
        if status is not NvmlStatus.OK:
            return NvmlReport(
                status=status, message=self._message, node=self._node, observed_at=now
            )
        nv = self._nvml
        try:
            count = self._count()
            driver = str(nv.nvmlSystemGetDriverVersion())
        except nv.NVMLError as exc:
            return NvmlReport(
                status=NvmlStatus.ERROR, message=f"NVML query failed: {exc}", node=self._node
            )
        self._drain_events()
        gpus = [self._gpu(i, now) for i in range(count)]
        stray = self._xids.get(-1)
        message = f"Xids from an unknown device: {[x.xid for x in stray]}" if stray else ""
        return NvmlReport(
            status=NvmlStatus.OK,
            message=message,
            node=self._node,
            observed_at=now,
            driver_version=driver,
            gpus=gpus,
        )

    def _gpu(self, index: int, now: datetime) -> GpuHealth:
        nv = self._nvml
        unknown: list[str] = []
        if index in self._xid_unknown:
            unknown.append(self._xid_unknown[index])
        fields: dict[str, Any] = {}

        def ask(what: str, fn: str, *args: Any) -> Any:
            try:
                return getattr(nv, fn)(*args)
            except nv.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code == nv.NVML_ERROR_GPU_IS_LOST:
                    raise _Lost from exc
                unknown.append(f"{what}: {exc}")
                return None
            except AttributeError:  # an older pynvml without this function
                unknown.append(f"{what}: not in this pynvml")
                return None

        no_handle = False
        try:
            handle = ask("handle", "nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                no_handle = True
            else:
                self._handles[index] = handle
                fields.update(self._read(ask, handle))
        except _Lost:
            fields["lost"] = True
        gpu = judge(
            GpuHealth(
                source="nvml",
                observed_at=now,
                subject=f"{self._node}/gpu{index}" if self._node else f"gpu{index}",
                node=self._node,
                index=index,
                xid_events=list(self._xids.get(index, [])),
                unknown=unknown,
                **fields,
            )
        )
        if no_handle and gpu.verdict is GpuVerdict.HEALTHY:
            # A GPU NVML counts but will not hand out is not "healthy": we cannot see it.
            gpu = gpu.model_copy(
                update={
                    "verdict": GpuVerdict.DEGRADED,
                    "severity": Severity.WARNING,
                    "reasons": [*gpu.reasons, "NVML gives no handle for this GPU"],
                }
            )
        return gpu

    def _read(self, ask: Callable[..., Any], handle: Any) -> dict[str, Any]:
        nv = self._nvml
        out: dict[str, Any] = {
            "uuid": ask("uuid", "nvmlDeviceGetUUID", handle),
            "name": ask("name", "nvmlDeviceGetName", handle),
            "temperature_c": ask(
                "temperature", "nvmlDeviceGetTemperature", handle, nv.NVML_TEMPERATURE_GPU
            ),
        }
        milliwatts = ask("power", "nvmlDeviceGetPowerUsage", handle)
        out["power_w"] = None if milliwatts is None else milliwatts / 1000.0
        if hasattr(nv, "nvmlDeviceGetCurrentClocksEventReasons"):
            mask = ask("clock event reasons", "nvmlDeviceGetCurrentClocksEventReasons", handle)
        else:
            mask = ask("throttle reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        out["throttle_mask"] = mask
        out["throttle_reasons"] = [] if mask is None else decode_reasons(nv, int(mask))
        corrected, uncorrected = (
            nv.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        )
        volatile, aggregate = nv.NVML_VOLATILE_ECC, nv.NVML_AGGREGATE_ECC
        ecc = "nvmlDeviceGetTotalEccErrors"
        out["ecc"] = EccCounts(
            volatile_corrected=ask("ecc volatile corrected", ecc, handle, corrected, volatile),
            volatile_uncorrected=ask(
                "ecc volatile uncorrected", ecc, handle, uncorrected, volatile
            ),
            aggregate_corrected=ask("ecc aggregate corrected", ecc, handle, corrected, aggregate),
            aggregate_uncorrected=ask(
                "ecc aggregate uncorrected", ecc, handle, uncorrected, aggregate
            ),
        )
        pending = ask("retired pages pending", "nvmlDeviceGetRetiredPagesPendingStatus", handle)
        out["retired_pages_pending"] = None if pending is None else bool(pending)
        rows = ask("remapped rows", "nvmlDeviceGetRemappedRows", handle)
        if rows is not None:
            corr, unc, is_pending, failed = rows
            out.update(
                remapped_rows_correctable=int(corr),
                remapped_rows_uncorrectable=int(unc),
                row_remap_pending=bool(is_pending),
                row_remap_failed=bool(failed),
            )
        return out


def probe(
    nvml: Any | None = None, *, node: str | None = None, event_wait_ms: int = 10
) -> NvmlReport:
    """One-shot report (only Xids that arrive while it runs are seen)."""
    with NvmlMonitor(nvml, node=node, event_wait_ms=event_wait_ms) as monitor:
        return monitor.report()


REPORT_TTL_S = 5.0
"""How long a long-lived process reuses one one-shot report (``ReportCache``)."""


class ReportCache:
    """One-shot reports (``probe``) reused for ``ttl_s`` seconds; safe across threads.

    Each probe initialises NVML, registers for Xid events, waits ``event_wait_ms`` for them
    and shuts NVML down again: tens of milliseconds with a driver, and a log line without
    one. A server answering read tools many times a second probes at most once per
    ``ttl_s``; concurrent callers wait for the one probe in flight and share its report.
    Limits: a report can be up to ``ttl_s`` old (its ``observed_at`` says when it was
    read); the watch loop keeps its own long-lived ``NvmlMonitor`` and is not affected."""

    def __init__(
        self,
        *,
        ttl_s: float = REPORT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[..., NvmlReport] = probe,
    ) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._probe = probe
        self._lock = threading.Lock()
        self._last: tuple[tuple[str | None, int], float, NvmlReport] | None = None

    def report(self, *, node: str | None = None, event_wait_ms: int = 10) -> NvmlReport:
        """The real NVML's report for ``node``: the last one while fresh, else a new probe."""
        key = (node, event_wait_ms)
        with self._lock:
            last = self._last
            if last is not None and last[0] == key and self._clock() - last[1] < self.ttl_s:
                return last[2]
            report = self._probe(None, node=node, event_wait_ms=event_wait_ms)
            self._last = (key, self._clock(), report)
            return report
