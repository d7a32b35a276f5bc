"""A fake ``pynvml`` built from the real module's constants, error classes and structs.

Functions have pynvml's exact names and signatures (a test compares them with
``inspect.signature``), return what pynvml returns (ints, str, tuples, ``c_nvmlDevice_t``
pointers, ``c_nvmlEventData_t`` structs) and fail the way pynvml fails: by raising
``pynvml.NVMLError(code)``, which yields the matching ``NVMLError_*`` subclass.

Scenario knobs per GPU (``FakeGpu``): temperature, power, clock event reason mask, ECC
counters, retired pages pending, remapped rows, ``lost`` (every call raises GpuIsLost) and
``unsupported`` (function names that raise NotSupported). ``inject_xid(index, xid)`` queues
an Xid critical-error event for every event set that registered that GPU. ``init_error``
makes ``nvmlInit`` fail with that NVML error code.
"""

from __future__ import annotations

import ctypes
import types
from dataclasses import dataclass, field
from typing import Any

import pynvml as real

_COPIED_PREFIXES = (
    "NVML_",
    "NVMLError",
    "nvmlClocksEventReason",
    "nvmlClocksThrottleReason",
    "nvmlEventType",
    "c_nvml",
    "struct_c_nvml",
)


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    temperature: int = 41
    power_mw: int = 71_000
    reasons: int = 0
    # (error type, counter type) -> count; missing = 0
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)
    retired_pending: int = 0
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)  # corr, unc, pending, failure
    lost: bool = False
    unsupported: set[str] = field(default_factory=set)
    struct: Any = field(default_factory=real.struct_c_nvmlDevice_t)

    def handle(self) -> Any:
        return ctypes.pointer(self.struct)


class FakeNvml(types.ModuleType):
    def __init__(self, gpus: list[FakeGpu], *, driver: str = "570.86.15") -> None:
        super().__init__("pynvml")
        for name in dir(real):
            if name.startswith(_COPIED_PREFIXES) or name == "nvmlExceptionClass":
                setattr(self, name, getattr(real, name))
        self.gpus = gpus
        self.driver = driver
        self.init_error: int | None = None
        self.initialised = 0
        self.calls: list[str] = []
        self._sets: dict[int, tuple[Any, list[Any], set[int]]] = {}

    # -- helpers (not part of pynvml)
    def _fail(self, code: int) -> None:
        raise real.NVMLError(code)

    def _gpu(self, handle: Any, fn: str) -> FakeGpu:
        self.calls.append(fn)
        if not self.initialised:
            self._fail(real.NVML_ERROR_UNINITIALIZED)
        address = ctypes.addressof(handle.contents)
        for gpu in self.gpus:
            if ctypes.addressof(gpu.struct) == address:
                if gpu.lost:
                    self._fail(real.NVML_ERROR_GPU_IS_LOST)
                if fn in gpu.unsupported:
                    self._fail(real.NVML_ERROR_NOT_SUPPORTED)
                return gpu
        self._fail(real.NVML_ERROR_INVALID_ARGUMENT)
        raise AssertionError

    def inject_xid(self, index: int, xid: int) -> None:
        gpu = self.gpus[index]
        for _, queue, registered in self._sets.values():
            if ctypes.addressof(gpu.struct) in registered:
                data = real.c_nvmlEventData_t()
                data.device = gpu.handle()
                data.eventType = real.nvmlEventTypeXidCriticalError
                data.eventData = xid
                queue.append(data)

    # -- pynvml API (same names and signatures)
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            self._fail(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        if not self.initialised:
            self._fail(real.NVML_ERROR_UNINITIALIZED)
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        if not self.initialised:
            self._fail(real.NVML_ERROR_UNINITIALIZED)
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        if not self.initialised:
            self._fail(real.NVML_ERROR_UNINITIALIZED)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not self.initialised:
            self._fail(real.NVML_ERROR_UNINITIALIZED)
        if not 0 <= index < len(self.gpus):
            self._fail(real.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        if gpu.lost:
            self._fail(real.NVML_ERROR_GPU_IS_LOST)
        return gpu.handle()

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTemperature")
        if sensor != real.NVML_TEMPERATURE_GPU:
            self._fail(real.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").reasons

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        return gpu.ecc.get((errorType, counterType), 0)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        return self._gpu(device, "nvmlDeviceGetRetiredPagesPendingStatus").retired_pending

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        return self._gpu(device, "nvmlDeviceGetRemappedRows").remapped

    def nvmlEventSetCreate(self) -> Any:
        if not self.initialised:
            self._fail(real.NVML_ERROR_UNINITIALIZED)
        struct = real.struct_c_nvmlEventSet_t()
        pointer = ctypes.pointer(struct)
        self._sets[ctypes.addressof(struct)] = (struct, [], set())
        return pointer

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents")
        if eventTypes & real.nvmlEventTypeXidCriticalError:
            self._sets[ctypes.addressof(eventSet.contents)][2].add(ctypes.addressof(gpu.struct))

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> Any:
        queue = self._sets[ctypes.addressof(eventSet.contents)][1]
        if not queue:
            # The real call blocks up to timeoutms, then fails with NVML_ERROR_TIMEOUT.
            self._fail(real.NVML_ERROR_TIMEOUT)
        return queue.pop(0)

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._sets.pop(ctypes.addressof(eventSet.contents), None)
